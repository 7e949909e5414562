"""Whole tables labelled to share a kernel with the column pieces on their rank.

TorchRec runs each sharding type as a sharding of its own: a rank that holds whole tables
(table-wise) and a piece of a column-cut table runs two kernels and two sets of all-to-alls
(:mod:`shardopt.costmodel.plan_kernels`). A whole table is also a column-wise (or table-column-wise)
cut of one piece: the same rows on the same rank, the same traffic and memory, as TorchRec's own
planner labels whole tables. Labelled as its rank's cut, it joins that cut's kernel, and the rank
runs one kernel where it ran two (a second kernel of the same tables cost 7-10% more forward
here: ``benchmarks/results/kernel_groups.md``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Sequence

from shardopt.core.plan import TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.plan_kernels import COLUMN_KINDS, column_kind


def share_kernels(workload: Workload, tables: Sequence[TablePlan]) -> tuple[TablePlan, ...]:
    """``tables`` with each whole table-wise table relabelled to the column kind its rank holds
    (:func:`~shardopt.costmodel.plan_kernels.column_kind`) where its allow-list permits, as
    :func:`~shardopt.costmodel.plan_kernels.kernel_kinds` prices it. Ranks, rows and bytes are
    unchanged; ranks without a column kind keep their labels."""
    held: dict[int, Counter] = defaultdict(Counter)  # per rank, the column kinds of its shards
    for tp in tables:
        if tp.sharding_type in COLUMN_KINDS:
            for shard in tp.shards:
                held[shard.rank][tp.sharding_type] += 1
    out = []
    for tp in tables:
        kinds = held.get(tp.shards[0].rank) if _whole_table_wise(workload, tp) else None
        kind = column_kind(kinds, workload.table(tp.name).allowed_sharding_types) if kinds else None
        out.append(dataclasses.replace(tp, sharding_type=kind) if kind else tp)
    return tuple(out)


def _whole_table_wise(workload: Workload, tp: TablePlan) -> bool:
    if tp.sharding_type != "table_wise" or len(tp.shards) != 1 or tp.replicated_rows:
        return False
    table = workload.table(tp.name)
    return tuple(tp.shards[0].sizes) == (table.num_embeddings, table.embedding_dim)
