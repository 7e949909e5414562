"""FlexShard-style hot rows: the hottest rows of a skewed table replicated on every rank.

A table planned with ``replicated_rows = h`` has its ids remapped by popularity: rows [0, h) are its
h hottest rows, held as a data-parallel replica on every rank (each rank looks up its own samples'
hot ids locally; their gradients are all-reduced), and rows [h, N) are row-wise sharded as usual
(the plan's shards cover only them). The pooled embedding of a sample is the hot part's sum plus
the cold part's, so the cold part still sends full-width partial sums: replication saves lookups
and update work on the busy rows, not pooled traffic.

For costing, memory and replay, such a table is two tables, ``NAME:hot`` (h rows, the head of the
access distribution, data-parallel) and ``NAME:cold`` (the tail, row-wise): :func:`expand` rewrites
a workload and plan that way, so every model and the replay need no special case.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from shardopt.arithmetic.access import row_buckets
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import MAX_WEIGHT, MIN_WEIGHT, BucketsAccess, Table, Workload

HOT, COLD = ":hot", ":cold"
# Hot sets worth replicating: the rows drawing these shares of lookups, if they are few.
HOT_ROW_SHARES = (0.5, 0.8)
MAX_HOT_ROW_FRACTION = 0.05  # at most this share of the table's rows
MIN_COLD_SHARE = 0.01  # the cold part must still see lookups
WEIGHT_SPAN = MAX_WEIGHT / MIN_WEIGHT


def split_table(table: Table, hot_rows: int) -> tuple[Table, Table]:
    """The hot head (``hot_rows`` rows) and cold tail of a table, each a table of its own."""
    buckets = row_buckets(table)
    head, tail = buckets.split(hot_rows)
    share = buckets.top_share(hot_rows)
    hot = replace(
        table, name=table.name + HOT, num_embeddings=hot_rows,
        pooling_factor=table.pooling_factor * share, sharding_types=None,
        access=_buckets_access(head.counts, head.probs),
    )
    cold = replace(
        table, name=table.name + COLD, num_embeddings=table.num_embeddings - hot_rows,
        pooling_factor=table.pooling_factor * (1 - share), sharding_types=None,
        access=_buckets_access(tail.counts, tail.probs),
    )
    return hot, cold


def _buckets_access(counts, probs) -> BucketsAccess:
    """Buckets within the workload's bounds on rows and weights (both are relative: the reader
    normalises them), rescaled only when a part's values fall outside them; a weight more than
    WEIGHT_SPAN below the largest is raised to that floor (it draws no lookup at float precision)."""
    counts, probs = np.asarray(counts, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    if counts.max() > MAX_WEIGHT:
        counts = counts * (MAX_WEIGHT / counts.max())
    if probs.min() < MIN_WEIGHT:
        probs = np.maximum(probs * (MIN_WEIGHT / probs.min()) if probs.max() / probs.min() <= WEIGHT_SPAN
                           else probs * (MAX_WEIGHT / probs.max()), MIN_WEIGHT)
    return BucketsAccess("buckets", tuple(map(float, np.maximum(counts, MIN_WEIGHT))), tuple(map(float, probs)))


def hot_row_counts(table: Table) -> list[int]:
    """How many hottest rows to consider replicating: few rows that draw many lookups."""
    buckets = row_buckets(table)
    out: list[int] = []
    for share in HOT_ROW_SHARES:
        rows = math.ceil(buckets.rows_for_share(share))
        if 1 <= rows <= table.num_embeddings * MAX_HOT_ROW_FRACTION and rows not in out:
            if 1 - buckets.top_share(rows) >= MIN_COLD_SHARE:
                out.append(rows)
    return out


_last: tuple | None = None


def expand(workload: Workload, tables: Sequence[TablePlan]) -> tuple[Workload, tuple[TablePlan, ...]]:
    """The workload and plan with each hot-row table as its hot and cold tables (or unchanged)."""
    global _last
    tables = tuple(tables)
    if not any(tp.replicated_rows for tp in tables):
        return workload, tables
    if _last is not None and _last[0] is workload and _last[1] == tables:
        return _last[2]
    world = workload.topology.world_size
    by_name = workload.tables_by_name
    # Only well-formed hot-row tables are split; check_plan reports the others.
    split = {
        tp.name: tp for tp in tables
        if tp.replicated_rows and tp.name in by_name
        and tp.replicated_rows < by_name[tp.name].num_embeddings
        and all(s.offsets[0] >= tp.replicated_rows for s in tp.shards)
    }
    new_tables: list[Table] = []
    new_plans: list[TablePlan] = []
    plans = {tp.name: tp for tp in tables}
    for table in workload.tables:
        tp = split.get(table.name)
        if tp is None:
            new_tables.append(table)
            if table.name in plans:
                new_plans.append(plans[table.name])
            continue
        h = tp.replicated_rows
        hot, cold = split_table(table, h)
        new_tables += [hot, cold]
        new_plans.append(TablePlan(
            name=hot.name, sharding_type="data_parallel",
            shards=tuple(Shard(rank=r, offsets=(0, 0), sizes=(h, table.embedding_dim)) for r in range(world)),
        ))
        new_plans.append(replace(
            tp, name=cold.name, replicated_rows=None,
            shards=tuple(replace(s, offsets=(s.offsets[0] - h, s.offsets[1])) for s in tp.shards),
        ))
    result = (replace(workload, tables=tuple(new_tables)), tuple(new_plans))
    _last = (workload, tables, result)
    return result
