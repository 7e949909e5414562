"""The pipeline from a workload to a plan: candidates, search under a cost model, prediction."""

from __future__ import annotations

from typing import Optional

from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import CostModel
from shardopt.core.errors import ShardoptError
from shardopt.core.plan import PLAN_FORMAT, PLAN_VERSION, Plan, Predicted, SearchInfo, WorkloadRef
from shardopt.contracts import Breakdown, Search
from shardopt.search.ilp import IlpSearch
from shardopt.core.workload import Workload



def plan_workload(
    workload: Workload,
    *,
    sha256: Optional[str] = None,
    cost_model: Optional[CostModel] = None,
    search: Optional[Search] = None,
    source: str = "<workload>",
) -> Plan:
    """Plan a workload; infeasibility is a ShardoptError naming ``source``."""
    cost_model = cost_model if cost_model else AnalyticCostModel()
    search = search if search else IlpSearch()
    try:
        result = search.search(workload, cost_model)
    except ShardoptError as exc:
        raise ShardoptError(f"{source}: {exc}", exc.kind) from None
    per_rank = tuple(cost_model.breakdown(workload, result.tables))
    objective = search.objective
    predicted = Predicted(
        cost_model=cost_model.name,
        max_ms=Breakdown.of(per_rank).bottleneck_ms,
        lower_bound_ms=result.lower_bound_ms,
        per_rank=per_rank,
        search=SearchInfo(
            algorithm=result.algorithm, status=result.status,
            solver_bound_ms=result.solver_bound_ms, variables=result.variables,
            repair_moves=result.repair_moves, objective=objective.name if objective else None,
        ),
        comm_source=cost_model.comm_choice(workload).label if workload.topology.world_size > 1 else None,
    )
    return Plan(
        format=PLAN_FORMAT,
        version=PLAN_VERSION,
        workload=WorkloadRef(name=workload.name, sha256=sha256),
        world_size=workload.topology.world_size,
        tables=result.tables,
        predicted=predicted,
    )
