import numpy as np
import pytest

from shardopt.arithmetic.access import row_buckets
from shardopt.profile.bags import Bags, sample_bags, sample_ids
from shardopt.core.workload import Table, UniformAccess, ZipfAccess


def _table(access=UniformAccess(), rows=10_000, pooling=8.0):
    return Table(name="t", num_embeddings=rows, embedding_dim=16, pooling_factor=pooling, access=access)


def test_ids_are_in_range_and_follow_the_skew():
    table = _table(ZipfAccess("zipf", 1.1))
    ids = sample_ids(table, 200_000, np.random.default_rng(0))
    assert ids.min() >= 0 and ids.max() < table.num_embeddings
    counts = np.sort(np.bincount(ids, minlength=table.num_embeddings))[::-1]
    assert counts[:100].sum() / len(ids) == pytest.approx(row_buckets(table).top_share(100), rel=0.03)


def test_hot_rows_spread_over_row_blocks():
    table = _table(ZipfAccess("zipf", 1.2), rows=8000)
    ids = sample_ids(table, 100_000, np.random.default_rng(1))
    per_block = np.bincount(ids // 1000, minlength=8) / len(ids)
    assert per_block.max() < 0.4  # without hashing, block 0 would get most of the lookups


def test_bags_have_the_pooling_factor_and_route_by_rows():
    table = _table(pooling=6.0)
    bags = sample_bags(table, 4096, np.random.default_rng(2))
    assert bags.lengths.mean() == pytest.approx(6.0, rel=0.05)
    assert len(bags.ids) == bags.lengths.sum()
    lo = bags.rows(0, 5000)
    hi = bags.rows(5000, 5000)
    assert np.array_equal(lo.lengths + hi.lengths, bags.lengths)
    assert hi.ids.min() >= 0 and hi.ids.max() < 5000
    assert sorted(np.concatenate([lo.ids, hi.ids + 5000])) == sorted(bags.ids)


def test_samples_slice_a_local_batch():
    bags = Bags(np.arange(10), np.array([2, 3, 0, 5]))
    local = bags.samples(1, 2)
    assert local.lengths.tolist() == [3, 0]
    assert local.ids.tolist() == [2, 3, 4]
    assert local.offsets.tolist() == [0, 3, 3]


def test_same_seed_same_batch():
    table = _table(ZipfAccess("zipf", 0.9))
    a = sample_bags(table, 512, np.random.default_rng(7))
    b = sample_bags(table, 512, np.random.default_rng(7))
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.lengths, b.lengths)
