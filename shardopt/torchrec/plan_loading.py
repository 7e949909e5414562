"""TorchRec's stored plans (``plan_loader=``), loaded as EmbeddingShardingPlanner loads them.

A ``PlanLoader`` returns sharding options keyed by ``ShardingOption.storage_hash()`` and the hash
of the planner context they were made in. As TorchRec does, the context is hashed from the
topology, the batch size, the enumerator's search space, the storage reservation and the
constraints (``hash_planner_context_inputs_str``); a stored hash that differs is refused with
TorchRec's error (PLANNER_INPUT_CONTEXT_MISMATCH), and the loaded options are merged into the
search space with TorchRec's own ``extract_plan`` (PLAN_LOADING_FAILED where they do not cover it).
Then the plan is checked against the model's workload, as ``plan_file=`` is: a stored plan that
no longer fits the memory left is refused, never run. ``load()`` returning None plans afresh.
"""

from __future__ import annotations

import logging
from typing import Optional

from shardopt.core.plan import Plan
from shardopt.core.workload import Workload

logger = logging.getLogger(__name__)


def default_enumerator(topology, batch_size: int, constraints):
    """The enumerator EmbeddingShardingPlanner builds when none is given (its estimators too)."""
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator

    return EmbeddingEnumerator(topology=topology, batch_size=batch_size, constraints=constraints)


def context_hash(topology, batch_size: int, enumerator, reservation, constraints) -> str:
    """TorchRec's planner context hash; the enumerator must have enumerated, the reservation reserved."""
    from torchrec.distributed.planner.types import hash_planner_context_inputs_str

    return hash_planner_context_inputs_str(topology, batch_size, enumerator, reservation, constraints)


def load_stored_plan(plan_loader, *, module, sharders, topology, batch_size: int, enumerator, reservation,
                     constraints, workload: Workload, origins, score) -> Optional[Plan]:
    """The loader's plan as a checked shardopt Plan, or None to plan afresh. ``score(plan)`` adds
    the cost model's prediction. PlannerError (TorchRec's types) for a mismatch or a plan that
    does not fit."""
    from torchrec.distributed.planner.planners import extract_plan, to_sharding_plan
    from torchrec.distributed.planner.types import PlannerError, PlannerErrorType

    from shardopt.arithmetic.checks import check_plan
    from shardopt.core.errors import ShardoptError
    from shardopt.torchrec.planner_errors import ShardoptPlannerError
    from shardopt.torchrec.sharding_plan import from_sharding_plan

    search_space = enumerator.enumerate(module=module, sharders=sharders)
    current = context_hash(topology, batch_size, enumerator, reservation, constraints)
    stored = plan_loader.plan_context_hash()
    plan_id = getattr(plan_loader, "get_plan_id", lambda: None)()
    if stored is not None and stored != current:
        raise ShardoptPlannerError(
            f"Unable to load, because of planner input mismatch - cannot validate this plan is the best plan for"
            f" current context: plan {plan_id}: current planner hash {current}, loaded plan hash {stored}",
            PlannerErrorType.PLANNER_INPUT_CONTEXT_MISMATCH,
            ("re-plan and store the plan for this topology, batch size, reservation and constraints",))
    options = plan_loader.load()
    if options is None:
        logger.info("ShardoptPlanner: plan_loader %s returned no plan; planning afresh", plan_id)
        return None
    best = extract_plan(search_space=search_space, loaded_sharding_options=options)  # PLAN_LOADING_FAILED
    if not best:
        return None
    try:
        plan = from_sharding_plan(workload, to_sharding_plan(best, topology), origins=origins)
    except ShardoptError as exc:
        raise PlannerError(f"plan {plan_id}: {exc}", PlannerErrorType.PLAN_LOADING_FAILED) from None
    report = check_plan(workload, plan)
    if not report.valid:
        raise ShardoptPlannerError(f"shardopt: the stored plan {plan_id} does not fit the model: {report.violations[0]}",
                                   PlannerErrorType.PLAN_LOADING_FAILED,
                                   ("re-plan for the memory this topology leaves",))
    logger.info("ShardoptPlanner: loaded plan %s from plan_loader; planning skipped", plan_id)
    return score(plan)


def scored(plan: Plan, workload: Workload, model) -> Plan:
    """A loaded plan with the cost model's prediction (no search ran, so no lower bound)."""
    import dataclasses

    from shardopt.contracts import Breakdown
    from shardopt.core.plan import Predicted, SearchInfo

    per_rank = tuple(model.breakdown(workload, plan.tables))
    predicted = Predicted(cost_model=model.name, max_ms=Breakdown.of(per_rank).bottleneck_ms, lower_bound_ms=0.0,
                          per_rank=per_rank, search=SearchInfo(algorithm="loaded", status="plan_loader"))
    return dataclasses.replace(plan, predicted=predicted)
