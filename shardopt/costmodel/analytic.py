"""Analytic cost model (analytic-v0): bytes moved over bandwidth, per memory tier and link.

In the spirit of TorchRec's EmbeddingPerfEstimator, with two things it lacks: the access skew
(a hot set that fits in cache is read at cache bandwidth) and the distinct rows the backward pass
really updates. Units: bytes, seconds inside, milliseconds out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from shardopt.access import row_buckets
from shardopt.costmodel.base import CostModel, ShardCost
from shardopt.hardware import Hardware, hardware_for
from shardopt.memory import UVM_CACHE_LOAD_FACTOR, optimizer_state_bytes, shard_memory
from shardopt.plan import RankBreakdown, TablePlan
from shardopt.workload import Table, Workload

INDEX_BYTES = 8  # int64 ids, as TorchRec's KeyedJaggedTensor carries them
OUTPUT_BYTES = 4  # pooled embeddings and their gradients travel as fp32
ROW_SPLIT = ("row_wise", "table_row_wise")
GB = 1e9


class AnalyticCostModel(CostModel):
    """Bytes-over-bandwidth estimate; constants from the workload's hardware profile."""

    name = "analytic-v0"

    def __init__(self, hardware: Hardware | None = None) -> None:
        self._hardware = hardware

    def hardware(self, workload: Workload) -> Hardware:
        return self._hardware or hardware_for(workload.topology)

    # -- one shard -------------------------------------------------------------------------------
    def shard_cost(
        self,
        workload: Workload,
        table: Table,
        sharding_type: str,
        rows: int,
        cols: int,
        compute_kernel: str = "fused",
    ) -> ShardCost:
        hw = self.hardware(workload)
        row_frac = rows / table.num_embeddings
        samples = shard_samples(workload, sharding_type)
        lookups = shard_lookups(workload, table, sharding_type, rows)
        row_bytes = _line_rounded(cols * table.element_bytes, hw.min_access_bytes)
        state_bytes = _line_rounded(
            optimizer_state_bytes(workload.optimizer, 1, cols), hw.min_access_bytes
        )
        buckets = row_buckets(table)
        # Ids are hashed into row blocks, so a row-wise shard holds a row_frac slice of every
        # popularity level: its k hottest rows carry the share of the table's k/row_frac hottest.
        cache_rows = hw.cache_bytes / row_bytes
        hit = buckets.top_share(cache_rows / row_frac)
        mem_bw = self._gather_bw(hw, table, rows, compute_kernel, buckets, row_frac)
        gather_s = lookups * row_bytes * (hit / (hw.cache_bw_gbps * GB) + (1 - hit) / mem_bw)
        index_s = lookups * (hw.lookup_ns * 1e-9 + INDEX_BYTES / (hw.mem_bw_gbps * GB))
        out_s = samples * cols * OUTPUT_BYTES / (hw.mem_bw_gbps * GB)
        fwd_s = hw.table_us * 1e-6 + index_s + gather_s + out_s
        # Backward: read output grads, sort ids and accumulate per-lookup grads in cache, then a
        # read-modify-write of weights and optimizer state for each distinct row touched.
        unique = buckets.expected_unique(samples * table.pooling_factor) * row_frac
        accum_s = lookups * cols * OUTPUT_BYTES / (hw.cache_bw_gbps * GB)
        update_s = unique * 2 * (row_bytes + state_bytes) / mem_bw
        bwd_s = hw.table_us * 1e-6 + 2 * index_s + out_s + accum_s + update_s
        fwd_comm_s, bwd_comm_s = self._comm_seconds(workload, hw, sharding_type, rows, cols, lookups)
        memory = shard_memory(workload.optimizer, table, rows, cols, compute_kernel)
        return ShardCost(
            fwd_compute_ms=fwd_s * 1e3,
            bwd_compute_ms=bwd_s * 1e3,
            fwd_comm_ms=fwd_comm_s * 1e3,
            bwd_comm_ms=bwd_comm_s * 1e3,
            hbm_bytes=memory.hbm_bytes,
        )

    @staticmethod
    def _gather_bw(hw, table, rows, compute_kernel, buckets, row_frac) -> float:
        """Effective bandwidth of cache misses for the shard's memory tier, in bytes/s."""
        if compute_kernel == "fused_uvm":
            return hw.uvm_bw_gbps * GB
        if compute_kernel == "fused_uvm_caching":
            in_hbm = buckets.top_share(UVM_CACHE_LOAD_FACTOR * rows / row_frac)
            return 1.0 / (in_hbm / (hw.mem_bw_gbps * GB) + (1 - in_hbm) / (hw.uvm_bw_gbps * GB))
        return hw.mem_bw_gbps * GB

    @staticmethod
    def _comm_seconds(workload, hw, sharding_type, rows, cols, lookups):
        """Seconds this shard's rank spends in the all-to-alls, from its bytes and the links."""
        topo = workload.topology
        world, local = topo.world_size, topo.ranks_per_host
        if world == 1:
            return 0.0, 0.0
        sent = comm_bytes(workload, sharding_type, rows, cols, lookups)
        a2a = _all_to_all_seconds_per_byte(hw, world, local)
        host_local = sent.host_local / (hw.intra_host_bw_gbps * GB)
        fwd = (sent.ids + sent.pooled) * a2a + host_local
        bwd = sent.pooled * a2a + host_local + 2 * (world - 1) / world * sent.allreduce * a2a
        return fwd, bwd

    # -- one rank --------------------------------------------------------------------------------
    def rank_overhead_ms(self, workload: Workload, sharding_types: set[str]) -> float:
        fwd, bwd, fwd_comm, bwd_comm = self._overheads(workload, sharding_types)
        return (fwd + bwd + fwd_comm + bwd_comm) * 1e3

    def _overheads(self, workload: Workload, sharding_types: set[str]):
        if not sharding_types:
            return 0.0, 0.0, 0.0, 0.0
        hw = self.hardware(workload)
        kernel_s = hw.kernel_us * 1e-6
        lat = hw.comm_latency_us * 1e-6 if workload.topology.world_size > 1 else 0.0
        sharded = bool(sharding_types - {"data_parallel"})
        fwd_comm = 2 * lat if sharded else 0.0  # ids out, pooled embeddings back
        bwd_comm = (lat if sharded else 0.0) + (lat if "data_parallel" in sharding_types else 0.0)
        return kernel_s, kernel_s, fwd_comm, bwd_comm

    # -- a whole plan ----------------------------------------------------------------------------
    def breakdown(self, workload: Workload, tables: Sequence[TablePlan]) -> list[RankBreakdown]:
        sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        memory: dict[int, int] = defaultdict(int)
        kinds: dict[int, set[str]] = defaultdict(set)
        by_name = {t.name: t for t in workload.tables}
        for table_plan in tables:
            table = by_name[table_plan.name]
            for shard in table_plan.shards:
                cost = self.shard_cost(
                    workload,
                    table,
                    table_plan.sharding_type,
                    shard.sizes[0],
                    shard.sizes[1],
                    table_plan.compute_kernel,
                )
                acc = sums[shard.rank]
                acc[0] += cost.fwd_compute_ms
                acc[1] += cost.bwd_compute_ms
                acc[2] += cost.fwd_comm_ms
                acc[3] += cost.bwd_comm_ms
                memory[shard.rank] += cost.hbm_bytes
                kinds[shard.rank].add(table_plan.sharding_type)
        out = []
        for rank in range(workload.topology.world_size):
            fwd, bwd, fcomm, bcomm = sums[rank]
            o_fwd, o_bwd, o_fcomm, o_bcomm = (x * 1e3 for x in self._overheads(workload, kinds[rank]))
            parts = (fwd + o_fwd, bwd + o_bwd, fcomm + o_fcomm, bcomm + o_bcomm)
            out.append(
                RankBreakdown(
                    rank=rank,
                    fwd_compute_ms=parts[0],
                    bwd_compute_ms=parts[1],
                    fwd_comm_ms=parts[2],
                    bwd_comm_ms=parts[3],
                    total_ms=sum(parts),
                    hbm_bytes=memory[rank],
                )
            )
        return out


def shard_samples(workload: Workload, sharding_type: str) -> int:
    """Bags a shard pools per iteration: the global batch, or the local one if data-parallel."""
    world = 1 if sharding_type == "data_parallel" else workload.topology.world_size
    return workload.batch_size * world


def shard_lookups(workload: Workload, table: Table, sharding_type: str, rows: int) -> float:
    """Expected ids a shard looks up per iteration (a row-wise shard gets its rows' share)."""
    share = rows / table.num_embeddings if sharding_type in ROW_SPLIT else 1.0
    return shard_samples(workload, sharding_type) * table.pooling_factor * share


@dataclass(frozen=True)
class CommBytes:
    """Bytes one shard puts on the wire per iteration, by collective.

    ``ids``: lookups it receives in the input all-to-all; ``pooled``: pooled embeddings it sends
    to other ranks' samples (forward) and receives back as gradients (backward), or the
    reduce-scatter of row-wise partial sums, which has the same size; ``host_local``: the part of
    a table-row-wise reduce-scatter that stays inside the host; ``allreduce``: data-parallel
    gradients.
    """

    ids: float = 0.0
    pooled: float = 0.0
    host_local: float = 0.0
    allreduce: float = 0.0


def comm_bytes(
    workload: Workload, sharding_type: str, rows: int, cols: int, lookups: float
) -> CommBytes:
    topo = workload.topology
    world, local = topo.world_size, topo.ranks_per_host
    if world == 1:
        return CommBytes()
    batch = workload.batch_size
    if sharding_type == "data_parallel":
        return CommBytes(allreduce=rows * cols * OUTPUT_BYTES)
    ids = lookups * INDEX_BYTES * (world - 1) / world
    if sharding_type == "table_row_wise" and local > 1:
        # Reduce-scatter of partial sums inside the host, then the host's slice goes out.
        return CommBytes(
            ids=ids,
            pooled=batch * (world - local) * cols * OUTPUT_BYTES / local,
            host_local=batch * world * cols * OUTPUT_BYTES * (local - 1) / local,
        )
    # table/column-wise send pooled rows to the other ranks' samples; row-wise sends partial
    # sums in a reduce-scatter of the same size. Gradients come back the same way.
    return CommBytes(ids=ids, pooled=batch * (world - 1) * cols * OUTPUT_BYTES)


def _line_rounded(size: int, line: int) -> int:
    """Memory moves in whole cache lines (or GPU sectors)."""
    return max(line, int(math.ceil(size / line)) * line) if size else 0


def _all_to_all_seconds_per_byte(hw: Hardware, world: int, local: int) -> float:
    """Seconds per byte a rank sends, spread evenly over its peers on and off its host."""
    on_host = (local - 1) / (world - 1)
    off_host = (world - local) / (world - 1)
    return on_host / (hw.intra_host_bw_gbps * GB) + off_host / (hw.inter_host_bw_gbps * GB)
