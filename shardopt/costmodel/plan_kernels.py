"""A plan as the fused kernels each rank runs: what replay measures and models predict.

Per rank, one kernel per precision and sharding type holds the rank's shards, as TorchRec groups
them: each sharding type is a sharding of its own there, with its own lookup modules (and its own
all-to-alls), so a rank holding whole tables and column pieces runs two kernels. Data-parallel
replicas pool the local batch in TorchRec's dense kernel.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from shardopt.arithmetic.traffic import shard_lookups, shard_samples
from shardopt.contracts import ShardSpec
from shardopt.costmodel.profile_data import KernelShard
from shardopt.core.plan import TablePlan
from shardopt.profile.precision import measured_precision
from shardopt.core.workload import Table, Workload

KernelKey = tuple[str, str]  # (precision, sharding type)
# Kinds a whole table may carry in one piece as well as table_wise (the same rows on one rank): a
# planned whole table takes its rank's column cut's kind and joins that kernel
# (``search/kernel_kinds.py``), as TorchRec's own planner labels whole tables column-wise.
COLUMN_KINDS = frozenset({"column_wise", "table_column_wise"})


def column_kind(counts: Mapping[str, int], allowed: Collection[str] = COLUMN_KINDS) -> str | None:
    """The column kind a rank's whole tables join: of the ``allowed`` column kinds the rank holds
    (``counts``: its shards per kind), the commonest, by name on a tie; None where it holds none."""
    held = [k for k, n in counts.items() if n and k in COLUMN_KINDS and k in allowed]
    return min(held, key=lambda k: (-counts[k], k)) if held else None


def kernel_kinds(sharding_types: set[str]) -> set[str]:
    """The kinds a rank holding these runs a kernel (and all-to-alls) for: whole tables join a
    column cut on their rank. A table whose allow-list names table_wise alone cannot, and runs one
    kernel more than this counts."""
    return sharding_types - {"table_wise"} if sharding_types & COLUMN_KINDS else set(sharding_types)


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
            key = (key_precision, tp.sharding_type)
            out[0 if only is not None else shard.rank][key].append(
                PlacedShard(table, tp.sharding_type, shard.offsets[0], shard.sizes[0], shard.sizes[1],
                            tp.compute_kernel, tp.cache_load_factor)
            )
    return [dict(sorted(groups.items())) for groups in out]


def joined(groups: dict[KernelKey, list[PlacedShard]]) -> dict[KernelKey, list[PlacedShard]]:
    """A rank's kernels with its whole table-wise shards moved to the column kind they take there
    (:func:`column_kind`, as ``search/kernel_kinds.py`` labels them and :func:`kernel_kinds`
    counts): for a model that prices each kernel's shards together."""
    counts: Counter = Counter()
    for (_, kind), members in groups.items():
        counts[kind] += len(members)
    column = column_kind(counts)
    if column is None:
        return groups
    out: dict[KernelKey, list[PlacedShard]] = defaultdict(list)
    for (precision, kind), members in groups.items():
        out[(precision, column if kind == "table_wise" else kind)] += members
    return dict(sorted(out.items()))


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
