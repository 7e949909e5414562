"""Access distributions in bucket form agree with sampling from them."""

import numpy as np
import pytest

from shardopt.arithmetic.access import row_buckets
from shardopt.traces.synth import trace_histograms
from shardopt.core.workload import HistogramAccess, Table, UniformAccess, ZipfAccess


def _table(access, rows=50_000):
    return Table(name="t", num_embeddings=rows, embedding_dim=16, access=access)


def _zipf_probs(rows, alpha):
    p = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
    return p / p.sum()


@pytest.mark.parametrize("alpha", [0.6, 1.0, 1.05, 1.3])
def test_zipf_buckets_match_exact_sums(alpha):
    rows = 50_000
    buckets = row_buckets(_table(ZipfAccess("zipf", alpha), rows))
    exact = _zipf_probs(rows, alpha)
    assert buckets.counts.sum() == pytest.approx(rows)
    assert (buckets.counts * buckets.probs).sum() == pytest.approx(1.0)
    for k in (10, 1000, 5000, 20_000):
        assert buckets.top_share(k) == pytest.approx(exact[:k].sum(), rel=1e-3)
    lookups = 30_000
    expected_unique = np.sum(-np.expm1(-lookups * exact))
    assert buckets.expected_unique(lookups) == pytest.approx(expected_unique, rel=1e-2)


def test_uniform_unique_rows_match_sampling():
    rows, lookups = 10_000, 25_000
    buckets = row_buckets(_table(UniformAccess(), rows))
    rng = np.random.default_rng(0)
    sampled = np.mean([len(np.unique(rng.integers(0, rows, lookups))) for _ in range(20)])
    assert buckets.expected_unique(lookups) == pytest.approx(sampled, rel=0.01)
    assert buckets.top_share(2_500) == pytest.approx(0.25)


def test_histogram_buckets_are_skewed_like_the_trace():
    _, uniq, acc = trace_histograms()[0]
    buckets = row_buckets(_table(HistogramAccess("histogram", tuple(uniq), tuple(acc))))
    assert (buckets.counts * buckets.probs).sum() == pytest.approx(1.0)
    assert buckets.counts.sum() == pytest.approx(50_000)
    # In the 2021 trace, the rows seen once (47% of touched rows) take 6.9% of lookups.
    assert 1 - buckets.top_share(50_000 * (1 - 0.473)) == pytest.approx(0.069, rel=0.05)
    assert np.all(np.diff(buckets.probs) <= 0)  # hottest first


def test_rows_touched_leaves_cold_rows_unread():
    uniq = (1.0,) + (0.0,) * 16
    access = HistogramAccess("histogram", uniq, uniq, rows_touched=1000)
    buckets = row_buckets(_table(access, rows=10_000))
    assert buckets.top_share(1000) == pytest.approx(1.0)
    assert buckets.expected_unique(10**9) == pytest.approx(1000)
