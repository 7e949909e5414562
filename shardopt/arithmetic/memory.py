"""Bytes a shard occupies on its rank, per memory tier, as FBGEMM lays it out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from shardopt.contracts import ShardSpec
from shardopt.core.layout import shard_bytes, weight_bytes

if TYPE_CHECKING:
    from shardopt.core.plan import TablePlan
    from shardopt.core.workload import Workload

UVM_CACHE_LOAD_FACTOR = 0.2  # share of rows a fused_uvm_caching shard caches in HBM (TorchRec's default)
COMPUTE_KERNELS = ("fused", "fused_uvm", "fused_uvm_caching", "dense")


@dataclass(frozen=True)
class ShardMemory:
    """Device memory (HBM, or the rank's DRAM share on CPU) and host DRAM for UVM tiers."""

    hbm_bytes: int
    ddr_bytes: int


def shard_memory(optimizer: str, spec: ShardSpec) -> ShardMemory:
    """Where a shard's bytes live for a TorchRec compute kernel (and its HBM cache share)."""
    table, rows, cols = spec.table, spec.rows, spec.cols
    compute_kernel, cache_load_factor = spec.compute_kernel, spec.cache_load_factor
    total = shard_bytes(optimizer, table, rows, cols)
    if compute_kernel in ("fused", "dense"):
        return ShardMemory(total, 0)
    if compute_kernel == "fused_uvm":
        return ShardMemory(0, total)
    if compute_kernel == "fused_uvm_caching":
        factor = UVM_CACHE_LOAD_FACTOR if cache_load_factor is None else cache_load_factor
        cache = int(weight_bytes(table, rows, cols) * factor)
        return ShardMemory(cache, total)
    raise ValueError(f"unknown compute kernel {compute_kernel!r}")


def plan_memory(
    workload: Workload, tables: Sequence[TablePlan]
) -> tuple[dict[int, int], dict[int, int]]:
    """Device bytes per rank and host DDR bytes per host of a plan's shards (unknown tables skipped)."""
    from shardopt.arithmetic.hotrows import expand

    workload, tables = expand(workload, tables)
    by_name = workload.tables_by_name
    hbm: dict[int, int] = defaultdict(int)
    ddr: dict[int, int] = defaultdict(int)
    for tp in tables:
        table = by_name.get(tp.name)
        if table is None:
            continue
        for s in tp.shards:
            mem = shard_memory(workload.optimizer, ShardSpec.placed(table, tp, s))
            hbm[s.rank] += mem.hbm_bytes
            ddr[workload.topology.host_of(s.rank)] += mem.ddr_bytes
    return hbm, ddr
