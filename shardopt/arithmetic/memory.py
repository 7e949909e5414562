"""Bytes a shard occupies on its rank, per memory tier, as FBGEMM lays it out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from shardopt.core.plan import TablePlan
    from shardopt.core.workload import Table, Workload

DATA_TYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
INT8_ROW_OVERHEAD = 8  # FBGEMM stores a per-row fp32 scale and bias beside int8 rows
UVM_CACHE_LOAD_FACTOR = 0.2  # share of rows a fused_uvm_caching shard caches in HBM (TorchRec's default)
COMPUTE_KERNELS = ("fused", "fused_uvm", "fused_uvm_caching", "dense")


@dataclass(frozen=True)
class ShardMemory:
    """Device memory (HBM, or the rank's DRAM share on CPU) and host DRAM for UVM tiers."""

    hbm_bytes: int
    ddr_bytes: int


def optimizer_state_bytes(optimizer: str, rows: int, cols: int) -> int:
    """Optimizer state FBGEMM keeps beside a shard's weights (fp32)."""
    per_row = {"sgd": 0, "rowwise_adagrad": 4, "adagrad": cols * 4, "adam": cols * 8}
    if optimizer not in per_row:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    return rows * per_row[optimizer]


def weight_bytes(table: Table, rows: int, cols: int) -> int:
    weights = rows * cols * DATA_TYPE_BYTES[table.data_type]
    if table.data_type == "int8":
        weights += rows * INT8_ROW_OVERHEAD
    return weights


def shard_bytes(optimizer: str, table: Table, rows: int, cols: int) -> int:
    """Weights plus optimizer state of a ``rows`` x ``cols`` shard."""
    return weight_bytes(table, rows, cols) + optimizer_state_bytes(optimizer, rows, cols)


def shard_memory(
    optimizer: str,
    table: Table,
    rows: int,
    cols: int,
    compute_kernel: str = "fused",
    cache_load_factor: float | None = None,
) -> ShardMemory:
    """Where a shard's bytes live for a TorchRec compute kernel (and its HBM cache share)."""
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
    by_name = {t.name: t for t in workload.tables}
    hbm: dict[int, int] = defaultdict(int)
    ddr: dict[int, int] = defaultdict(int)
    for tp in tables:
        table = by_name.get(tp.name)
        if table is None:
            continue
        for s in tp.shards:
            mem = shard_memory(
                workload.optimizer, table, s.sizes[0], s.sizes[1], tp.compute_kernel,
                tp.cache_load_factor,
            )
            hbm[s.rank] += mem.hbm_bytes
            ddr[workload.topology.host_of(s.rank)] += mem.ddr_bytes
    return hbm, ddr
