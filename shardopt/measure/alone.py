"""Each table of a workload measured alone: the first thing ``calibrate --workload`` fits.

A plan's measured rank is one sum over several tables, so a round of four ranks tells the fit
four sums of thirty unknowns, and the first rounds' plans rest on the model's own prices. On a
CPU the packaged model never saw, those were 0.4 log-sd off per table (backward: per distinct row
updated, not per byte), in ways no variant of the model could guess. One replay with every table
on a rank of its own, the same global batch, prices each table directly: a rank's time is its
kernel overhead plus its one table, as :mod:`shardopt.costmodel.table_factors` fits it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from shardopt.core.fields import MAX_WORLD
from shardopt.core.plan import Plan, Shard, TablePlan, WorkloadRef
from shardopt.core.workload import Workload, workload_from_dict, workload_to_dict
from shardopt.costmodel.table_factors import RankSample, rank_samples

ALONE_HBM = 2**50  # a measurement, not a plan: no rank is short of memory
# A table measured alone is its own price; a plan's rank is a sum the fit must share out over its
# tables. So in the fit one table alone counts as this many measured ranks.
ALONE_WEIGHT = 10.0
# The last rank holds a table with next to nothing to look up: its time is what any kernel costs
# (on a 2-core AMD VM 0.24 ms forward, 0.12 ms backward: 1.7x and 1.3x the packaged model's figures),
# taken off every table's.
EMPTY_ROWS = 64


def measurable(workload: Workload) -> bool:
    """Whether each table can have a rank of its own (and the empty kernel one more)."""
    return len(workload.tables) + 1 <= MAX_WORLD


def alone_plan(workload: Workload) -> Optional[tuple[Workload, Plan]]:
    """(the workload on one rank per table and one more, the plan of each table whole on its own
    rank and an all-but-empty table on the last), each table's lookups as in the workload (the
    global batch spread over the ranks, rounded); None where the tables outnumber the ranks a
    workload may have."""
    if not measurable(workload):
        return None
    count = len(workload.tables)
    data = workload_to_dict(workload)
    batch = workload.batch_size * workload.topology.world_size
    data["batch_size"] = max(1, round(batch / (count + 1)))
    topology = {k: v for k, v in data["topology"].items() if k not in ("ranks", "ddr_cap")}
    data["topology"] = {**topology, "world_size": count + 1, "local_world_size": count + 1, "hbm_cap": ALONE_HBM}
    data.pop("parallelism", None)
    names = {t.name for t in workload.tables}
    empty = next(f"empty-kernel-{i}" for i in range(count + 1) if f"empty-kernel-{i}" not in names)
    data["tables"].append({"name": empty, "num_embeddings": EMPTY_ROWS,
                           "embedding_dim": min(t.embedding_dim for t in workload.tables), "pooling_factor": 1.0})
    alone = workload_from_dict(data, source="<tables alone>")
    tables = tuple(TablePlan(name=t.name, sharding_type="table_wise",
                             shards=(Shard(rank=i, offsets=(0, 0), sizes=(t.num_embeddings, t.embedding_dim)),))
                   for i, t in enumerate(alone.tables))
    return alone, Plan(format="shardopt-plan", version=3, workload=WorkloadRef(name=alone.name),
                       world_size=count + 1, tables=tables)


def alone_samples(model, alone: Workload, plan: Plan,
                  measure: Callable[[Workload, Plan], list]) -> list[RankSample]:
    """Each table's measured rank (``measure`` replays ``plan`` of ``alone`` and gives its ranks),
    priced by ``model`` beside what was measured, less the empty kernel's time."""
    replayed = measure(alone, plan)
    *samples, empty = rank_samples(model, alone, plan.tables, [(r.fwd_compute_ms, r.bwd_compute_ms) for r in replayed])
    (own,) = empty.tables.values()  # the empty table's few lookups, as the model prices them
    overhead = tuple(max(0.0, m - c) for m, c in zip(empty.measured_ms, own))
    return [replace(s, overhead_ms=overhead, weight=ALONE_WEIGHT) for s in samples]
