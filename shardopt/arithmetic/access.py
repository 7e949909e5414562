"""How lookups spread over a table's rows, as a few buckets of rows with equal probability.

Every access distribution (uniform, Zipf, a dataset histogram) reduces to ``RowBuckets``: row
counts and per-row probabilities, hottest first. The cost model asks two questions of it — what
share of lookups hits the hottest k rows (what a cache holds), and how many distinct rows a batch
touches (what the backward pass updates) — and both have closed forms over buckets.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from shardopt.core.workload import (
    HIST_BINS, BucketsAccess, HistogramAccess, Table, UniformAccess, ZipfAccess,
)

_ZIPF_EXACT_RANKS = 1024  # ranks summed exactly; beyond, log-spaced buckets
_ZIPF_BUCKETS = 64


@dataclass(frozen=True)
class RowBuckets:
    """``counts[i]`` rows each drawn with probability ``probs[i]`` per lookup, hottest first."""

    counts: np.ndarray
    probs: np.ndarray

    def top_share(self, k: float) -> float:
        """Share of lookups that hit the ``k`` hottest rows."""
        if k <= 0:
            return 0.0
        cum_rows = np.cumsum(self.counts)
        mass = self.counts * self.probs
        full = cum_rows <= k
        share = float(mass[full].sum())
        idx = int(full.sum())
        if idx < len(self.counts):
            prev = cum_rows[idx - 1] if idx else 0.0
            share += float((k - prev) * self.probs[idx])
        return min(share, 1.0)

    def rows_for_share(self, share: float) -> float:
        """The fewest hottest rows that draw ``share`` of the lookups (inverse of top_share)."""
        if share <= 0:
            return 0.0
        mass = self.counts * self.probs
        cum_mass = np.cumsum(mass)
        idx = int(np.searchsorted(cum_mass, min(share, float(cum_mass[-1])) - 1e-12))
        idx = min(idx, len(self.counts) - 1)
        before_rows = float(np.sum(self.counts[:idx]))
        before_mass = float(cum_mass[idx - 1]) if idx else 0.0
        return before_rows + max(share - before_mass, 0.0) / float(self.probs[idx])

    def split(self, k: float) -> tuple["RowBuckets", "RowBuckets"]:
        """The ``k`` hottest rows and the rest, as two distributions (each normalised)."""
        cum = np.cumsum(self.counts)
        head_counts = np.minimum(self.counts, np.maximum(k - (cum - self.counts), 0.0))
        tail_counts = self.counts - head_counts
        parts = []
        for counts in (head_counts, tail_counts):
            keep = counts > 1e-9
            probs = self.probs[keep]
            mass = float(np.sum(counts[keep] * probs))
            parts.append(RowBuckets(counts[keep], probs / mass))
        return parts[0], parts[1]

    def coarse(self, ratio: float = 1.5) -> "RowBuckets":
        """Neighbouring buckets whose per-row probabilities lie within ``ratio`` merged (mass kept):
        a few dozen buckets where a Zipf table has a thousand, for sums evaluated many times."""
        probs = self.probs
        if len(probs) > 1 and probs[-1] > 0 and bool(np.all(probs[1:] <= probs[:-1])):
            return self._coarse_sorted(ratio)
        return self._coarse_in_turn(ratio)

    def _coarse_in_turn(self, ratio: float) -> "RowBuckets":
        """:meth:`coarse` bucket by bucket, in any order."""
        counts, masses = [], []
        head = None
        for count, prob in zip(self.counts, self.probs):
            if head is not None and prob * ratio >= head and prob > 0:
                counts[-1] += count
                masses[-1] += count * prob
            else:
                head = prob
                counts.append(float(count))
                masses.append(float(count * prob))
        c = np.array(counts)
        return RowBuckets(c, np.array(masses) / c)

    def _coarse_sorted(self, ratio: float) -> "RowBuckets":
        """:meth:`coarse` of buckets hottest first, group by group: each group runs to the first
        bucket below its head over ``ratio``, and sums in order as the loop does (cumsum is
        sequential), so the floats are the loop's (a Zipf table's thousand buckets looped in Python
        were a second of a 5000-table plan)."""
        probs = self.probs
        descending = -(probs * ratio)  # ascending, as searchsorted needs
        products = self.counts * probs
        counts, masses = [], []
        start = 0
        while start < len(probs):
            end = int(np.searchsorted(descending, -probs[start], side="right"))
            counts.append(float(np.cumsum(self.counts[start:end])[-1]))
            masses.append(float(np.cumsum(products[start:end])[-1]))
            start = end
        c = np.array(counts)
        return RowBuckets(c, np.array(masses) / c)

    def expected_unique(self, lookups: float) -> float:
        """Expected distinct rows touched by ``lookups`` independent draws."""
        if lookups <= 0:
            return 0.0
        return float(np.sum(self.counts * -np.expm1(-lookups * self.probs)))


@lru_cache(maxsize=65536)
def row_buckets(table: Table) -> RowBuckets:
    """The bucket form of a table's access distribution."""
    access = table.access
    n = table.num_embeddings
    if isinstance(access, UniformAccess):
        return RowBuckets(np.array([float(n)]), np.array([1.0 / n]))
    if isinstance(access, ZipfAccess):
        return _zipf_buckets(n, access.alpha)
    if isinstance(access, HistogramAccess):
        return _histogram_buckets(n, access)
    if isinstance(access, BucketsAccess):
        counts = np.array(access.rows, dtype=np.float64)
        counts *= n / counts.sum()  # the buckets cover exactly the table's rows
        weights = np.array(access.weights, dtype=np.float64)
        return RowBuckets(counts, weights / float(np.sum(counts * weights)))
    raise TypeError(f"unknown access distribution {access!r}")


@lru_cache(maxsize=65536)
def cache_buckets(table: Table) -> RowBuckets:
    """The coarse bucket form the cache model sums over (see :meth:`RowBuckets.coarse`)."""
    return row_buckets(table).coarse()


@lru_cache(maxsize=4096)
def _zipf_buckets(n: int, alpha: float) -> RowBuckets:
    exact = min(n, _ZIPF_EXACT_RANKS)
    ranks = np.arange(1, exact + 1, dtype=np.float64)
    counts = [np.ones(exact)]
    weights = [ranks**-alpha]
    if n > exact:
        edges = np.unique(np.geomspace(exact + 1, n + 1, _ZIPF_BUCKETS + 1).round())
        lo, hi = edges[:-1], edges[1:]
        # Sum of i**-alpha over [lo, hi) by the midpoint integral, accurate for i > 1000.
        a, b = lo - 0.5, hi - 0.5
        if abs(alpha - 1.0) < 1e-9:
            mass = np.log(b / a)
        else:
            mass = (b ** (1 - alpha) - a ** (1 - alpha)) / (1 - alpha)
        counts.append(hi - lo)
        weights.append(mass / (hi - lo))
    count = np.concatenate(counts)
    weight = np.concatenate(weights)
    total = float(np.sum(count * weight))
    return RowBuckets(count, weight / total)


def _bin_counts() -> np.ndarray:
    """A representative access count per histogram bin: the geometric middle of (2^(k-1), 2^k]."""
    counts = np.array([1.0] + [2.0 ** (k - 0.5) for k in range(1, HIST_BINS)])
    counts[-1] = 2.0**16  # the open bin (32768, inf): take twice its lower edge
    return counts


def _histogram_buckets(n: int, access: HistogramAccess) -> RowBuckets:
    uniq = np.array(access.unique_frac, dtype=np.float64)
    acc = np.array(access.access_frac, dtype=np.float64)
    acc = acc / acc.sum()
    counts = _bin_counts()
    # The dataset rounds to 3 decimals, so the hottest bins show 0.000 rows but real lookups.
    # Give such bins the rows their lookups imply at the bin's representative count.
    mean_per_row = float(np.sum(uniq * counts)) / max(float(uniq.sum()), 1e-12)
    implied = acc * mean_per_row / counts
    uniq = np.where((uniq == 0) & (acc > 0), implied, uniq)
    uniq = uniq / uniq.sum()
    touched = float(access.rows_touched or n)
    rows = uniq * touched
    keep = (rows > 0) & (acc > 0)
    rows, acc = rows[keep][::-1], acc[keep][::-1]  # hottest first
    acc = acc / acc.sum()
    probs = acc / rows
    if touched < n:
        rows = np.append(rows, n - touched)
        probs = np.append(probs, 0.0)
    return RowBuckets(rows, probs)
