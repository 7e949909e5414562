"""CP-SAT under a budget on bytes moved: the search behind ``shardopt replan``.

The same model as :class:`~shardopt.search.ilp.IlpSearch` (cuts, placements, memory, phases),
with every placement literal charged the bytes it would move (``arithmetic/movement.py``) and
their sum capped; of two plans with the same step the one moving less wins. Each table is offered
its old cut and the fresh plan's cut, so keeping a table as it was is always a choice (and costs
nothing where its ranks survive); with every cut, large-neighbourhood search under the global byte
budget left ranks empty that a move would have filled. CP-SAT starts from plans spent down to the
budget by ``budget_descent``: the old plan (what cannot stay placed where there is room) and the
fresh plan with the tables that save the most bytes per step lost put back. The plan kept is the best of
CP-SAT's and the starts under the whole cost model. No repair pass: it moves shards without
counting bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from ortools.sat.python import cp_model

from shardopt.arithmetic.memory import shard_memory
from shardopt.arithmetic.movement import OldLayout, moved_bytes, piece_move_bytes, rank_move_bytes
from shardopt.arithmetic.placement import placement_violations
from shardopt.contracts import (
    CRITICAL_PATH, DEFAULT_CANDIDATES, DEFAULT_TIME_LIMIT_S, Breakdown, Objective, SearchResult, ShardSpec,
    rank_phases,
)
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.search.bound import balance_lower_bound
from shardopt.search.candidates import TORCHREC_TYPES, Candidate, Piece, piece_costs, workload_candidates
from shardopt.search.ilp import MAX_PLACEMENTS, IlpSearch, placements
from shardopt.search.ilp_model import IlpModel, MoveLimit
from shardopt.search.descent import budget_descent
from shardopt.search.repair import movable

# Moves (piece, rank) a start's descent may try per second of time limit: counted, not timed, so
# the same input gives the same plan; about 0.3 s of a 2-core VM at 300 tables x 32 ranks.
DESCENT_TRIALS_PER_S = 150_000
SOLVER_SHARE = 0.8  # of the time limit, for CP-SAT (its starts and the final scoring take the rest)

HOST_BOUND = ("table_row_wise", "table_column_wise")
SAME_STEP = 1e-9  # relative: steps this close are the same step (sums in another order)


@dataclass
class BudgetedSearch:
    """Plans ``workload`` moving at most ``max_bytes`` from ``old`` (new rank r was old rank
    ``old_of[r]``). CP-SAT starts from the first of ``hints`` that fits the budget, else from the
    tables that can stay (``staying``) with the rest cut as in ``fresh`` and placed where there is
    room, then moved piece by piece where that lowers the step most per byte (``budget_descent``)."""

    old: OldLayout
    old_tables: Mapping[str, TablePlan]
    old_of: Mapping[int, int]
    max_bytes: int
    staying: Sequence[TablePlan] = ()
    homeless: Mapping[str, frozenset[int]] = field(default_factory=dict)
    fresh: Sequence[TablePlan] = ()
    hints: Sequence[Sequence[TablePlan]] = ()
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    candidates: str = DEFAULT_CANDIDATES
    objective: Objective = CRITICAL_PATH
    name = "replan"

    def _narrowed(self, candidates, costs):
        """Per table, the candidates that cut it as the old plan or the fresh plan does."""
        wanted: dict[str, set] = {}
        for plan in (self.old_tables.values(), self.fresh):
            for tp in plan:
                wanted.setdefault(tp.name, set()).add(_plan_cut(tp))
        narrow, narrow_costs = {}, {}
        for name, cands in candidates.items():
            keep = [i for i, c in enumerate(cands) if _cut(c) in wanted.get(name, ())]
            keep = keep or list(range(len(cands)))  # neither cut is offered here: all of them
            narrow[name] = [cands[i] for i in keep]
            narrow_costs[name] = [costs[name][i] for i in keep]
        return narrow, narrow_costs

    def build(self, workload: Workload, cost_model: CostModel, every_cut: bool = False, budget: bool = True):
        """The CP-SAT model (its cuts narrowed to the old and the fresh plan's unless ``every_cut``;
        without ``budget``, no limit on bytes: what the fresh plan scores in it), the balance bound
        and the bytes each placement moves."""
        candidates, costs, bound = self._offered(workload, cost_model, every_cut)
        rect_bytes = self._rect_bytes(workload)
        return self._model(workload, cost_model, candidates, costs, rect_bytes, budget), bound, rect_bytes

    def _offered(self, workload: Workload, cost_model: CostModel, every_cut: bool = False):
        """The cuts offered (with each table's old cut), their costs and the balance bound over them."""
        candidates, costs = workload_candidates(workload, cost_model, self.candidates)  # type: ignore[arg-type]
        for table in workload.tables:
            kept = self._old_cut(workload, table.name, candidates[table.name])
            if kept is not None:
                candidates[table.name].append(kept)
                costs[table.name].append(piece_costs(workload, cost_model, kept))
        bound = balance_lower_bound(workload, cost_model, candidates, costs)
        if not every_cut:
            candidates, costs = self._narrowed(candidates, costs)
        return candidates, costs, bound

    def _rect_bytes(self, workload: Workload):
        def rect_bytes(name: str, rect: tuple, rank: int) -> int:
            """Bytes arriving for ``rect`` of table ``name`` on new ``rank`` (-1: a rank that held none)."""
            return piece_move_bytes(workload, self.old, workload.table(name), rect, self.old_of.get(rank))

        return rect_bytes

    def _rank_bytes(self, workload: Workload):
        new_of = {old: new for new, old in self.old_of.items()}

        def rank_bytes(name: str, shard: Shard) -> np.ndarray:
            """Bytes arriving for ``shard`` of table ``name`` on each new rank."""
            return rank_move_bytes(workload, self.old, workload.table(name), (*shard.offsets, *shard.sizes), new_of)

        return rank_bytes

    def _model(self, workload: Workload, cost_model: CostModel, candidates, costs, rect_bytes, budget: bool) -> IlpModel:
        def piece_bytes(name: str, cand: Candidate, p: int, rank: int) -> int:
            piece = cand.pieces[p]
            return rect_bytes(name, (0, 0, piece.row_offset + piece.rows, piece.cols) if cand.replicated_rows
                              else tuple(piece), rank)

        replica_ms = max(0.0, cost_model.rank_overhead_ms(workload, {"table_wise", "data_parallel"})
                         - cost_model.rank_overhead_ms(workload, {"table_wise"}))
        return IlpModel(workload, candidates, costs, replica_ms, cost_model.comm_curves(workload), self.objective,
                        moves=MoveLimit(piece_bytes, self.max_bytes) if budget else None)

    def search(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        candidates, costs, bound = self._offered(workload, cost_model)
        rect_bytes = self._rect_bytes(workload)
        starts = [tuple(h) for h in self.hints if self._moved(workload, h) <= self.max_bytes]
        # Pieces leaving for a rank that held nothing of them: rank -1 is no old rank.
        starts += self._starts(workload, cost_model,
                               lambda name, shard, rank: rect_bytes(name, (*shard.offsets, *shard.sizes), rank))
        size = placements(workload, candidates)
        if size > MAX_PLACEMENTS:  # as IlpSearch: the starts, each within the budget, are the plans
            return self._best(workload, cost_model, [], starts, bound, size)
        model = self._model(workload, cost_model, candidates, costs, rect_bytes, budget=True)
        for hint in starts:
            model.hint(hint)
            if model.complete_hint():
                break
            model.cp.clear_hints()
        ilp = IlpSearch(time_limit_s=self.time_limit_s * SOLVER_SHARE, candidates=self.candidates,
                        objective=self.objective)
        solver, status, proved, _ = ilp._run(model)
        solved = [model.solution(solver)] if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else []
        # CP-SAT's bound holds for summed shard costs over the cuts offered, within the budget.
        solver_bound = proved / model.step_weight / model.scale if solved else None
        return self._best(workload, cost_model, solved, starts, bound, size, solver, status, solver_bound)

    def _best(self, workload: Workload, cost_model: CostModel, solved, starts, bound: float, size: int,
              solver=None, status=None, solver_bound=None) -> SearchResult:
        """The best of CP-SAT's plan and the starts under the whole cost model (CP-SAT sees summed
        shard costs); without a solver (over MAX_PLACEMENTS), the best start."""
        # Starts are built from the old plan, which may break a rule the new workload adds.
        found = solved + [s for s in starts if not placement_violations(workload, s)]
        said = f"SKIPPED (over {MAX_PLACEMENTS} placements)" if solver is None else solver.status_name(status)
        if not found:
            verdict = "no plan moves so little" if status == cp_model.INFEASIBLE else \
                "no start keeps within the budget" if solver is None else "none found in the time limit"
            raise ShardoptError(f"{verdict} (CP-SAT: {said})", kind=ErrorKind.INFEASIBLE)
        # Of plans with the best step, the one moving least (the fresh plan, a hint, comes first; at
        # 16384 ranks a start from the old plan matched its step moving 6.25 GiB, what the lost
        # host held, where the fresh plan, kept for the tie, moved 277).
        scores = [Breakdown.of(cost_model.breakdown(workload, tables)).score(self.objective) for tables in found]
        least = min(scores)
        best = min((t for t, s in zip(found, scores) if s <= least * (1 + SAME_STEP)), key=lambda t: self._moved(workload, t))
        said += "" if solved and best is solved[0] else " (a start kept)"
        return SearchResult(best, bound, "replan", said, solver_bound_ms=solver_bound, variables=size)

    def _moved(self, workload: Workload, tables: Sequence[TablePlan]) -> int:
        return moved_bytes(workload, self.old, tables, self.old_of)

    def _starts(self, workload: Workload, cost_model: CostModel, shard_bytes) -> list[tuple[TablePlan, ...]]:
        """Starts, each spent down to the budget by ``budget_descent``: from below (the staying
        tables, the rest placed where there is room) and from above (the fresh plan with the tables
        that save the most bytes per step lost put back as they were). Best first; none that moves
        too much."""
        starts = [placed_rest(workload, cost_model, self.staying, self.homeless, self.fresh)]
        # Tables whose every piece must move cost no more cut as the fresh plan cuts them: a second
        # start from below (neither won on every workload of benchmarks/replan.py).
        whole = {tp.name for tp in self.staying if len(self.homeless.get(tp.name, ())) == len(tp.shards)}
        if whole:
            starts.append(placed_rest(workload, cost_model, [tp for tp in self.staying if tp.name not in whole],
                                      self.homeless, self.fresh))
        starts.append(reverted(workload, cost_model, self.fresh, self.staying, self.homeless, self.objective,
                               lambda tp: sum(shard_bytes(tp.name, s, s.rank) for s in tp.shards), self.max_bytes))
        out, rank_bytes = [], self._rank_bytes(workload)
        for start in starts:
            spare = self.max_bytes - self._moved(workload, start)
            if spare < 0:
                continue
            fixed = budget_descent(workload, cost_model, start, self.objective, rank_bytes, spare,
                                   trials=int(DESCENT_TRIALS_PER_S * self.time_limit_s))
            out.append(fixed if self._moved(workload, fixed) <= self.max_bytes else start)
        return sorted(out, key=lambda t: Breakdown.of(cost_model.breakdown(workload, t)).score(self.objective))

    def _old_cut(self, workload: Workload, name: str, offered: list[Candidate]) -> Candidate | None:
        """The table's old cut as a candidate, where it is still a valid cut of the table here."""
        tp = self.old_tables.get(name)
        table = workload.table(name)
        if tp is None or tp.sharding_type == "data_parallel" or tp.replicated_rows:
            return None  # replicas are offered anyway; hot rows are re-derived
        if self.old.extent.get(name) != (table.num_embeddings, table.embedding_dim):
            return None  # resized: the old pieces no longer tile it
        topo = workload.topology
        if tp.sharding_type not in table.allowed_sharding_types:
            return None
        if self.candidates == "torchrec" and (
                tp.sharding_type not in TORCHREC_TYPES[topo.compute_device]
                or (tp.sharding_type == "row_wise" and len(tp.shards) != topo.world_size)):
            return None
        if tp.sharding_type == "table_row_wise" and len(tp.shards) != topo.ranks_per_host:
            return None
        pieces = tuple(Piece(*s.offsets, *s.sizes) for s in tp.shards)
        placement = "host" if tp.sharding_type in HOST_BOUND else "free"
        cand = Candidate(name, tp.sharding_type, pieces, placement, tp.compute_kernel, tp.cache_load_factor)
        return None if _cut(cand) in {_cut(c) for c in offered} else cand


def placed_rest(workload: Workload, cost_model: CostModel, staying: Sequence[TablePlan],
                homeless: Mapping[str, frozenset[int]], fresh: Sequence[TablePlan]) -> tuple[TablePlan, ...]:
    """``staying`` as given but for its ``homeless`` pieces (their old rank is gone); every other
    table cut as in ``fresh``. Pieces placed anew go to the least loaded ranks with room, heaviest
    table first; pieces that cannot move freely stay where ``fresh`` put them."""
    topo = workload.topology
    load, hbm = [0.0] * topo.world_size, [0] * topo.world_size

    def piece(tp: TablePlan, shard: Shard) -> tuple[float, int]:
        spec = ShardSpec.placed(workload.table(tp.name), tp, shard)
        return cost_model.shard_cost(workload, spec).total_ms, shard_memory(workload.optimizer, spec).hbm_bytes

    def charge(tp: TablePlan, shard: Shard) -> None:
        ms, size = piece(tp, shard)
        load[shard.rank] += ms
        hbm[shard.rank] += size

    kept = {tp.name: tp for tp in staying}
    for tp in staying:
        for i, shard in enumerate(tp.shards):
            if i not in homeless.get(tp.name, ()):
                charge(tp, shard)
    todo = [tp for tp in staying if homeless.get(tp.name)] + [tp for tp in fresh if tp.name not in kept]
    todo.sort(key=lambda tp: (-sum(piece(tp, s)[0] for s in tp.shards), tp.name))
    for tp in todo:
        if tp.name in kept:
            anew = homeless[tp.name]
        else:
            anew = frozenset(range(len(tp.shards))) if movable(workload, tp) == "any" else frozenset()
        used = {s.rank for i, s in enumerate(tp.shards) if i not in anew}
        shards = []
        for i, shard in enumerate(tp.shards):
            if i in anew:
                size = piece(tp, shard)[1]
                others = [r for r in range(topo.world_size) if r not in used]
                room = [r for r in others if hbm[r] + size <= topo.rank_caps[r]]
                shard = Shard(rank=min(room or others, key=lambda r: (load[r], r)), offsets=shard.offsets,
                              sizes=shard.sizes)
                used.add(shard.rank)
            if i in anew or tp.name not in kept:
                charge(tp, shard)
            shards.append(shard)
        kept[tp.name] = TablePlan(
            name=tp.name, sharding_type=tp.sharding_type, shards=tuple(shards), compute_kernel=tp.compute_kernel,
            cache_load_factor=tp.cache_load_factor, replicated_rows=tp.replicated_rows)
    return tuple(kept[t.name] for t in workload.tables)


def reverted(workload: Workload, cost_model: CostModel, fresh: Sequence[TablePlan], staying: Sequence[TablePlan],
             homeless: Mapping[str, frozenset[int]], objective: Objective, table_bytes, budget: int
             ) -> tuple[TablePlan, ...]:
    """``fresh`` with staying tables put back, cheapest in step per byte saved first, until it
    moves at most ``budget`` (rank loads added up from shard costs: a start, not a verdict)."""
    world = workload.topology.world_size
    load = np.zeros((world, 4))

    def phases(tp: TablePlan) -> np.ndarray:
        out = np.zeros((world, 4))
        for shard in tp.shards:
            out[shard.rank] += rank_phases(cost_model.shard_cost(workload, ShardSpec.placed(
                workload.table(tp.name), tp, shard)))
        return out

    plan = {tp.name: tp for tp in fresh}
    for tp in fresh:
        load += phases(tp)
    back = {tp.name: (tp, phases(tp), table_bytes(plan[tp.name]) - table_bytes(tp))
            for tp in staying if not homeless.get(tp.name) and tp.name in plan}
    score = (lambda m: m.max(axis=0).sum()) if objective.name == "critical-path" else (lambda m: m.sum(axis=1).max())
    moved = sum(table_bytes(tp) for tp in fresh)
    while moved > budget and back:
        now = score(load)
        trials = {name: score(load - phases(plan[name]) + old) - now for name, (_, old, saved) in back.items()
                  if saved > 0}
        if not trials:
            break
        name = min(trials, key=lambda n: (trials[n] / back[n][2], n))
        tp, old, saved = back.pop(name)
        load += old - phases(plan[name])
        plan[name] = tp
        moved -= saved
    return tuple(plan[t.name] for t in workload.tables)


def _cut(cand: Candidate) -> tuple:
    """What makes two cuts of a table the same cut (placement aside)."""
    return (cand.sharding_type, tuple(tuple(p) for p in cand.pieces), cand.compute_kernel, cand.cache_load_factor,
            cand.replicated_rows)


def _plan_cut(tp: TablePlan) -> tuple:
    return (tp.sharding_type, tuple((*s.offsets, *s.sizes) for s in tp.shards), tp.compute_kernel,
            tp.cache_load_factor, tp.replicated_rows)
