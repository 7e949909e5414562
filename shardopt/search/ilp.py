"""Exact search with OR-Tools CP-SAT: one candidate per table, ranks for its pieces,
minimising the bottleneck rank's cost under per-rank memory limits.

The greedy plan, completed to every variable, is the first solution; a brief run of CP-SAT's whole
portfolio proves small instances optimal, and large-neighbourhood search alone improves the rest
(so the plan is never worse than the greedy one); costs are scaled to integers,
and the search stops at a deterministic-time limit (a fraction of the wall-clock one, which it
never exceeds) so that the same input gives the same plan.
CP-SAT's best bound is a lower bound on the bottleneck over the same candidates and additive
shard costs; the returned bound is the larger of it and the cheap balance bound. Instances whose
model would exceed ``max_variables`` are left to the greedy search, which reports its own bound.

Identical ranks (one host, equal pinned load) make many plans mirror images of each other; the
k-th heaviest table's first piece may only use the first k+1 ranks of such a class, which keeps
one plan of each mirror family (the greedy hint is relabelled to match). After the solver, the
plan is re-scored by the whole cost model and its bottleneck repaired (``repair.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ortools.sat.python import cp_model

from shardopt.contracts import (
    BOTTLENECK,
    CRITICAL_PATH,
    DEFAULT_CANDIDATES,
    DEFAULT_TIME_LIMIT_S,
    STAGE_LOGGER,
    Breakdown,
    Objective,
    SearchResult,
)
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.uncertainty import plan_score
from shardopt.search.bound import balance_lower_bound
from shardopt.search.candidates import workload_candidates
from shardopt.search.greedy import GreedySearch
from shardopt.search.ilp_model import IlpModel
from shardopt.search.makeup import even_makeup
from shardopt.search.repair import repair_bottleneck, with_repair

REPAIR_SHARE = 0.2  # of the time limit, for re-scoring and repairing the solver's plan
# The time limit sizes work counted in machine-independent units (CP-SAT's deterministic time, the
# repair's re-scores), so the same input gives the same plan on a busy or slow machine. The wall
# clock only stops a search that runs this many times past the limit: CP-SAT given the limit
# itself stopped at a timing-dependent point although it finished in half of it (one task of
# the bench's, six solves: two plans).
WALL_GUARD = 3.0
QUICK_SHARE = 0.1  # of the solver's work, for the whole portfolio before LNS alone
# Deterministic seconds per second of the solver's share. A third, as first sized, took 0.58 s of
# large-neighbourhood search at 100 tables x 8 ranks on a 2-core VM (2.2 wall s per deterministic
# s) and the plan 1.3 s against its 1 s limit; a twelfth leaves the candidates, bounds, greedy
# and repair their time. Planned at a quarter of the work, 13 tasks scored 1.0013 of their
# plans at full work (the model's geomean, worst 1.0096; benchmarks/results/plan_time.md).
WORK_SHARE = 1 / 12

log = logging.getLogger(STAGE_LOGGER)
# Past this many placement literals CP-SAT is not built: its model alone outgrows a machine's
# memory (a replan of 5000 tables over 4088 ranks reached 24 GB and was killed) and its time.
MAX_PLACEMENTS = 400_000


def placements(workload: Workload, candidates) -> int:
    """How many placement literals CP-SAT would hold: each piece on each rank, a fixed one once."""
    world = workload.topology.world_size
    return sum(len(c.pieces) * (world if c.placement != "fixed" else 1) for cands in candidates.values() for c in cands)


@dataclass(frozen=True)
class IlpReport:
    status: str
    objective_ms: float
    bound_ms: float
    variables: int


class IlpSearch:
    """CP-SAT over all candidates, warm-started by the greedy plan."""

    name = "ilp"

    def __init__(
        self,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        max_variables: int = MAX_PLACEMENTS,
        workers: int | None = None,
        good_enough_gap: float = 0.01,
        candidates: str = DEFAULT_CANDIDATES,
        objective: Objective = CRITICAL_PATH,
    ):
        self.candidate_set = candidates
        self.objective = objective
        self.time_limit_s = time_limit_s
        self.good_enough_gap = good_enough_gap
        self.max_variables = max_variables
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.last_report: IlpReport | None = None
        # (tables, their repair and make-up, or None where that failed) finished while CP-SAT ran
        self._finished = None
        self._warm = None  # the warm start's tables
        self._stopping, self._live = False, None  # an interrupted search, and the solver running

    def search(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        self._finished = self._warm = None
        result = self._solve(workload, cost_model)
        # The plan reports its gap to what any cut allows, not to what was offered.
        result = dataclasses.replace(result, lower_bound_ms=min(result.lower_bound_ms,
                                                                self._possible(workload, cost_model)))
        warm = self._warm
        # The solver's plan is often its hint unchanged (a short LNS found nothing): the warm
        # start's finish, made beside the solver, is then this plan's too (finishing is a function
        # of the tables; 2 of 16 workloads at 100 x 8 finished one plan twice).
        if warm is not None and (warm is result.tables or tuple(warm) == tuple(result.tables)):
            held = self._finished
            finish = held[1] if held is not None and held[1] is not None else \
                self._finish(workload, cost_model, result.tables)
        else:
            log.info("the solver's plan: repair, then ranks alike in make-up")
            result, finish = self._better_finished(workload, cost_model, result)
        fixed, (tables, moves) = finish
        result = with_repair(result, fixed)
        if not moves:
            return result
        return dataclasses.replace(result, tables=tables, algorithm=result.algorithm + "+makeup")

    def _better_finished(self, workload: Workload, cost_model: CostModel, result: SearchResult):
        """The solver's plan finished, or the warm start's finish where the whole model rates that
        at or above it: a finish moves a plan's score as much as the solver did (on 9 of the
        bench's 56 tasks and 4 of 16 workloads at 100 x 8 the solver's plan, finished, came out
        behind or level with the finished warm start, by up to 1.8%). The warm start's finish is
        the one made beside the solver; one that failed there is no plan (the solver's is)."""
        finish = self._finish(workload, cost_model, result.tables)
        if self._warm is None:
            return result, finish
        held = self._finished
        if held is None:  # nothing finished beside the solver: in turn, as it would have been
            held = self._finished = (self._warm, self._finish_or_none(workload, cost_model, self._warm))
        if held[1] is None:
            return result, finish
        # The make-up's tables are the finished plan, moved or not.
        if self._score(workload, cost_model, finish[1][0]) < self._score(workload, cost_model, held[1][1][0]):
            return result, finish
        status = result.status + " (finished warm start kept: the whole model rates it at or above the solver's, finished)"
        return dataclasses.replace(result, tables=held[0], status=status), held[1]

    def _finish_or_none(self, workload: Workload, cost_model: CostModel, tables):
        """:meth:`_finish`, or None where it failed: the warm start's, taken on speculation."""
        try:
            return self._finish(workload, cost_model, tables)
        except Exception:  # noqa: BLE001 - raised again where the warm start is the plan
            return None

    def _possible(self, workload: Workload, cost_model: CostModel) -> float:
        """The bound over every cut the tables allow (computed once: the shared bound is held)."""
        candidates, costs = workload_candidates(workload, cost_model, self.candidate_set)
        return balance_lower_bound(workload, cost_model, candidates, costs, possible=True)

    def _finish(self, workload: Workload, cost_model: CostModel, tables):
        """The plan's repair (:class:`~shardopt.search.repair.RepairResult`) and then its make-up
        (tables, moves), as the search's last steps take them."""
        # The repair's wall-clock guard counts from its own start (repair.WALL_GUARD): at scale the
        # search alone can outlast this one's guard, and a repair cut at once differed between runs.
        fixed = repair_bottleneck(workload, cost_model, tables, objective=self.objective,
                                  time_budget_s=max(0.2, self.time_limit_s * REPAIR_SHARE))
        return fixed, even_makeup(workload, cost_model, fixed.kept(tables), self.objective)

    def _run_beside(self, model: IlpModel, workload: Workload, cost_model: CostModel, greedy):
        """:meth:`_run` in a thread (CP-SAT releases the GIL) while this one bounds the plan and
        finishes the warm start, the plan whenever the whole model rates it above the solver's
        (28 of 60 tasks; 100 x 8's plan 0.3 s sooner). Each step is what it would be in turn."""
        self._stopping, self._live = False, None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cp-sat") as pool:
            solving = pool.submit(self._run, model)
            try:
                self._possible(workload, cost_model)
                if greedy is not None:
                    self._finished = (greedy.tables, self._finish_or_none(workload, cost_model, greedy.tables))
                return solving.result()
            except BaseException:  # an interrupt (or a failure) here: the solver stops too, at once
                self._stopping = True
                if self._live is not None:
                    self._live.stop_search()
                raise

    def _solver(self, work_s: float, wall_s: float, lns_only: bool) -> cp_model.CpSolver:
        """A solver stopped by ``work_s`` deterministic seconds (the wall clock only guards)."""
        if self._stopping:
            raise KeyboardInterrupt  # the search beside was interrupted: start no further solve
        solver = self._live = cp_model.CpSolver()
        # An interrupt is the command's (exit 130, nothing written): CP-SAT's own handler caught it,
        # stopped early and the plan was written as if finished.
        solver.parameters.catch_sigint_signal = False
        solver.parameters.max_time_in_seconds = wall_s
        solver.parameters.max_deterministic_time = work_s
        solver.parameters.num_workers = self.workers
        solver.parameters.interleave_search = True  # deterministic with several workers
        # One subsolver task per batch: with larger batches the deterministic limit was checked so
        # rarely that the solver ran on to 3.4x it, until the wall clock (and chance) stopped it.
        solver.parameters.interleave_batch_size = 1
        if lns_only:
            # Improve the hint by large-neighbourhood search alone, after a light presolve: at
            # 100 tables x 8 ranks the full presolve used the whole limit, and the greedy was kept.
            solver.parameters.use_lns_only = True
            solver.parameters.find_big_linear_overlap = False
            solver.parameters.max_presolve_iterations = 1
        return solver

    def _run(self, model: IlpModel):
        """CP-SAT's portfolio briefly, then large-neighbourhood search: (solver, status, bound, all run)."""
        # The deterministic limit (WORK_SHARE of the solver's share of the time limit) stops the
        # solver; the wall clock is a far guard.
        solve_s = max(0.1, self.time_limit_s * (1 - REPAIR_SHARE))
        work = solve_s * WORK_SHARE
        if self.objective.robust and model.cp.proto.solution_hint.vars:
            # A robust objective's optimum is no step's bound (none is reported), and on the 60 tasks
            # where CP-SAT ran (the bench's full and regime suites, the configs, 100 x 8) the brief
            # portfolio never gave the plan kept (UNKNOWN on 57): 0.02-0.08 s each for nothing.
            solver = self._solver(work, WALL_GUARD * solve_s, lns_only=True)
            status = solver.solve(model.cp)
            bound = solver.best_objective_bound if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else 0.0
            return solver, status, bound, [solver]
        # First the whole portfolio, briefly: it proves small instances optimal (tiny.yaml in 0.07
        # deterministic seconds), which large-neighbourhood search alone never does.
        # Its wall guard is the whole solve's: its fixed costs (loading, presolve) do not shrink with
        # its share, and under CI's load a guard at a tenth of it fired (task05: 1.2 s) and the
        # plan's status (once the plan) depended on the machine.
        solver = self._solver(QUICK_SHARE * work, WALL_GUARD * solve_s, lns_only=False)
        status = solver.solve(model.cp)
        ran = [solver]
        bound = solver.best_objective_bound if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else 0.0
        if status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
            # Then LNS alone from the greedy plan, the better of the two kept: the full-problem
            # subsolvers spent the limit proving little (on 8 of the bench's tasks the step came
            # out 1.4% longer with them throughout).
            first, first_status = solver, status
            # LNS improves a solution; with none yet (no hint: the greedy packed nothing) it
            # would start from nothing, so the whole portfolio goes on looking for one.
            cold = status == cp_model.UNKNOWN and not model.cp.proto.solution_hint.vars
            solver = self._solver(work, WALL_GUARD * solve_s, lns_only=not cold)
            if cold:
                # One worker, deterministic as it is: CP-SAT 9.x's interleaved portfolio aborted
                # here ("heuristics.fixed_search != nullptr") once its fixed-search worker ran.
                solver.parameters.num_workers = 1
                solver.parameters.interleave_search = False
            status = solver.solve(model.cp)
            ran.append(solver)
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                bound = max(bound, solver.best_objective_bound)
            if first_status == cp_model.FEASIBLE and (
                status not in (cp_model.OPTIMAL, cp_model.FEASIBLE)
                or first.objective_value < solver.objective_value
            ):
                solver, status = first, first_status
        return solver, status, bound, ran

    def _solve(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        world = workload.topology.world_size
        log.info("pricing the cuts of %d tables on %d ranks", len(workload.tables), world)
        candidates, costs = workload_candidates(workload, cost_model, self.candidate_set)
        size = placements(workload, candidates)
        log.info("the greedy warm start")
        greedy, failure = _greedy(workload, cost_model, candidates, costs,
                                  self.objective if self.objective.robust else CRITICAL_PATH)
        self._warm = greedy.tables if greedy is not None else None
        greedy_ms = Breakdown.of(cost_model.breakdown(workload, greedy.tables)).bottleneck_ms if greedy else None
        if greedy is not None and greedy_ms <= greedy.lower_bound_ms * (1 + self.good_enough_gap):
            # Within a hair of the bound already: no solver time can buy more than the gap.
            status = f"SKIPPED (greedy within {self.good_enough_gap:.0%} of the bound)"
            self.last_report = IlpReport(status, greedy_ms, greedy.lower_bound_ms, 0)
            return SearchResult(greedy.tables, greedy.lower_bound_ms, "greedy", status)
        if size > self.max_variables:
            if greedy is None:
                raise failure
            status = f"SKIPPED (over {self.max_variables} placements; greedy)"
            self.last_report = IlpReport(status, float("nan"), greedy.lower_bound_ms, size)
            return SearchResult(greedy.tables, greedy.lower_bound_ms, "greedy", status, variables=size)
        # the balance bound over these same candidates and costs
        cheap = greedy.lower_bound_ms if greedy else balance_lower_bound(workload, cost_model, candidates, costs)
        # Replicas (data-parallel tables, hot rows) add an all-reduce every rank pays once.
        replica_ms = max(0.0, cost_model.rank_overhead_ms(workload, {"table_wise", "data_parallel"})
                         - cost_model.rank_overhead_ms(workload, {"table_wise"}))
        curves = cost_model.comm_curves(workload)
        model = IlpModel(workload, candidates, costs, replica_ms, curves, self.objective)
        if greedy is not None:  # else CP-SAT starts cold: tight memory the greedy could not pack
            model.hint(model.canonical(greedy.tables))
            model.complete_hint()
        log.info("CP-SAT on %d placements, the warm start finished beside it", size)
        solver, status, bound, ran = self._run_beside(model, workload, cost_model, greedy)
        name = solver.status_name(status)
        if any(s.wall_time >= 0.99 * s.parameters.max_time_in_seconds for s in ran):
            name += f" (stopped by the wall clock at {WALL_GUARD:g}x the limit; may differ between runs)"
        if greedy is None and status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            raise failure  # the greedy's words say which table fits nowhere
        if status == cp_model.INFEASIBLE:
            raise ShardoptError(
                "no plan fits in memory: CP-SAT proved it over all candidates", kind=ErrorKind.INFEASIBLE
            )
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.last_report = IlpReport(f"{name} (greedy kept)", float("nan"), cheap, size)
            return SearchResult(greedy.tables, cheap, "greedy", f"{name} (greedy kept)", variables=size)
        tables = model.solution(solver)
        if greedy is not None and self._score(workload, cost_model, greedy.tables) < \
                self._score(workload, cost_model, tables):
            # The solver sees summed shard costs; the whole model (a rank's shared caches) can rate
            # the balanced greedy plan better: keep it, as the search promises never to be worse.
            tables, name = greedy.tables, f"{name} (greedy kept: the whole model rates it better)"
        # In units of the model's step; a robust objective weighs its own step 1000-fold, and
        # the solver's bound on that is no bound on a step: none is reported.
        solver_bound = None if self.objective.robust else bound / model.scale
        # The solver's bound holds for summed shard costs; a model that prices ranks as a whole
        # (measured comm curves, learned) gets the cheap bound, which is valid for it. Under the
        # critical path it bounds that, which is never below the bottleneck: not the plan's bound.
        additive = cost_model.additive(workload)
        bound = max(cheap, solver_bound) if additive and solver_bound is not None \
            and self.objective.name == BOTTLENECK.name else cheap
        self.last_report = IlpReport(name, solver.objective_value / model.scale / model.step_weight, bound, size)
        # OPTIMAL speaks of the summed shard costs the solver sees; say so when the model differs.
        status = name if additive else f"{name} (for summed shard costs)"
        return SearchResult(tables, bound, "ilp", status, solver_bound_ms=solver_bound, variables=size)


    def _score(self, workload: Workload, cost_model: CostModel, tables) -> float:
        return plan_score(self.objective, workload, cost_model, tables)


def _greedy(workload, cost_model, candidates, costs, objective: Objective = CRITICAL_PATH,
            ) -> tuple[SearchResult | None, ShardoptError | None]:
    """The greedy plan (the warm start; a robust objective's own, else the critical path's), or
    None with the greedy's reason when it packs nothing."""
    try:
        return GreedySearch(repair_s=0, objective=objective).search(workload, cost_model, candidates, costs, possible=False), None
    except ShardoptError as exc:
        if exc.kind != ErrorKind.INFEASIBLE:
            raise
        return None, exc
