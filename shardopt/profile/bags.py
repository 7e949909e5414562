"""Lookups drawn from a table's access distribution: the ids one batch really sends a table.

Popularity ranks come from the row buckets of :mod:`shardopt.arithmetic.access`; a bijective multiplicative
hash then spreads them over the row ids, as production id hashing does, so the hot rows of a
table land in every row-wise block and not all in the first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardopt.arithmetic.access import row_buckets
from shardopt.core.workload import Table

_HASH_MULTIPLIER = 2654435761  # Knuth's multiplicative hash constant


@dataclass(frozen=True)
class Bags:
    """A batch of bags for one table: ``lengths[b]`` ids per sample, ``ids`` concatenated."""

    ids: np.ndarray  # int64
    lengths: np.ndarray  # int64, one per sample

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

    def rows(self, start: int, count: int) -> "Bags":
        """The ids of rows [start, start+count) relative to ``start``, bag structure kept."""
        keep = (self.ids >= start) & (self.ids < start + count)
        bag_of = np.repeat(np.arange(len(self.lengths)), self.lengths)
        lengths = np.bincount(bag_of[keep], minlength=len(self.lengths)).astype(np.int64)
        return Bags(self.ids[keep] - start, lengths)

    def samples(self, start: int, count: int) -> "Bags":
        """Bags of samples [start, start+count): a data-parallel rank's local batch."""
        offsets = self.offsets
        return Bags(
            self.ids[offsets[start] : offsets[start + count]].copy(),
            self.lengths[start : start + count].copy(),
        )


def _coprime_multiplier(n: int) -> int:
    a = _HASH_MULTIPLIER % n or 1
    while math.gcd(a, n) != 1:
        a += 1
    return a


def sample_ids(table: Table, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` row ids drawn from the table's access distribution."""
    buckets = row_buckets(table)
    n = table.num_embeddings
    mass = buckets.counts * buckets.probs
    mass = mass / mass.sum()
    which = rng.choice(len(mass), size=count, p=mass)
    starts = np.concatenate([[0.0], np.cumsum(buckets.counts)[:-1]])
    rank = starts[which] + np.floor(rng.random(count) * buckets.counts[which])
    rank = np.minimum(rank.astype(np.int64), n - 1)
    return (rank * _coprime_multiplier(n)) % n


def sample_bags(table: Table, batch: int, rng: np.random.Generator) -> Bags:
    """One batch: Poisson bag sizes around the pooling factor, ids from the access distribution.

    A table read by several features gets one bag per feature per sample (sample-major), the
    pooling factor shared among them, as TorchRec's KeyedJaggedTensor feeds it.
    """
    per_sample = len(table.features)
    lengths = rng.poisson(table.pooling_factor / per_sample, size=batch * per_sample).astype(np.int64)
    return Bags(sample_ids(table, int(lengths.sum()), rng), lengths)
