"""A cache shared by the shards of one fused kernel, by Che's approximation of LRU.

A rank runs its shards in one fused kernel, iteration after iteration, so every shard's rows compete
for the same cache: a table measured alone keeps its hot rows cached across iterations, the same
table fused with ten others does not (measured on the CPU profile: fused kernels cost 1.0-1.7x the
sum of their tables run alone). Che's approximation (Che, Tung and Wang, JSAC 2002; Fricker et al.,
ITC 2012) gives an LRU cache of ``C`` bytes a characteristic time ``T`` (here in iterations) with
``sum_rows bytes * (1 - exp(-rate * T)) = C``; a row drawn ``rate`` times per iteration then stays
cached with probability ``1 - exp(-rate * T)``. Rows are described by access buckets, so the sums
run over a few hundred buckets per shard, not over rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from shardopt.arithmetic.exact import settled

_ITERATIONS = 60  # safeguarded Newton steps; a handful usually reach 1e-6 of the cache


@dataclass(frozen=True)
class CacheRows:
    """One shard's rows as the cache sees them: per access bucket, its bytes and the draws per
    iteration of each of its rows."""

    bytes: np.ndarray
    rate: np.ndarray

    def hit(self, time: float) -> np.ndarray:
        """Per bucket, the probability that a row is cached when it is drawn."""
        if math.isinf(time):
            return (self.rate > 0).astype(np.float64)
        return -np.expm1(-self.rate * time)


def characteristic_time(rows: Sequence[CacheRows], cache_bytes: float) -> float:
    """Che's T for these shards sharing ``cache_bytes`` (inf when every touched row fits)."""
    if not rows:
        return math.inf
    size = np.concatenate([r.bytes for r in rows])
    rate = np.concatenate([r.rate for r in rows])
    touched = rate > 0
    size, rate = size[touched], rate[touched]
    if size.sum() <= cache_bytes or cache_bytes <= 0:
        return math.inf if cache_bytes > 0 else 0.0
    # Occupancy grows monotonically with log T: Newton steps in log T, kept inside a bracket
    # that bisection shrinks whenever a step would leave it.
    lo, hi = math.log(1e-12 / rate.max()), math.log(1e6 / rate.min())
    u = math.log(1.0 / float(np.multiply(rate, size).sum() / size.sum()))  # np.average's arithmetic
    # The sums only steer the steps (plain sums: a correctly rounded one took half of a plan's
    # pricing): a CPU's rounding of them moves the root in its last bits, which ``settled`` drops.
    for _ in range(_ITERATIONS):
        held = rate * math.exp(u)
        kept = np.exp(-held)
        excess = float((size * (1.0 - kept)).sum()) - cache_bytes
        if excess > 0:
            hi = u
        else:
            lo = u
        slope = float((size * (held * kept)).sum())
        step = u - excess / slope if slope > 0 else None
        u = step if step is not None and lo < step < hi else 0.5 * (lo + hi)
        if hi - lo < 1e-6 or abs(excess) < 1e-6 * cache_bytes:
            break
    return settled(math.exp(u))
