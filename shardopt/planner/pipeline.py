"""The pipeline from a workload to a plan: candidates, search under a cost model, prediction."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import CostModel
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.plan import PLAN_FORMAT, PLAN_VERSION, Plan, Predicted, SearchInfo, WorkloadRef
from shardopt.contracts import STAGE_LOGGER, Breakdown, Search
from shardopt.search.conflict import find_conflict
from shardopt.search.ilp import IlpSearch
from shardopt.search.kernel_kinds import share_kernels
from shardopt.arithmetic.placement import placement_violations
from shardopt.core.workload import Workload
from shardopt.costmodel.uncertainty import Doubt, sensitivity

log = logging.getLogger(STAGE_LOGGER)


def plan_workload(
    workload: Workload,
    *,
    sha256: Optional[str] = None,
    cost_model: Optional[CostModel] = None,
    search: Optional[Search] = None,
    source: str = "<workload>",
    doubt: Optional[Doubt] = None,
) -> Plan:
    """Plan a workload; infeasibility is a ShardoptError naming ``source``. With ``doubt`` (the
    model's uncertainty, :mod:`shardopt.costmodel.uncertainty`), the plan reports its sensitivity."""
    cost_model = cost_model if cost_model else AnalyticCostModel()
    search = search if search else IlpSearch()
    try:
        result = search.search(workload, cost_model)
    except ShardoptError as exc:
        if exc.kind == ErrorKind.INFEASIBLE:
            explained = explain_infeasible(workload, cost_model, search)
            if explained is not None:
                raise ShardoptError(f"{source}: {explained.line}", exc.kind, explained.details) from None
        raise ShardoptError(f"{source}: {exc}", exc.kind, exc.details) from None
    tables = share_kernels(workload, result.tables)  # TorchRec runs a kernel per kind on a rank
    if workload.placement:
        broken = placement_violations(workload, tables)
        if broken:  # every search honours the rules: a plan that breaks one is a bug, never output
            raise AssertionError(f"{search.name} broke a placement rule: {broken[0]}")
    log.info("the plan's breakdown%s", " and sensitivity" if doubt is not None else "")
    per_rank = tuple(cost_model.breakdown(workload, tables))
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
            robust=objective.robust if objective else None,
        ),
        comm_source=cost_model.comm_choice(workload).label if workload.topology.world_size > 1 else None,
        sensitivity=sensitivity(workload, cost_model, tables, doubt) if doubt is not None else None,
    )
    return Plan(
        format=PLAN_FORMAT,
        version=PLAN_VERSION,
        workload=WorkloadRef(name=workload.name, sha256=sha256),
        world_size=workload.topology.world_size,
        tables=tables,
        predicted=predicted,
    )


@dataclass(frozen=True)
class Explained:
    line: str
    details: tuple[str, ...]


def explain_infeasible(workload: Workload, cost_model: CostModel, search) -> Optional[Explained]:
    """The smallest conflicting set of requirements, where a placement rule or an allow-list is
    among them (memory alone: the search's own words name the table and the fixes). A workload
    without allow-lists or placement rules has nothing else to blame: no solve is made."""
    if not workload.placement and not any(t.sharding_types or t.compute_kernels for t in workload.tables):
        return None
    which = getattr(search, "candidate_set", getattr(search, "candidates", "all"))
    conflict = find_conflict(workload, cost_model, which if which in ("all", "torchrec") else "all")
    if conflict is None or all(m.key[0] in ("hbm", "ddr") for m in conflict.members):
        return None
    details = tuple(f"{m.text}" + (f" (to relax: {m.fix})" if m.fix else "") for m in conflict.members)
    if not conflict.minimal:
        details += ("(a solve ran out of time: the set may not be minimal)",)
    return Explained(conflict.line, details)
