"""The shared-cache model: Che's characteristic time, coarse buckets, and what sharing does to cost."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardopt.arithmetic.access import row_buckets
from shardopt.costmodel.cpu_cache import CacheRows, characteristic_time
from shardopt.core.workload import Table, ZipfAccess

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(
    seed=st.integers(0, 10_000),
    buckets=st.integers(1, 300),
    fill=st.floats(0.01, 0.99),
)
def test_characteristic_time_fills_the_cache_exactly(seed, buckets, fill):
    rng = np.random.default_rng(seed)
    rows = CacheRows(rng.uniform(64, 1e6, buckets), 10 ** rng.uniform(-7, 3, buckets))
    cache = fill * rows.bytes.sum()
    time = characteristic_time([rows], cache)
    occupancy = float(np.dot(rows.bytes, rows.hit(time)))
    assert occupancy == pytest.approx(cache, rel=1e-4)


def test_everything_fits_means_every_touched_row_hits():
    rows = CacheRows(np.array([100.0, 200.0, 50.0]), np.array([1.0, 0.01, 0.0]))
    time = characteristic_time([rows], 1e6)
    assert math.isinf(time)
    assert list(rows.hit(time)) == [1.0, 1.0, 0.0]  # a row never drawn is never cached


def test_sharing_shortens_the_time():
    a = CacheRows(np.full(10, 1e6), np.logspace(-3, 1, 10))
    b = CacheRows(np.full(10, 1e6), np.logspace(-2, 0, 10))
    assert characteristic_time([a, b], 4e6) < characteristic_time([a], 4e6)


@PROPERTY
@given(alpha=st.floats(0.5, 1.5), rows=st.integers(10, 2_000_000), ratio=st.floats(1.1, 3.0))
def test_coarse_buckets_keep_rows_and_lookups(alpha, rows, ratio):
    fine = row_buckets(Table(name="t", num_embeddings=rows, embedding_dim=16, access=ZipfAccess("zipf", alpha)))
    coarse = fine.coarse(ratio)
    assert coarse.counts.sum() == pytest.approx(fine.counts.sum())
    assert float(np.dot(coarse.counts, coarse.probs)) == pytest.approx(1.0)
    assert len(coarse.counts) <= len(fine.counts)
    # Merged buckets keep probabilities within the ratio of their hottest member.
    assert np.all(np.diff(coarse.probs) <= 1e-12)


@PROPERTY
@given(seed=st.integers(0, 10_000), buckets=st.integers(1, 400), ratio=st.floats(1.01, 3.0),
       sort=st.booleans(), ties=st.booleans(), zeros=st.integers(0, 3))
def test_coarse_buckets_are_the_loops_floats_bit_for_bit(seed, buckets, ratio, sort, ties, zeros):
    """Same buckets, same floats, group by group (sorted) as bucket by bucket: the costs a plan
    is chosen by (and so its bytes) rest on them."""
    from shardopt.arithmetic.access import RowBuckets

    rng = np.random.default_rng(seed)
    probs = rng.random(buckets) ** rng.integers(1, 8)
    probs = np.round(probs, 2) if ties else probs
    probs = np.sort(probs)[::-1].copy() if sort else probs
    if zeros:
        probs[-zeros:] = 0.0  # rows never drawn: each stays a bucket of its own
    fine = RowBuckets(rng.integers(1, 1000, buckets) * rng.random(buckets), probs)
    in_turn = fine._coarse_in_turn(ratio)
    coarse = fine.coarse(ratio)
    assert coarse.counts.tobytes() == in_turn.counts.tobytes()
    assert np.array_equal(coarse.probs, in_turn.probs, equal_nan=True)
