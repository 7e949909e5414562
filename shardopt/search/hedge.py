"""TorchRec's hedge, weighed: every table cut row-wise evenly over all ranks, kept instead of the
searched plan where the model's doubt expects it to be faster.

Ranks that hold the same shapes of the same tables err alike, so such a plan stays level however
wrong the per-table figures are; a searched plan keeps expensive tables whole, and its ranks
err apart. The search's penalty prices that to first order per cut (``RobustObjective``); the
expected step over the doubt's draws (``uncertainty.expected_step``) sees whole ranks. Replayed on
a CPU foreign to the packaged model, the all-row-wise plan beat the searched one on compute-bound
tasks with few tables per rank (0.76 against 0.92 of TorchRec's step) and lost wherever traffic
counts (`benchmarks/results/robust_diagnose.md`); the expected step told the two apart on 11 of 12.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from shardopt.arithmetic.checks import tables_violations
from shardopt.contracts import SearchResult
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.uncertainty import Doubt, expected_step
from shardopt.search.candidates import split_evenly

# Shards of the spread plan above which it is not tried: it can only win where lookups dominate
# the step, which at this many pieces per rank they never do, and pricing it would cost seconds.
MAX_SHARDS = 20_000


def spread_plan(workload: Workload, like: tuple[TablePlan, ...]) -> Optional[tuple[TablePlan, ...]]:
    """Every table row-wise in equal parts over all ranks (each keeping the kernel ``like`` gave
    it), or None where a table has fewer rows than ranks."""
    world = workload.topology.world_size
    kernels = {tp.name: tp for tp in like}
    out = []
    for table in workload.tables:
        if table.num_embeddings < world:
            return None
        offsets = np.cumsum([0, *split_evenly(table.num_embeddings, world)])
        shards = tuple(Shard(rank=r, offsets=(int(offsets[r]), 0),
                             sizes=(int(offsets[r + 1] - offsets[r]), table.embedding_dim)) for r in range(world))
        old = kernels.get(table.name)
        out.append(TablePlan(name=table.name, sharding_type="row_wise", shards=shards,
                             compute_kernel=old.compute_kernel if old else "fused",
                             cache_load_factor=old.cache_load_factor if old else None))
    return tuple(out)


def hedged(workload: Workload, model: CostModel, result: SearchResult, doubt: Doubt) -> SearchResult:
    """``result``, or the spread plan where it is valid and its expected step is shorter."""
    world = workload.topology.world_size
    if world < 2 or len(workload.tables) * world > MAX_SHARDS:
        return result
    spread = spread_plan(workload, tuple(result.tables))
    if spread is None or tables_violations(workload, spread):
        return result
    searched, hedge = (expected_step(workload, model, tables, doubt) for tables in (result.tables, spread))
    if not hedge < searched:
        return result
    return dataclasses.replace(
        result, tables=spread, algorithm=f"{result.algorithm}+hedge",
        status=f"{result.status}; hedged: every table row-wise over all ranks, expected step"
               f" {hedge:.3f} ms under the model's doubt against the searched plan's {searched:.3f} ms",
    )
