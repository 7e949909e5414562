"""Profile records as model inputs: each measured kernel as its shards' terms and features."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from shardopt.costmodel.terms import BWD_TERMS, FWD_TERMS, kernel_cache, shard_terms
from shardopt.core.hardware import Hardware
from shardopt.profile.dataset import tables_of
from shardopt.core.workload import Table

KERNEL_OF_LOCATION = {"hbm": "fused", "uvm": "fused_uvm", "uvm_caching": "fused_uvm_caching"}


@dataclass(frozen=True)
class KernelShard:
    """One shard inside a fused kernel, with what it is fed per iteration."""

    table: Table  # data_type = the precision it is trained at
    rows: int
    cols: int
    lookups: float
    samples: int
    compute_kernel: str = "fused"
    cache_load_factor: float | None = None


@dataclass(frozen=True)
class KernelSample:
    """A measured kernel: its shards and forward/backward medians in seconds."""

    shards: tuple[KernelShard, ...]
    fwd_s: float
    bwd_s: float

    @property
    def dense(self) -> bool:
        """Data-parallel replicas' kernel (another algorithm, fitted apart)."""
        return any(s.compute_kernel == "dense" for s in self.shards)


def kernel_samples(records: Iterable[dict]) -> list[KernelSample]:
    out = []
    for r in records:
        if r.get("kind") != "tbe":
            continue
        shards = tuple(
            KernelShard(
                table=dataclasses.replace(t, data_type=r["precision"]),
                rows=t.num_embeddings,
                cols=t.embedding_dim,
                lookups=r["batch"] * t.pooling_factor,
                samples=r["batch"],
                compute_kernel="dense" if r.get("kernel") == "dense" else KERNEL_OF_LOCATION[r["location"]],
            )
            for t in tables_of(r)
        )
        out.append(KernelSample(shards, r["fwd"]["median_us"] * 1e-6, r["bwd"]["median_us"] * 1e-6))
    return out


def kernel_terms(hw: Hardware, shards: Sequence[KernelShard]) -> tuple[np.ndarray, np.ndarray]:
    """Summed forward and backward terms of a kernel's shards, which share one cache."""
    fwd, bwd = np.zeros(len(FWD_TERMS)), np.zeros(len(BWD_TERMS))
    time, span = kernel_cache(hw, [(s.table, s.rows, s.cols, s.lookups) for s in shards])
    for s in shards:
        f, b = shard_terms(
            hw, s.table, s.rows, s.cols, lookups=s.lookups, samples=s.samples,
            compute_kernel=s.compute_kernel, cache_load_factor=s.cache_load_factor, cache_time=time,
            kernel_bytes=span,
        )
        fwd, bwd = fwd + f, bwd + b
    return fwd, bwd
