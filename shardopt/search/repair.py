"""Re-score a plan with the whole cost model and repair its bottleneck by local moves.

The ILP and the greedy add up shard costs, but a fused rank's cost is not additive: kernel and
collective overheads depend on which kinds a rank holds, and a learned model prices a rank's
shards together. So after a search, each rank is re-scored as the model sees it, and shards are
moved off (or swapped with a lighter shard from) the bottleneck rank while that lowers the
bottleneck. Under the critical-path objective (``shardopt/contracts.py``) the score is the sum over
phases of each phase's slowest rank, and moves are tried off each phase's slowest rank, shards
weighed by that phase. Only the moved shards' two ranks are re-scored per trial, so it scales to
1000 tables on 128 ranks within a budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from shardopt.contracts import ShardSpec
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.uncertainty import plan_penalty
from shardopt.arithmetic.memory import plan_memory, shard_memory
from shardopt.core.plan import Shard, TablePlan
from shardopt.contracts import BOTTLENECK, Objective, Phases, rank_phases
from shardopt.core.workload import Workload

if TYPE_CHECKING:
    from shardopt.contracts import SearchResult

# Re-scores per second of budget: the budget is counted in re-scores, not seconds, so the same
# input gives the same plan; a wall-clock deadline, far past the budget, only guards against a
# model so slow that the budget would take minutes (a learned re-score costs 3-5x an analytic one).
EVALS_PER_SECOND = 800
# Without a deadline given, the wall clock stops a repair only this many times past its budget,
# counted from its own start: a search that took long (5000 tables x 1024 ranks: a minute of
# candidates and greedy) must not leave its repair cut at a timing-dependent point.
WALL_GUARD = 10.0
MAX_SHARDS_TRIED = 24  # heaviest shards of the bottleneck rank tried per step
MAX_DESTINATIONS = 12  # least-loaded ranks tried for each
_EPS = 1e-9


@dataclass(frozen=True)
class RepairResult:
    tables: tuple[TablePlan, ...]
    moves: int
    before_ms: float  # the model's bottleneck
    after_ms: float
    cut_by_clock: bool = False  # the deadline, not the budget or a local optimum, stopped it
    before_score: float = 0.0  # the objective's
    after_score: float = 0.0

    def kept(self, tables: Sequence[TablePlan]) -> Sequence[TablePlan]:
        """The repaired tables if the repair lowered the score, else ``tables`` (those it repaired)."""
        return self.tables if self.after_score < self.before_score else tables


def movable(workload: Workload, tp: TablePlan) -> str | None:
    """Where a table's shards may go: "any" rank, its "host", or None (fixed by its kind, or named
    by a placement rule: local moves leave those where the search honoured the rule)."""
    if workload.placement and tp.name in workload.ruled_tables:
        return None
    if tp.sharding_type in ("table_wise", "column_wise"):
        return "any"
    if tp.sharding_type == "row_wise" and len(tp.shards) < workload.topology.world_size:
        return "any"  # a row-wise subset; over all ranks it is pinned to them in order
    if tp.sharding_type == "table_column_wise":
        return "host"
    return None


class _State:
    """Shards per rank, with each rank's re-scored phases and memory."""

    def __init__(self, workload: Workload, model: CostModel, tables: Sequence[TablePlan]) -> None:
        self.workload = workload
        self.model = model
        self.tables = list(tables)
        world = workload.topology.world_size
        self.on_rank: list[list[tuple[int, int]]] = [[] for _ in range(world)]  # (table, shard)
        for ti, tp in enumerate(self.tables):
            for si, shard in enumerate(tp.shards):
                self.on_rank[shard.rank].append((ti, si))
        self.load = [rank_phases(r) for r in model.breakdown(workload, self.tables)]
        hbm, ddr = plan_memory(workload, self.tables)
        self.hbm = [hbm.get(r, 0) for r in range(world)]
        self.ddr = [ddr.get(h, 0) for h in range(workload.topology.num_hosts)]
        self._subs: dict[tuple, TablePlan] = {}  # (table, its (shard, rank) members) -> the copy

    def _memory(self, ti: int, shard: Shard) -> tuple[int, int]:
        tp = self.tables[ti]
        mem = shard_memory(self.workload.optimizer, ShardSpec.placed(self.workload.table(tp.name), tp, shard))
        return mem.hbm_bytes, mem.ddr_bytes

    def rank_load(self, rank: int, items: Sequence[tuple[int, int]], moved_rank: dict) -> Phases:
        """The model's phases for ``rank`` holding ``items`` (shards re-ranked per ``moved_rank``)."""
        grouped: dict[int, list[tuple[int, int]]] = {}
        for ti, si in items:
            grouped.setdefault(ti, []).append((si, moved_rank.get((ti, si), self.tables[ti].shards[si].rank)))
        if not grouped:
            return 0.0, 0.0, 0.0, 0.0
        sub = [self._held(ti, tuple(members)) for ti, members in sorted(grouped.items())]
        return rank_phases(self.model.rank_breakdown(self.workload, sub, rank))

    def _held(self, ti: int, members: tuple[tuple[int, int], ...]) -> TablePlan:
        """Table ``ti``'s plan with only these (shard, rank) members, made once: a repair prices
        the same rank's other tables for every move it tries, and validating their copies was a
        third of its time. Moves change ranks, never cuts, so the members say all of the copy."""
        held = self._subs.get((ti, members))
        if held is None:
            tp = self.tables[ti]
            shards = tuple(tp.shards[si] if r == tp.shards[si].rank else replace(tp.shards[si], rank=r)
                           for si, r in members)
            held = self._subs[ti, members] = replace(tp, shards=shards)
        return held

    def apply(self, moves: Sequence[tuple[int, int, int]], loads: dict[int, Phases]) -> None:
        """Move shards (table, shard, destination) and record the re-scored loads."""
        topo = self.workload.topology
        for ti, si, dest in moves:
            shard = self.tables[ti].shards[si]
            src = shard.rank
            hbm, ddr = self._memory(ti, shard)
            self.hbm[src] -= hbm
            self.hbm[dest] += hbm
            self.ddr[topo.host_of(src)] -= ddr
            self.ddr[topo.host_of(dest)] += ddr
            self.on_rank[src].remove((ti, si))
            self.on_rank[dest].append((ti, si))
            shards = list(self.tables[ti].shards)
            shards[si] = replace(shard, rank=dest)
            self.tables[ti] = replace(self.tables[ti], shards=tuple(shards))
        for rank, value in loads.items():
            self.load[rank] = value



class _Mover:
    """One repair run: the plan's state, the shards' costs alone, and the evaluations used."""

    def __init__(self, workload: Workload, model: CostModel, tables, objective: Objective,
                 evaluations: int, deadline: float) -> None:
        self.workload, self.model, self.objective = workload, model, objective
        self.state = _State(workload, model, tables)
        # Moves change no cut: the robust objective's penalty of the cuts is the plan's throughout.
        self.penalty = plan_penalty(objective, workload, model, tables)
        self.evaluations, self.deadline, self.used = evaluations, deadline, 0
        self.shard_alone: dict[tuple[int, int], Phases] = {}

    def alone(self, item: tuple[int, int], weights: Phases) -> float:
        """The shard's cost priced alone, its phases weighted."""
        if item not in self.shard_alone:
            state = self.state
            tp = state.tables[item[0]]
            shard = tp.shards[item[1]]
            cost = self.model.shard_cost(self.workload, ShardSpec.placed(state.workload.table(tp.name), tp, shard))
            self.shard_alone[item] = rank_phases(cost)
        return sum(w * x for w, x in zip(weights, self.shard_alone[item]))

    def fits(self, item: tuple[int, int], src: int, dest: int, back: tuple[int, int] | None = None) -> bool:
        state, topo = self.state, self.workload.topology
        hbm, ddr = state._memory(item[0], state.tables[item[0]].shards[item[1]])
        back_hbm, back_ddr = state._memory(back[0], state.tables[back[0]].shards[back[1]]) if back else (0, 0)
        if state.hbm[dest] + hbm - back_hbm > topo.rank_caps[dest]:
            return False
        if back and state.hbm[src] + back_hbm - hbm > topo.rank_caps[src]:
            return False
        if topo.ddr_cap is not None and topo.host_of(src) != topo.host_of(dest):
            if state.ddr[topo.host_of(dest)] + ddr - back_ddr > topo.ddr_cap:
                return False
            if back and state.ddr[topo.host_of(src)] + back_ddr - ddr > topo.ddr_cap:
                return False
        return True

    def allowed(self, item: tuple[int, int], dest: int) -> bool:
        tp = self.state.tables[item[0]]
        where = movable(self.workload, tp)
        if where is None:
            return False
        src = tp.shards[item[1]].rank
        topo = self.workload.topology
        if where == "host" and topo.host_of(src) != topo.host_of(dest):
            return False
        # Pieces of one table stay on distinct ranks: co-located pieces are one bigger piece.
        return all(s.rank != dest for j, s in enumerate(tp.shards) if j != item[1])

    def out_of_budget(self) -> bool:
        return self.used >= self.evaluations or time.perf_counter() >= self.deadline

    def best_move(self) -> tuple[float, list, dict] | None:
        """The best improving move or swap of the heaviest shard that has one, or None.

        Off the bottleneck rank, or off each phase's slowest rank with shards weighed by the
        phases it is slowest in: a rank slowest in lookups sheds lookups, a swap brings traffic.
        """
        state = self.state
        score = self.objective.score(state.load, self.penalty)
        for worst, k in self.objective.sources(state.load, self.penalty):
            items = sorted(state.on_rank[worst], key=lambda it: (-self.alone(it, k), it))[:MAX_SHARDS_TRIED]
            dests = sorted((r for r in range(len(state.load)) if r != worst),
                           key=lambda r: (sum(state.load[r]), r))[:MAX_DESTINATIONS]
            for item in items:
                if self.out_of_budget():
                    break
                best = self._best_for(item, worst, k, dests, score)
                if best is not None:
                    return best  # the heaviest shard that can move: take its best move, then look again
        return None

    def _best_for(self, item, worst: int, k: Phases, dests, score: float) -> tuple[float, list, dict] | None:
        state, best = self.state, None
        for dest in dests:
            if not self.allowed(item, dest):
                continue
            # A plain move, and failing that a swap with a lighter shard of the destination.
            trials = [None] + sorted(
                (b for b in state.on_rank[dest] if self.alone(b, k) < self.alone(item, k) and self.allowed(b, worst)),
                key=lambda b: (-self.alone(b, k), b),
            )[:3]
            for back in trials:
                if not self.fits(item, worst, dest, back):
                    continue
                moved = {item: dest, **({back: worst} if back else {})}
                src_items = [it for it in state.on_rank[worst] if it != item] + ([back] if back else [])
                dst_items = [it for it in state.on_rank[dest] if it != back] + [item]
                new_src = state.rank_load(worst, src_items, moved)
                new_dst = state.rank_load(dest, dst_items, moved)
                self.used += 2
                trial = list(state.load)
                trial[worst], trial[dest] = new_src, new_dst
                new_score = self.objective.score(trial, self.penalty)
                if new_score < score - _EPS and (best is None or new_score < best[0] - _EPS):
                    trial_moves = [(item[0], item[1], dest)] + ([(back[0], back[1], worst)] if back else [])
                    best = (new_score, trial_moves, {worst: new_src, dest: new_dst})
                if back is None and best is not None and best[1][0][:2] == item:
                    break  # a plain move of this shard works; no need to try swaps for it
        return best


def repair_bottleneck(
    workload: Workload,
    model: CostModel,
    tables: Sequence[TablePlan],
    *,
    time_budget_s: float = 1.0,
    max_moves: int = 1000,
    deadline: float | None = None,
    objective: Objective = BOTTLENECK,
) -> RepairResult:
    """Moves and swaps off the bottleneck rank while they lower the score, within the budget.

    ``deadline`` (a ``time.perf_counter()`` value) stops it early whatever the budget says.
    """
    evaluations = int(time_budget_s * EVALS_PER_SECOND)
    deadline = deadline if deadline is not None else time.perf_counter() + WALL_GUARD * max(time_budget_s, 0.1)
    mover = _Mover(workload, model, tables, objective, evaluations, deadline)
    state = mover.state
    before = BOTTLENECK.score(state.load)
    before_score = objective.score(state.load, mover.penalty)
    moves = 0
    while moves < max_moves and not mover.out_of_budget():
        best = mover.best_move()
        if best is None:
            break
        state.apply(best[1], best[2])
        moves += 1
    cut = time.perf_counter() >= deadline and mover.used < evaluations and moves < max_moves
    return RepairResult(tuple(state.tables), moves, before, BOTTLENECK.score(state.load), cut,
                        before_score, objective.score(state.load, mover.penalty))


def repaired(
    workload: Workload, model: CostModel, result: "SearchResult", budget_s: float,
    deadline: float | None = None, objective: Objective = BOTTLENECK,
) -> "SearchResult":
    """The search's result after repair; the plan is kept only if repair lowered its score."""
    fixed = repair_bottleneck(workload, model, result.tables, time_budget_s=budget_s, deadline=deadline,
                              objective=objective)
    return with_repair(result, fixed)


def with_repair(result: "SearchResult", fixed: RepairResult) -> "SearchResult":
    """``result`` after ``fixed``, its tables' repair: kept only if it lowered the score."""
    tables = fixed.kept(result.tables)
    status = result.status
    if fixed.cut_by_clock:
        status += " (repair stopped by the wall clock; may differ between runs)"
    return replace(result, tables=tables, algorithm=result.algorithm + "+repair", repair_moves=fixed.moves,
                   status=status)
