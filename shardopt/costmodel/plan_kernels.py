"""A plan as the fused kernels each rank runs: what replay measures and models predict.

Per rank, one kernel per precision holds the rank's shards; data-parallel replicas pool the
local batch and sit in a kernel of their own, as TorchRec groups them.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from shardopt.arithmetic.traffic import shard_lookups, shard_samples
from shardopt.contracts import ShardSpec
from shardopt.costmodel.profile_data import KernelShard
from shardopt.core.plan import TablePlan
from shardopt.profile.precision import measured_precision
from shardopt.core.workload import Table, Workload

KernelKey = tuple[str, bool]  # (precision, data-parallel)


@dataclass(frozen=True)
class PlacedShard:
    table: Table
    sharding_type: str
    row_offset: int
    rows: int
    cols: int
    compute_kernel: str
    cache_load_factor: float | None = None

    @property
    def spec(self) -> ShardSpec:
        return ShardSpec(self.table, self.sharding_type, self.rows, self.cols, self.compute_kernel,
                         self.cache_load_factor)


def rank_kernels(
    workload: Workload, tables: Sequence[TablePlan], device: str = "cpu", only: int | None = None
) -> list[dict[KernelKey, list[PlacedShard]]]:
    """For each rank (or for rank ``only`` alone), its shards grouped into kernels (sorted keys,
    plan order inside)."""
    out: list[dict[KernelKey, list[PlacedShard]]] = [
        defaultdict(list) for _ in range(workload.topology.world_size if only is None else 1)
    ]
    for tp in tables:
        table = workload.table(tp.name)
        key_precision = measured_precision(table.data_type, device)
        for shard in tp.shards:
            if only is not None and shard.rank != only:
                continue
            key = (key_precision, tp.sharding_type == "data_parallel")
            out[0 if only is not None else shard.rank][key].append(
                PlacedShard(table, tp.sharding_type, shard.offsets[0], shard.sizes[0], shard.sizes[1],
                            tp.compute_kernel, tp.cache_load_factor)
            )
    return [dict(sorted(groups.items())) for groups in out]


def kernel_shard(workload: Workload, placed: PlacedShard, precision: str) -> KernelShard:
    """What the shard is fed per iteration, as a model input."""
    return KernelShard(
        table=dataclasses.replace(placed.table, data_type=precision),
        rows=placed.rows,
        cols=placed.cols,
        lookups=shard_lookups(workload, placed.table, placed.sharding_type, placed.rows),
        samples=shard_samples(workload, placed.sharding_type),
        compute_kernel=placed.compute_kernel,
        cache_load_factor=placed.cache_load_factor,
    )
