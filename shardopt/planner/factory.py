"""Searches built from a :class:`~shardopt.contracts.PlanConfig`: the one place the CLI, the
TorchRec plugin and the bench turn a configuration into a search, so no default can differ."""

from __future__ import annotations

from typing import Optional

from shardopt.contracts import OBJECTIVES, PlanConfig, Search
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.planner.pipeline import plan_workload

GREEDY_REPAIR_SHARE = 0.2  # of the time limit, for the greedy search's repair pass
GREEDY_REPAIR_MIN_S = 0.2


def build_search(config: PlanConfig) -> Search:
    """The search a configuration names, with its time limit, candidates and objective."""
    from shardopt.search.greedy import GreedySearch
    from shardopt.search.ilp import IlpSearch

    objective = OBJECTIVES[config.objective]
    if config.search == "ilp":
        return IlpSearch(time_limit_s=config.time_limit_s, candidates=config.candidates, objective=objective)
    repair_s = max(GREEDY_REPAIR_MIN_S, GREEDY_REPAIR_SHARE * config.time_limit_s)
    return GreedySearch(repair_s=repair_s, candidates=config.candidates, objective=objective)


def resolve_model(config: PlanConfig, workload: Workload) -> tuple[CostModel, list[str]]:
    """The configuration's cost model for this workload, and warnings worth showing a user."""
    from shardopt.costmodel.comm_source import load_comm_profile
    from shardopt.costmodel.registry import resolve_cost_model

    profile = None if config.comm_source == "auto" else load_comm_profile(config.comm_source)
    return resolve_cost_model(config.cost_model, workload, profile)


def plan_with(
    workload: Workload,
    config: PlanConfig = PlanConfig(),
    *,
    cost_model: Optional[CostModel] = None,
    sha256: Optional[str] = None,
    source: str = "<workload>",
) -> Plan:
    """Plan ``workload`` as ``config`` says (``cost_model``, when given, is the resolved model)."""
    model = cost_model if cost_model is not None else resolve_model(config, workload)[0]
    return plan_workload(workload, sha256=sha256, cost_model=model, search=build_search(config), source=source)
