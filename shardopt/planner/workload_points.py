"""The kernels ``shardopt calibrate --workload`` measures: the shapes the user will plan.

A generic grid spends its budget on tables the user may never have; a workload's plan is set by
its own tables (a table pooled 250 times lies outside a profile that pooled at most 100) and by
how they share a rank. So, after the few points that pin the model's terms: each table of the
workload alone, at its own pooling, dimension and access (rows and batch capped only to keep a
point within a CPU's time); then fused kernels shaped like the ranks of plans of this workload
(the nominal plan's, then random plans' over its candidate cuts), in that order, until the
budget ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import TypeAdapter

if TYPE_CHECKING:
    from shardopt.core.workload import Workload

RANK_PLANS = 40  # random plans whose ranks follow the nominal plan's: more than a budget measures
MIN_BATCH = 64


def _access(table) -> dict:
    from shardopt.core.workload import Access

    return TypeAdapter(Access).dump_python(table.access, mode="json", exclude_none=True)


def table_points(workload: "Workload", max_elems: int, max_lookups: float) -> list[dict]:
    """Each table alone at its own pooling: the global batch, fewer samples where its lookups would
    exceed ``max_lookups``, rows capped at ``max_elems`` weights."""
    from shardopt.profile.points import table_spec, tbe_spec

    batch = workload.batch_size * workload.topology.world_size
    points = []
    for t in workload.tables:
        rows = max(100, min(t.num_embeddings, max_elems // t.embedding_dim))
        samples = max(MIN_BATCH, min(batch, int(max_lookups // max(t.pooling_factor, 1e-9))))
        points.append(tbe_spec([table_spec(rows, t.embedding_dim, t.pooling_factor, _access(t))], samples))
    return points


def rank_points(workload: "Workload", model, max_elems: int, max_lookups: float, seed: int) -> list[dict]:
    """Fused kernels of the ranks of the nominal greedy plan, then of random plans that fit: each
    shard its rows and columns, a row-wise piece its share of the table's lookups, the global
    batch (capped as the generic rank points are)."""
    from shardopt.core.errors import ShardoptError
    from shardopt.profile.points import cap_elements, cap_lookups, table_spec, tbe_spec
    from shardopt.search.greedy import GreedySearch
    from shardopt.search.sampler import PlanSampler

    plans = []
    try:
        plans.append(GreedySearch(repair_s=0).search(workload, model).tables)
    except ShardoptError:
        pass
    for i in range(RANK_PLANS):
        try:
            plans.append(PlanSampler(seed * 1000 + i).search(workload, model).tables)
        except ShardoptError:
            break
    batch = workload.batch_size * workload.topology.world_size
    points, seen = [], set()
    for tables in plans:
        ranks: dict[int, list[dict]] = {}
        for tp in tables:
            table = workload.table(tp.name)
            for shard in tp.shards:
                rows, cols = shard.sizes
                pooling = table.pooling_factor * (rows / table.num_embeddings if tp.sharding_type in
                                                  ("row_wise", "table_row_wise", "grid_shard") else 1.0)
                if tp.sharding_type == "data_parallel":
                    pooling /= workload.topology.world_size  # its local batch's lookups
                ranks.setdefault(shard.rank, []).append(table_spec(rows, cols, max(pooling, 0.01), _access(table)))
        for rank in sorted(ranks):
            shards = ranks[rank]
            cap_elements(shards, max_elems)
            cap_lookups(shards, batch, max_lookups)
            point = tbe_spec(shards, batch)
            key = repr(point)
            if key not in seen:
                seen.add(key)
                points.append(point)
    return points


def workload_kernels(workload: "Workload", model, on_cuda: bool, seed: int) -> list[dict]:
    """The workload's tables, then its ranks' kernels, in the order a budget takes them."""
    max_elems, max_lookups = (2**28, 8e7) if on_cuda else (2**26, 1.6e6)
    return table_points(workload, max_elems, max_lookups) + rank_points(workload, model, max_elems, max_lookups, seed)

