"""Searches built from a :class:`~shardopt.contracts.PlanConfig`: the one place the CLI, the
TorchRec plugin and the bench turn a configuration into a search, so no default can differ."""

from __future__ import annotations

import gc
import logging
from contextlib import contextmanager
from typing import Optional

from shardopt.contracts import OBJECTIVES, STAGE_LOGGER, Objective, PlanConfig, Search
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.uncertainty import Doubt, doubt_for
from shardopt.planner.pipeline import plan_workload
from shardopt.search.candidates import release_pieces

GC_FIRST_GENERATION = 100_000  # allocations between young collections while planning (Python's: 700)
GREEDY_REPAIR_SHARE = 0.2  # of the time limit, for the greedy search's repair pass
GREEDY_REPAIR_MIN_S = 0.2


def build_search(config: PlanConfig, objective: Optional[Objective] = None) -> Search:
    """The search a configuration names, with its time limit, candidates and objective (or
    ``objective`` itself: a robust one, built for the workload by :func:`search_objective`)."""
    from shardopt.search.greedy import GreedySearch
    from shardopt.search.ilp import IlpSearch

    objective = objective or OBJECTIVES[config.objective]
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
    """Plan ``workload`` as ``config`` says (``cost_model``, when given, is the resolved model);
    a 2D workload's plan is for one sharding group (:mod:`shardopt.planner.groups`)."""
    model = cost_model if cost_model is not None else resolve_model(config, workload)[0]
    if workload.parallelism is not None:
        from shardopt.planner.groups import plan_2d

        return plan_2d(workload, lambda group: plan_with(group, config, cost_model=model, sha256=sha256, source=source),
                       candidates=config.candidates, source=source)
    with fewer_collections():
        try:
            doubt = doubt_for(model, workload)
            search = build_search(config, search_objective(config, workload, model, doubt))
            return plan_workload(workload, sha256=sha256, cost_model=model, search=search, source=source, doubt=doubt)
        finally:
            release_pieces()


@contextmanager
def fewer_collections(first: int = GC_FIRST_GENERATION):
    """Python's cyclic collector run ``first`` allocations apart (at least) while a plan is made,
    as before after: a search allocates millions of small objects and creates little cyclic
    garbage, and each full collection walks the whole heap (torch's modules included). Plans made
    12% sooner at 5000 tables x 1024 ranks, 7-15% at 1000 x 128; the same plans (the collector
    frees nothing the search reads)."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], first), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def search_objective(config: PlanConfig, workload: Workload, model: CostModel, doubt: "Doubt | None" = None) -> Objective:
    """The configuration's objective, robust to the model's doubt where ``config.robust`` says."""
    from shardopt.costmodel.uncertainty import is_robust, robust_objective

    doubt = doubt or doubt_for(model, workload)
    objective = OBJECTIVES[config.objective]
    if not is_robust(config.robust, doubt, objective):
        return objective
    return robust_objective(workload, model, doubt, _reference(config, workload, model))


def _reference(config: PlanConfig, workload: Workload, model: CostModel):
    """The nominal greedy plan the robust objective measures regret against (None where the
    greedy packs nothing: the search will say why)."""
    from shardopt.core.errors import ErrorKind, ShardoptError
    from shardopt.search.greedy import GreedySearch

    logging.getLogger(STAGE_LOGGER).info(
        "pricing the cuts of %d tables on %d ranks; the nominal plan (robust's reference)",
        len(workload.tables), workload.topology.world_size)
    try:
        return GreedySearch(repair_s=0, candidates=config.candidates).search(workload, model, possible=False).tables
    except ShardoptError as exc:
        if exc.kind != ErrorKind.INFEASIBLE:
            raise
        return None
