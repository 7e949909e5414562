"""Lookups and bytes on the wire per shard and per collective: the model-free half of a cost.

Every model (analytic, learned), the lower bound, the ILP's comm terms and replay count the same
ids and bytes; only how long they take differs, and that is the models' business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from shardopt.core.plan import TablePlan
from shardopt.core.workload import Table, Workload

ROW_SPLIT = ("row_wise", "table_row_wise")
INDEX_BYTES = 8  # int64 ids, as TorchRec's KeyedJaggedTensor carries them
OUTPUT_BYTES = 4  # pooled embeddings and their gradients are fp32


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

    def __add__(self, other: "CommBytes") -> "CommBytes":
        return CommBytes(self.ids + other.ids, self.pooled + other.pooled,
                         self.host_local + other.host_local, self.allreduce + other.allreduce)

    def scaled(self, factor: float) -> "CommBytes":
        return CommBytes(self.ids * factor, self.pooled * factor, self.host_local * factor,
                         self.allreduce * factor)


def comm_bytes(
    workload: Workload, sharding_type: str, rows: int, cols: int, lookups: float, features: int = 1,
    pooled: bool = True,
) -> CommBytes:
    """What one shard sends; each of a table's features pools (and sends) a vector of its own. An
    unpooled (sequence) table sends every looked-up row back to its sample instead."""
    topo = workload.topology
    world, local = topo.world_size, topo.ranks_per_host
    if world == 1:
        return CommBytes()
    batch = workload.batch_size
    if sharding_type == "data_parallel":
        return CommBytes(allreduce=rows * cols * OUTPUT_BYTES)
    ids = lookups * INDEX_BYTES * (world - 1) / world
    if not pooled:
        return CommBytes(ids=ids, pooled=lookups * cols * OUTPUT_BYTES * (world - 1) / world)
    if sharding_type == "table_row_wise" and local > 1:
        # Reduce-scatter of partial sums inside the host, then the host's slice goes out.
        return CommBytes(
            ids=ids,
            pooled=batch * (world - local) * cols * OUTPUT_BYTES * features / local,
            host_local=batch * world * cols * OUTPUT_BYTES * features * (local - 1) / local,
        )
    # table/column-wise send pooled rows to the other ranks' samples; row-wise sends partial
    # sums in a reduce-scatter of the same size. Gradients come back the same way.
    return CommBytes(ids=ids, pooled=batch * (world - 1) * cols * OUTPUT_BYTES * features)


def rank_comm_bytes(workload: Workload, tables: Sequence[TablePlan]) -> list[CommBytes]:
    """What each rank puts on the wire, summed over its shards."""
    by_name = workload.tables_by_name
    sums = [[0.0, 0.0, 0.0, 0.0] for _ in range(workload.topology.world_size)]
    for tp in tables:
        table = by_name[tp.name]
        for shard in tp.shards:
            rows, cols = shard.sizes
            lookups = shard_lookups(workload, table, tp.sharding_type, rows)
            b = comm_bytes(workload, tp.sharding_type, rows, cols, lookups, len(table.features), table.pooled)
            acc = sums[shard.rank]
            acc[0] += b.ids
            acc[1] += b.pooled
            acc[2] += b.host_local
            acc[3] += b.allreduce
    return [CommBytes(*acc) for acc in sums]


def rank_comm_from_all_to_all(
    workload: Workload, tables: Sequence[TablePlan], seconds_or_ms
) -> list[tuple[float, float]]:
    """Per-rank (forward, backward) communication from an all-to-all time function.

    ``seconds_or_ms(world, pattern, message_bytes)`` times one all-to-all; the result is in its
    unit. Forward: ids out (even), pooled embeddings back (pooled); backward: their gradients,
    and a ring all-reduce (two all-to-all's worth) of data-parallel gradients.
    """
    world = workload.topology.world_size
    if world == 1:
        return [(0.0, 0.0)]
    out = []
    for b in rank_comm_bytes(workload, tables):
        pooled = seconds_or_ms(world, "pooled", b.pooled + b.host_local)
        fwd = seconds_or_ms(world, "even", b.ids) + pooled
        allreduce = 2 * seconds_or_ms(world, "even", b.allreduce * (world - 1) / world)
        out.append((fwd, pooled + allreduce))
    return out
