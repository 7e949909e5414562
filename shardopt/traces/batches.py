"""Per-feature statistics measured from the batches a TorchRec dataloader yields (issue 35).

A ``KeyedJaggedTensor`` per batch: for each feature, the bag lengths give the pooling factor (mean
and spread), the ids give the access curve (the share of lookups on the hottest 0.1%, 1% and 10%
of the table's rows), the distinct rows and the access-count histogram the workload's
``histogram`` access takes. Streaming in bounded memory: a feature's ids are counted exactly while
they have at most ``max_distinct`` distinct values; beyond, only the ``max_distinct`` most-counted
are kept (lossy counting: a pruned id that comes back restarts at the largest count pruned, so no
count is under-estimated by more than that), and the number of distinct ids is estimated from the
smallest hashes seen (k-minimum values). Weighted features count lookups, as the kernel does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

import numpy as np

from shardopt.core.errors import ShardoptError
from shardopt.core.workload import HIST_BINS
from shardopt.traces.stats import count_bins

MAX_DISTINCT = 1 << 21  # ids counted per feature (16 bytes each): 32 MiB a feature at most
BUFFER_IDS = 1 << 21  # ids held before they are folded into the counts
KMV = 4096  # smallest hashes kept for the distinct-count estimate (about 1.6% error)
SHARES = (0.001, 0.01, 0.1)  # the access curve's points: hottest fractions of the table's rows
WELL_SAMPLED = 16  # a row read this often has a count that says its rank (Poisson error <= 25%)
MIN_HEAD = 20  # well-sampled rows needed to fit the head's exponent
_MASK = np.uint64((1 << 64) - 1)


def _hash(ids: np.ndarray) -> np.ndarray:
    """A 64-bit mix of each id (splitmix64): uniform enough for k-minimum values."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


@dataclass
class FeatureCounter:
    """One feature's running counts (see the module's docstring for the bounds)."""

    rows: int  # the table's num_embeddings (the caller checks ids against it)
    max_distinct: int = MAX_DISTINCT
    bags: int = 0  # samples (bags of the first feature read in each batch)
    lookups: int = 0
    length_sq: float = 0.0
    batches: int = 0
    touched_per_batch: float = 0.0  # summed over batches: distinct ids in each
    pruned_count: int = 0  # the largest count pruned: every kept count is within it of the truth
    _ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _buffer: list = field(default_factory=list)
    _buffered: int = 0
    _kmv: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))

    def add(self, ids: np.ndarray, lengths: np.ndarray, new_batch: bool = True) -> None:
        """One feature of one batch: ``lengths`` per bag, ``ids`` their concatenation. A table read
        by several features takes each (``new_batch`` False after the first: the same samples)."""
        if new_batch:
            self.batches += 1
            self.bags += len(lengths)
        self.lookups += len(ids)
        self.length_sq += float(np.square(lengths.astype(np.float64)).sum())
        if not len(ids):
            return
        unique, counts = np.unique(ids, return_counts=True)
        self.touched_per_batch += len(unique)  # a second feature's rows may repeat the first's: an upper bound
        self._buffer.append((unique, counts))
        self._buffered += len(unique)
        hashes = _hash(unique)
        self._kmv = np.unique(np.concatenate([self._kmv, hashes]))[:KMV]
        if self._buffered >= BUFFER_IDS:
            self._fold()

    def _fold(self) -> None:
        if not self._buffer:
            return
        ids = np.concatenate([self._ids] + [u for u, _ in self._buffer])
        counts = np.concatenate([self._counts] + [c for _, c in self._buffer])
        self._buffer, self._buffered = [], 0
        order = np.argsort(ids, kind="stable")
        ids, counts = ids[order], counts[order]
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        self._ids, self._counts = ids[starts], np.add.reduceat(counts, starts)
        if len(self._ids) > self.max_distinct:
            keep = np.argpartition(-self._counts, self.max_distinct)[: self.max_distinct]
            dropped = np.ones(len(self._ids), bool)
            dropped[keep] = False
            self.pruned_count = max(self.pruned_count, int(self._counts[dropped].max()))
            keep.sort()
            self._ids, self._counts = self._ids[keep], self._counts[keep]

    @property
    def exact(self) -> bool:
        return self.pruned_count == 0

    def distinct(self) -> int:
        """Distinct ids seen: exact while nothing was pruned, else the k-minimum-values estimate."""
        self._fold()
        if self.exact:
            return len(self._ids)
        if len(self._kmv) < KMV:
            return len(self._kmv)
        kth = float(self._kmv[-1]) / float(_MASK)
        return max(len(self._ids), int((KMV - 1) / kth))

    def counts(self) -> np.ndarray:
        self._fold()
        return self._counts


@dataclass(frozen=True)
class FeatureStats:
    """What a feature's batches say about its table."""

    batches: int
    bags: int
    lookups: int
    pooling_factor: float  # mean ids per sample (over every feature that reads the table)
    pooling_sd: float  # their spread across bags
    distinct: int  # distinct rows read over all batches (estimated where ``exact`` is False)
    rows_touched: int  # distinct rows one batch reads, on average (the workload takes ``distinct``: rows ever read)
    hot_shares: tuple[float, ...]  # share of lookups on the hottest SHARES of the table's rows
    unique_frac: tuple[float, ...]
    access_frac: tuple[float, ...]
    exact: bool
    # how the hottest shares beyond the well-sampled rows were found: "observed" (every such row
    # was read often enough), "fitted" (the head's power law carried on), "under-sampled" (too few
    # well-read rows to fit: the rest spread evenly, the least skew the counts allow)
    shares_from: str = "observed"


def _power_integral(lo: float, hi: float, s: float) -> float:
    """The integral of r^-s over [lo, hi]: the mass a power law puts on ranks lo..hi."""
    if hi <= lo:
        return 0.0
    if abs(s - 1.0) < 1e-9:
        return float(np.log(hi / lo))
    return float((hi ** (1 - s) - lo ** (1 - s)) / (1 - s))


def hot_shares(counts: np.ndarray, lookups: int, rows: int) -> tuple[tuple[float, ...], str]:
    """Share of lookups on each SHARES fraction of the hottest rows, from counts sorted descending.

    Where the hottest fraction reaches rows read fewer than WELL_SAMPLED times, the counts no
    longer rank the rows (a row seen once by chance ranks with a hot one), and the observed share
    overstates the skew, by tens of points on a table far larger than the lookups seen. There the
    well-read head's exponent (least squares in log-log) spreads the rest of the lookups over the
    rest of the table, as the Zipf law the head follows would; with too few well-read rows to fit,
    the rest is spread evenly (the least skew the counts allow: "under-sampled")."""
    if not lookups:
        return (0.0,) * len(SHARES), "observed"
    cum = np.cumsum(counts, dtype=np.float64)
    exponent, head = 0.0, int(np.searchsorted(-counts, -WELL_SAMPLED, side="right"))
    fitted = False
    for floor in (WELL_SAMPLED, WELL_SAMPLED // 4):  # a sparser sample fits on rows read 4+ times
        rows_read = int(np.searchsorted(-counts, -floor, side="right"))  # rows read >= floor times
        if rows_read >= MIN_HEAD:
            ranks = np.arange(1, rows_read + 1, dtype=np.float64)
            slope = np.polyfit(np.log(ranks), np.log(counts[:rows_read]), 1)[0]
            exponent, head, fitted = float(np.clip(-slope, 0.0, 3.0)), rows_read, True
            break
    head_mass = float(cum[head - 1]) if head else 0.0
    shares, extrapolated = [], False
    for share in SHARES:
        top = max(1, int(np.ceil(share * rows)))
        observed = float(cum[min(top, len(cum)) - 1]) if len(cum) else 0.0
        if top > head:  # beyond the well-read head: the power law (or an even spread) carries on
            rest = (lookups - head_mass) * _power_integral(head + 0.5, top + 0.5, exponent) / max(
                _power_integral(head + 0.5, rows + 0.5, exponent), 1e-300)
            observed, extrapolated = min(head_mass + rest, observed), True
        shares.append(observed / lookups)
    return tuple(shares), ("fitted" if fitted else "under-sampled") if extrapolated else "observed"


def feature_stats(counter: FeatureCounter) -> FeatureStats:
    counts = np.sort(counter.counts())[::-1]
    lookups = counter.lookups  # pruned ids' lookups included
    shares, shares_from = hot_shares(counts, lookups, counter.rows)
    distinct = counter.distinct()
    unique, access = _histogram(counts, distinct, lookups)
    mean = counter.lookups / counter.bags if counter.bags else 0.0
    var = max(counter.length_sq / counter.bags - mean * mean, 0.0) if counter.bags else 0.0
    return FeatureStats(
        batches=counter.batches, bags=counter.bags, lookups=counter.lookups, pooling_factor=mean,
        pooling_sd=float(np.sqrt(var)), distinct=distinct,
        rows_touched=int(round(counter.touched_per_batch / counter.batches)) if counter.batches else 0,
        hot_shares=shares, unique_frac=unique, access_frac=access, exact=counter.exact,
        shares_from=shares_from,
    )


def _histogram(counts: np.ndarray, distinct: int, lookups: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The 17-bin access-count histogram; ids pruned from the counts go to the bin of their mean
    count (they are the coldest, read at most ``pruned_count`` times each)."""
    if not lookups or not distinct:
        zeros = (0.0,) * HIST_BINS
        return zeros, zeros
    bins = count_bins(counts)
    rows = np.bincount(bins, minlength=HIST_BINS).astype(np.float64)
    mass = np.bincount(bins, weights=counts, minlength=HIST_BINS)
    missing_rows, missing_mass = distinct - len(counts), lookups - float(counts.sum())
    if missing_rows > 0 and missing_mass > 0:
        k = int(count_bins(np.array([max(missing_mass / missing_rows, 1.0)]))[0])
        rows[k] += missing_rows
        mass[k] += missing_mass
    return (tuple(round(float(x), 6) for x in rows / rows.sum()),
            tuple(round(float(x), 6) for x in mass / mass.sum()))


def measure_batches(batches: Iterable, tables: Mapping[str, tuple[str, int]], limit: Optional[int] = None,
                    source: str = "batches", max_distinct: int = MAX_DISTINCT) -> dict[str, FeatureStats]:
    """Statistics per table of up to ``limit`` KeyedJaggedTensors; ``tables``: each feature's table
    and that table's rows. A feature the model lacks, an empty stream, ids out of range: ShardoptError."""
    counters: dict[str, FeatureCounter] = {}
    for table, rows in tables.values():
        counters.setdefault(table, FeatureCounter(rows, max_distinct))
    seen = 0
    for batch in batches:
        if limit is not None and seen >= limit:
            break
        keys = list(batch.keys())
        unknown = [k for k in keys if k not in tables]
        if unknown:
            raise ShardoptError(f"{source}: batch {seen}: feature {unknown[0]!r} is in no table of the model"
                                f" (its features: {', '.join(sorted(tables)[:8])})")
        first = set()
        for key, jagged in batch.to_dict().items():
            table, rows = tables[key]
            ids = jagged.values().detach().cpu().numpy().astype(np.int64)
            bad = int(((ids < 0) | (ids >= rows)).sum())
            if bad:
                raise ShardoptError(f"{source}: batch {seen}: feature {key!r}: {bad} ids outside table"
                                    f" {table!r}'s {rows} rows (num_embeddings)")
            counters[table].add(ids, jagged.lengths().detach().cpu().numpy().astype(np.int64), table not in first)
            first.add(table)
        seen += 1
    if seen == 0:
        raise ShardoptError(f"{source}: yielded no batch")
    return {name: feature_stats(c) for name, c in counters.items() if c.batches}
