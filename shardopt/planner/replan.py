"""Re-planning a changed workload from an old plan, trading the step against bytes moved.

A fresh plan is made first and the old ranks are matched to its ranks to keep the most bytes (a
new world numbers its ranks freely). Without a budget the replan keeps the fresh plan's step and
moves as little as that allows; with one (``--max-move``) CP-SAT finds the best step within it.
What only dropped ranks held must move whatever the plan: a budget below that is refused. After a
failure (``lost_ranks``) the survivors are given, in their order, and what only the lost ranks held
is read from the last checkpoint, counted in the budget as peers' sends are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

from shardopt.arithmetic.movement import (
    OldLayout, forced_bytes, given_survivors, moved_bytes, relabelling, restored_bytes, survivors,
)
from shardopt.contracts import OBJECTIVES, Breakdown, PlanConfig
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.plan import Plan, TablePlan
from shardopt.core.units import format_bytes
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.planner.factory import plan_with, resolve_model
from shardopt.planner.pipeline import plan_workload
from shardopt.search.repair import movable
from shardopt.search.replan import BudgetedSearch

# Budgets of a frontier, as shares of what the fresh plan moves (beside the forced minimum).
FRONTIER_SHARES = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Replanned:
    """A replan and what it costs: bytes moved against the fresh plan's, and the steps."""

    plan: Plan
    moved_bytes: int
    budget_bytes: int
    forced_bytes: int
    old_of: dict[int, int]  # new rank -> the old rank it was (ranks missing: new ones)
    fresh: Plan
    fresh_moved_bytes: int
    objective: str
    lost: tuple[int, ...] = ()  # old ranks that died (their pieces read from the checkpoint)
    restored_bytes: int = 0  # of moved_bytes, what the checkpoint supplies

    def step_ms(self, plan: Optional[Plan] = None) -> float:
        per_rank = (plan or self.plan).predicted.per_rank
        return Breakdown.of(per_rank).score(OBJECTIVES[self.objective])


@dataclass(frozen=True)
class ReplanStart:
    """What every budget of one change shares: the fresh plan, the old ranks matched to its ranks,
    what the change forces to move and what the fresh plan moves."""

    layout: OldLayout
    fresh: Plan
    old_of: dict[int, int]
    forced: int
    fresh_moved: int


def replan_start(old: Plan, workload: Workload, config: PlanConfig = PlanConfig(), *,
                 cost_model: Optional[CostModel] = None, sha256: Optional[str] = None,
                 source: str = "<workload>", lost_ranks: Sequence[int] = ()) -> ReplanStart:
    model = cost_model if cost_model is not None else resolve_model(config, workload)[0]
    check_lost_ranks(lost_ranks, old.world_size, workload.topology.world_size)
    layout = OldLayout.of(old, lost_ranks)
    fresh = plan_with(workload, config, cost_model=model, sha256=sha256, source=source)
    if lost_ranks:
        old_of = given_survivors(layout, workload.topology.world_size)
    else:
        keep = survivors(workload, layout) if workload.topology.world_size < old.world_size else None
        old_of = relabelling(workload, layout, fresh.tables, keep)
    return ReplanStart(layout, fresh, old_of, forced_bytes(workload, layout, list(old_of.values())),
                       moved_bytes(workload, layout, fresh.tables, old_of))


def check_lost_ranks(lost: Sequence[int], old_world: int, new_world: int) -> None:
    """Lost ranks must be ranks of the old world, once each, and the new world must hold every
    survivor (a job that lost ranks goes on with its survivors, and any replacements)."""
    if not lost:
        return
    option = f"--lost-ranks {','.join(map(str, lost))}"
    bad = [r for r in lost if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < old_world]
    if bad:
        raise ShardoptError(f"{option}: rank {bad[0]!r} is not a rank of the old plan's world (0-{old_world - 1})",
                            kind=ErrorKind.INPUT)
    if len(set(lost)) != len(lost):
        raise ShardoptError(f"{option}: a rank is named twice", kind=ErrorKind.INPUT)
    alive = old_world - len(lost)
    if alive == 0:
        raise ShardoptError(f"{option}: every rank of the old world is lost; nothing survives to keep: plan the"
                            " workload afresh (shardopt plan) and load the checkpoint", kind=ErrorKind.INPUT)
    if new_world < alive:
        raise ShardoptError(f"{option}: {alive} ranks survive but the workload's world_size is {new_world}; the"
                            f" survivors keep their ranks 0-{alive - 1}, so world_size must be at least {alive}",
                            kind=ErrorKind.INPUT)


def _staying(old: Plan, workload: Workload, layout: OldLayout,
             old_of: dict[int, int]) -> tuple[tuple[TablePlan, ...], dict[str, frozenset[int]]]:
    """The old plan's tables that keep their cut, renumbered, and per table the pieces whose old
    rank is gone (placed anew; only cuts whose pieces may go anywhere keep such pieces)."""
    new_of = {o: n for n, o in old_of.items()}
    tables, homeless = [], {}
    for tp in old.tables:
        table = workload.tables_by_name.get(tp.name)
        if (table is None or tp.sharding_type == "data_parallel" or tp.replicated_rows
                or layout.extent[tp.name] != (table.num_embeddings, table.embedding_dim)
                or len(tp.shards) > workload.topology.world_size):
            continue
        gone = frozenset(i for i, s in enumerate(tp.shards) if s.rank not in new_of)
        if gone and movable(workload, tp) != "any":
            continue
        tables.append(replace(tp, shards=tuple(replace(s, rank=new_of.get(s.rank, 0)) for s in tp.shards)))
        if gone:
            homeless[tp.name] = gone
    return tuple(tables), homeless


def replan_with(
    old: Plan, workload: Workload, config: PlanConfig = PlanConfig(), *, max_move: Optional[int] = None,
    cost_model: Optional[CostModel] = None, sha256: Optional[str] = None, source: str = "<workload>",
    start: Optional[ReplanStart] = None, hints: Sequence[Sequence[TablePlan]] = (), lost_ranks: Sequence[int] = (),
) -> Replanned:
    """The best step within ``max_move`` bytes moved (None: the fresh plan's step, moving least);
    ``start``: the change's :func:`replan_start`, when already made; ``lost_ranks``: old ranks
    that died (the survivors keep their order; their pieces come from the checkpoint)."""
    model = cost_model if cost_model is not None else resolve_model(config, workload)[0]
    s = start or replan_start(old, workload, config, cost_model=model, sha256=sha256, source=source,
                              lost_ranks=lost_ranks)
    budget = s.fresh_moved if max_move is None else max_move
    if budget < s.forced:
        gone = (f"the lost ranks {', '.join(map(str, sorted(s.layout.lost)))} held, read from the checkpoint"
                if s.layout.lost else f"the {old.world_size - len(s.old_of)} dropped ranks hold")
        raise ShardoptError(
            f"--max-move {format_bytes(budget)}: the change forces {format_bytes(s.forced)} to move"
            f" (what only {gone}); raise it to at least that", kind=ErrorKind.INPUT)
    search = budgeted_search(old, workload, config, s, budget, hints)
    try:
        plan = plan_workload(workload, sha256=sha256, cost_model=model, search=search, source=source)
    except ShardoptError as exc:
        if exc.kind != ErrorKind.INFEASIBLE:
            raise
        raise ShardoptError(f"{exc}; within --max-move {format_bytes(budget)}: raise the budget or the caps",
                            kind=ErrorKind.INFEASIBLE) from None
    # The fresh plan was one of the search's starts: where it fits the budget and the whole model
    # rates it best, it is the plan.
    moved = moved_bytes(workload, s.layout, plan.tables, s.old_of)
    restored = restored_bytes(workload, s.layout, plan.tables, s.old_of) if s.layout.lost else 0
    return Replanned(plan, moved, budget, s.forced, s.old_of, s.fresh, s.fresh_moved, config.objective,
                     tuple(sorted(s.layout.lost)), restored)


def budgeted_search(old: Plan, workload: Workload, config: PlanConfig, s: ReplanStart, budget: int,
                    hints: Sequence[Sequence[TablePlan]] = ()) -> BudgetedSearch:
    """The search of a replan within ``budget`` bytes (also what benchmarks/replan_bound.py proves
    bounds with)."""
    staying, homeless = _staying(old, workload, s.layout, s.old_of)
    return BudgetedSearch(s.layout, {tp.name: tp for tp in old.tables}, s.old_of, budget, staying, homeless,
                          s.fresh.tables, [*hints, s.fresh.tables], config.time_limit_s, config.candidates,
                          OBJECTIVES[config.objective])


def move_frontier(
    old: Plan, workload: Workload, config: PlanConfig = PlanConfig(), *, shares: Sequence[float] = FRONTIER_SHARES,
    cost_model: Optional[CostModel] = None, sha256: Optional[str] = None, source: str = "<workload>",
    progress=None, start: Optional[ReplanStart] = None, lost_ranks: Sequence[int] = (),
) -> list[Replanned]:
    """Replans over budgets from the forced minimum to what the fresh plan moves; each starts from
    the plan of the budget below (which fits its budget too), so more bytes never buy a longer step."""
    model = cost_model if cost_model is not None else resolve_model(config, workload)[0]
    s = start or replan_start(old, workload, config, cost_model=model, sha256=sha256, source=source,
                              lost_ranks=lost_ranks)
    budgets = sorted({max(s.forced, int(share * s.fresh_moved)) for share in shares})
    out = []
    for budget in budgets:
        try:
            out.append(replan_with(old, workload, config, max_move=budget, cost_model=model, sha256=sha256,
                                   source=source, start=s, hints=[out[-1].plan.tables] if out else ()))
        except ShardoptError as exc:
            if exc.kind != ErrorKind.INFEASIBLE:
                raise
        if progress:
            progress(budget)
    return out
