"""Exact search with OR-Tools CP-SAT: one candidate per table, ranks for its pieces,
minimising the bottleneck rank's cost under per-rank memory limits.

The greedy plan, completed to every variable, is the first solution; a brief run of CP-SAT's whole
portfolio proves small instances optimal, and large-neighbourhood search alone improves the rest
(so the plan is never worse than the greedy one); costs are scaled to integers,
and the search stops at a deterministic-time limit (a third of the wall-clock one, which it never
exceeds) so that the same input gives the same plan.
CP-SAT's best bound is a lower bound on the bottleneck over the same candidates and additive
shard costs; the returned bound is the larger of it and the cheap balance bound. Instances whose
model would exceed ``max_variables`` are left to the greedy search, which reports its own bound.

Identical ranks (one host, equal pinned load) make many plans mirror images of each other; the
k-th heaviest table's first piece may only use the first k+1 ranks of such a class, which keeps
one plan of each mirror family (the greedy hint is relabelled to match). After the solver, the
plan is re-scored by the whole cost model and its bottleneck repaired (``repair.py``).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from shardopt.contracts import (
    BOTTLENECK,
    CRITICAL_PATH,
    DEFAULT_CANDIDATES,
    DEFAULT_TIME_LIMIT_S,
    PHASES,
    Breakdown,
    Objective,
    SearchResult,
    rank_phases,
)
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.comm_curve import CommCurves
from shardopt.search.bound import collective_bytes, piece_bytes
from shardopt.search.candidates import Candidate, piece_costs, table_candidates
from shardopt.search.greedy import GreedySearch
from shardopt.search.ilp_comm import breakpoints, byte_unit, curve_cost, in_units
from shardopt.search.repair import movable, repaired

COST_RESOLUTION = 1_000_000  # the largest possible rank load maps to this many integer units
REPAIR_SHARE = 0.2  # of the time limit, for re-scoring and repairing the solver's plan
# The time limit sizes work counted in machine-independent units (CP-SAT's deterministic time, the
# repair's re-scores), so the same input gives the same plan on a busy or slow machine. The wall
# clock only stops a search that runs this many times past the limit: CP-SAT given the limit
# itself stopped at a timing-dependent point although it finished in half of it (one task of
# the bench's, six solves: two plans).
WALL_GUARD = 3.0
QUICK_SHARE = 0.1  # of the solver's work, for the whole portfolio before LNS alone


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
        max_variables: int = 400_000,
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

    def search(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        started = time.perf_counter()
        result = self._solve(workload, cost_model)
        return repaired(workload, cost_model, result, max(0.2, self.time_limit_s * REPAIR_SHARE),
                        deadline=started + WALL_GUARD * self.time_limit_s, objective=self.objective)

    def _solver(self, work_s: float, wall_s: float, lns_only: bool) -> cp_model.CpSolver:
        """A solver stopped by ``work_s`` deterministic seconds (the wall clock only guards)."""
        solver = cp_model.CpSolver()
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

    def _solve(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        candidates = {t.name: table_candidates(workload, t, self.candidate_set) for t in workload.tables}
        costs = {
            name: [piece_costs(workload, cost_model, c) for c in cands]
            for name, cands in candidates.items()
        }
        greedy = GreedySearch(repair_s=0).search(workload, cost_model, candidates, costs)
        greedy_ms = Breakdown.of(cost_model.breakdown(workload, greedy.tables)).bottleneck_ms
        if greedy_ms <= greedy.lower_bound_ms * (1 + self.good_enough_gap):
            # Within a hair of the bound already: no solver time can buy more than the gap.
            status = f"SKIPPED (greedy within {self.good_enough_gap:.0%} of the bound)"
            self.last_report = IlpReport(status, greedy_ms, greedy.lower_bound_ms, 0)
            return SearchResult(greedy.tables, greedy.lower_bound_ms, "greedy", status)
        world = workload.topology.world_size
        size = sum(
            len(c.pieces) * (world if c.placement != "fixed" else 1)
            for cands in candidates.values()
            for c in cands
        )
        if size > self.max_variables:
            status = f"SKIPPED (over {self.max_variables} placements; greedy)"
            self.last_report = IlpReport(status, float("nan"), greedy.lower_bound_ms, size)
            return SearchResult(greedy.tables, greedy.lower_bound_ms, "greedy", status, variables=size)
        cheap = greedy.lower_bound_ms  # the balance bound over these same candidates and costs
        # Replicas (data-parallel tables, hot rows) add an all-reduce every rank pays once.
        replica_ms = max(0.0, cost_model.rank_overhead_ms(workload, {"table_wise", "data_parallel"})
                         - cost_model.rank_overhead_ms(workload, {"table_wise"}))
        curves = cost_model.comm_curves(workload)
        model = _Model(workload, candidates, costs, replica_ms, curves, self.objective)
        model.hint(model.canonical(greedy.tables))
        model.complete_hint()
        # The deterministic limit (a third of the solver's share of the time limit, which on a
        # 2-core VM takes about half of it) stops the solver; the wall clock is a far guard.
        solve_s = max(0.1, self.time_limit_s * (1 - REPAIR_SHARE))
        work = solve_s / 3
        # First the whole portfolio, briefly: it proves small instances optimal (tiny.yaml in 0.07
        # deterministic seconds), which large-neighbourhood search alone never does.
        solver = self._solver(QUICK_SHARE * work, QUICK_SHARE * WALL_GUARD * solve_s, lns_only=False)
        status = solver.solve(model.cp)
        ran = [solver]
        bound = solver.best_objective_bound if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else 0.0
        if status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
            # Then LNS alone from the greedy plan, the better of the two kept: the full-problem
            # subsolvers spent the limit proving little (on 8 of the bench's tasks the step came
            # out 1.4% longer with them throughout).
            first, first_status = solver, status
            solver = self._solver(work, WALL_GUARD * solve_s, lns_only=True)
            status = solver.solve(model.cp)
            ran.append(solver)
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                bound = max(bound, solver.best_objective_bound)
            if first_status == cp_model.FEASIBLE and (
                status not in (cp_model.OPTIMAL, cp_model.FEASIBLE)
                or first.objective_value < solver.objective_value
            ):
                solver, status = first, first_status
        name = solver.status_name(status)
        if any(s.wall_time >= 0.99 * s.parameters.max_time_in_seconds for s in ran):
            name += f" (stopped by the wall clock at {WALL_GUARD:g}x the limit; may differ between runs)"
        if status == cp_model.INFEASIBLE:
            raise ShardoptError(
                "no plan fits in memory: CP-SAT proved it over all candidates", kind=ErrorKind.INFEASIBLE
            )
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.last_report = IlpReport(f"{name} (greedy kept)", float("nan"), cheap, size)
            return SearchResult(greedy.tables, cheap, "greedy", f"{name} (greedy kept)", variables=size)
        tables = model.solution(solver)
        solver_bound = bound / model.scale
        # The solver's bound holds for summed shard costs; a model that prices ranks as a whole
        # (measured comm curves, learned) gets the cheap bound, which is valid for it. Under the
        # critical path it bounds that, which is never below the bottleneck: not the plan's bound.
        additive = cost_model.additive(workload)
        bound = max(cheap, solver_bound) if additive and self.objective == BOTTLENECK else cheap
        self.last_report = IlpReport(name, solver.objective_value / model.scale, bound, size)
        # OPTIMAL speaks of the summed shard costs the solver sees; say so when the model differs.
        status = name if additive else f"{name} (for summed shard costs)"
        return SearchResult(tables, bound, "ilp", status, solver_bound_ms=solver_bound, variables=size)


COLLECTIVES = ("ids", "pooled", "allreduce")  # the order of bound.collective_bytes


def _most_bytes(sent_by_cut: dict[tuple[str, int], list[tuple[float, float, float]]]) -> dict[str, float]:
    """Per collective, more bytes than any rank can send: every table's largest cut, summed."""
    largest: dict[tuple[str, int], float] = {}
    for (name, _), pieces in sent_by_cut.items():
        for i in range(len(COLLECTIVES)):
            key = (name, i)
            largest[key] = max(largest.get(key, 0.0), sum(b[i] for b in pieces))
    return {c: max(sum(v for (_, i), v in largest.items() if i == k), 1.0) for k, c in enumerate(COLLECTIVES)}


class _Model:
    """The CP-SAT model and the variables needed to read a plan back."""

    def __init__(
        self, workload: Workload, candidates: dict[str, list[Candidate]], costs, replica_ms: float = 0.0,
        curves: CommCurves | None = None, objective: Objective = BOTTLENECK,
    ) -> None:
        topo = workload.topology
        self.workload = workload
        self.candidates = candidates
        world, local = topo.world_size, topo.ranks_per_host
        biggest = sum(max(sum(p.total_ms for p in pieces) for pieces in per) for per in costs.values())
        # The replicas' all-reduce counts too: it can dwarf tiny tables' costs.
        self.scale = COST_RESOLUTION / max(biggest + replica_ms, 1e-9)
        cp = cp_model.CpModel()
        self.cp = cp
        load = [[[] for _ in PHASES] for _ in range(world)]  # (int cost, literal) per rank and phase
        memory = [[] for _ in range(world)]
        ddr = [[] for _ in range(topo.num_hosts)]
        # Pinned (row-wise, data-parallel, table-row-wise) load per rank, for symmetry classes.
        pinned = [[] for _ in range(world)]
        self.choose: dict[tuple[str, int], cp_model.IntVar] = {}
        # Placement literals by (table, candidate, piece) -> {rank: literal}, and host literals by
        # (table, candidate) -> {host: literal}, so reading a piece's rank is a lookup, not a scan.
        self.place: dict[tuple[str, int, int], dict[int, cp_model.IntVar]] = {}
        self.host: dict[tuple[str, int], dict[int, cp_model.IntVar]] = {}

        # With measured comm curves, shards are charged their compute and their bytes; each rank's
        # all-to-all time is then read off the curves for its total bytes (ilp_comm.py).
        sent: list[dict[str, list]] = [{key: [] for key in COLLECTIVES} for _ in range(world)]
        sent_by_cut = {
            (name, c): [collective_bytes(b, world) for b in piece_bytes(workload, workload.table(name), cand)]
            for name, cands in candidates.items() for c, cand in enumerate(cands)
        } if curves else {}
        most = _most_bytes(sent_by_cut) if curves else {}
        unit = {key: byte_unit(size) for key, size in most.items()}

        def charge(rank, cost, literal, pin=None, sent_bytes=None):
            for i, ms in enumerate(rank_phases(cost)):
                if curves is not None and PHASES[i].endswith("comm_ms"):
                    continue  # read off the curves below
                if ms:
                    load[rank][i].append((int(round(ms * self.scale)), literal))
            if curves is not None:
                for key, size in zip(COLLECTIVES, sent_bytes):
                    if size > 0:
                        sent[rank][key].append((in_units(size, unit[key]), literal))
            memory[rank].append((cost.hbm_bytes, literal))
            if cost.ddr_bytes:
                ddr[rank // local].append((cost.ddr_bytes, literal))
            if pin is not None:
                pinned[rank].append((pin, int(round(cost.total_ms * self.scale)), cost.hbm_bytes,
                                     cost.ddr_bytes))

        for name, cands in candidates.items():
            chosen = []
            for c, cand in enumerate(cands):
                x = cp.new_bool_var(f"x[{name},{c}]")
                self.choose[name, c] = x
                chosen.append(x)
                pcosts = costs[name][c]
                pbytes = sent_by_cut[name, c] if curves else [None] * len(pcosts)
                if cand.placement == "fixed":
                    for rank, (cost, b) in enumerate(zip(pcosts, pbytes)):
                        charge(rank, cost, x, pin=(name, c), sent_bytes=b)
                    continue
                hosts = range(topo.num_hosts) if cand.placement == "host" else [None]
                host_vars = {}
                if cand.placement == "host":
                    for h in hosts:
                        host_vars[h] = cp.new_bool_var(f"h[{name},{c},{h}]")
                    self.host[name, c] = host_vars
                    # Host-bound cuts live on exactly one host when chosen.
                    cp.add(sum(host_vars.values()) == x)
                for p, (cost, b) in enumerate(zip(pcosts, pbytes)):
                    if cand.placement == "host" and cand.sharding_type == "table_row_wise":
                        for h, hv in host_vars.items():
                            # piece p on the host's p-th rank
                            charge(h * local + p, cost, hv, pin=(name, c, h), sent_bytes=b)
                        continue
                    for h in hosts:
                        ranks = range(world) if h is None else range(h * local, (h + 1) * local)
                        ys = []
                        for rank in ranks:
                            y = cp.new_bool_var(f"y[{name},{c},{p},{rank}]")
                            self.place.setdefault((name, c, p), {})[rank] = y
                            ys.append(y)
                            charge(rank, cost, y, sent_bytes=b)
                        # Each piece of a chosen cut sits on exactly one rank (of its host).
                        cp.add(sum(ys) == (x if h is None else host_vars[h]))
                if cand.placement != "fixed" and len(cand.pieces) > 1:
                    # Pieces of one cut on distinct ranks: two on one rank are one bigger piece.
                    for rank in range(world):
                        lits = [self.place[name, c, p][rank] for p in range(len(cand.pieces))
                                if rank in self.place.get((name, c, p), {})]
                        if len(lits) > 1:
                            cp.add_at_most_one(lits)
            # Exactly one cut per table.
            cp.add_exactly_one(chosen)
        replicating = [self.choose[name, c] for name, cands in candidates.items()
                       for c, cand in enumerate(cands)
                       if cand.sharding_type == "data_parallel" or cand.replicated_rows]
        if replicating and replica_ms > 0 and curves is None:
            # One gradient all-reduce (its latency) on every rank once any table is replicated.
            any_replica = cp.new_bool_var("any_replica")
            for x in replicating:
                cp.add_implication(x, any_replica)
            cost = int(round(replica_ms * self.scale))
            for rank in range(world):
                load[rank][PHASES.index("bwd_comm_ms")].append((cost, any_replica))
        self._break_symmetry(workload, costs, pinned)
        # Memory: what a rank holds stays within its cap.
        for rank in range(world):
            if memory[rank]:
                cp.add(sum(b * lit for b, lit in memory[rank]) <= topo.hbm_cap)
        if topo.ddr_cap is not None:
            for host_terms in ddr:
                if host_terms:
                    cp.add(sum(b * lit for b, lit in host_terms) <= topo.ddr_cap)
        top = 2 * COST_RESOLUTION
        if curves is not None:
            # A rank's comm, as replay reads it: ids out and pooled embeddings back (forward), their
            # gradients and a ring all-reduce of replicas' gradients (backward).
            fwd, bwd = PHASES.index("fwd_comm_ms"), PHASES.index("bwd_comm_ms")
            for key, pattern, where in (("ids", "even", ((fwd, 1),)), ("pooled", "pooled", ((fwd, 1), (bwd, 1))),
                                        ("allreduce", "even", ((bwd, 2),))):
                points = breakpoints(curves, world, pattern, most[key])
                seconds = lambda size, p=pattern: curves.seconds(world, p, size)  # noqa: E731
                top += sum(w for _, w in where) * (math.ceil(seconds(points[-1]) * 1e3 * self.scale) + 1)
                for rank in range(world):
                    cost = curve_cost(cp, seconds, points, sent[rank][key], unit[key], self.scale,
                                      f"{key},{rank}")
                    if cost is not None:
                        for phase, weight in where:
                            load[rank][phase].append((weight, cost))
        if objective == BOTTLENECK:
            # The bottleneck bounds every rank's load; minimising it balances the ranks.
            peak = cp.new_int_var(0, top, "bottleneck")
            for rank in range(world):
                terms = [t for phase in load[rank] for t in phase]
                if terms:
                    cp.add(sum(w * lit for w, lit in terms) <= peak)
            cp.minimize(peak)
        else:
            # Each phase's slowest rank bounds every rank's time in it; their sum is the step.
            peaks = []
            for i, phase in enumerate(PHASES):
                peak = cp.new_int_var(0, top, f"slowest[{phase}]")
                peaks.append(peak)
                for rank in range(world):
                    if load[rank][i]:
                        cp.add(sum(w * lit for w, lit in load[rank][i]) <= peak)
            cp.minimize(sum(peaks))

    def _break_symmetry(self, workload: Workload, costs, pinned) -> None:
        """Among interchangeable ranks, the k-th table's first piece uses only the first k+1."""
        topo = workload.topology
        local = topo.ranks_per_host
        classes: dict[tuple, list[int]] = {}
        for rank in range(topo.world_size):
            signature = (rank // local, tuple(sorted(pinned[rank], key=repr)))
            classes.setdefault(signature, []).append(rank)
        self.classes = [ranks for ranks in classes.values() if len(ranks) > 1]
        self.order = self._table_order(costs)
        for ranks in self.classes:
            for j, name in enumerate(self.order[: len(ranks) - 1]):
                for c, cand in enumerate(self.candidates[name]):
                    slots = self.place.get((name, c, 0))
                    if not slots:
                        continue  # pinned or host-ordered pieces: no choice to restrict
                    for rank in ranks[j + 1:]:
                        if rank in slots:
                            self.cp.add(slots[rank] == 0)

    def _table_order(self, costs) -> list[str]:
        """Tables heaviest first (their cheapest cut), the order symmetry breaking relabels by."""
        weight = {
            name: min(sum(p.total_ms for p in pieces) for pieces in per) for name, per in costs.items()
        }
        return sorted(weight, key=lambda n: (-weight[n], n))

    def canonical(self, tables: tuple[TablePlan, ...]) -> tuple[TablePlan, ...]:
        """The same plan with interchangeable ranks relabelled to meet the symmetry constraints."""
        by_name = {tp.name: tp for tp in tables}
        mapping: dict[int, int] = {}
        for ranks in self.classes:
            members = set(ranks)
            labels: dict[int, int] = {}
            for name in self.order:
                tp = by_name.get(name)
                if tp is None or movable(self.workload, tp) is None:
                    continue
                rank = tp.shards[0].rank
                if rank in members and rank not in labels:
                    labels[rank] = ranks[len(labels)]
            rest = iter(r for r in ranks if r not in labels.values())
            for rank in ranks:
                mapping[rank] = labels[rank] if rank in labels else next(rest)
        if not mapping:
            return tables
        out = []
        for tp in tables:
            if movable(self.workload, tp) is None:
                out.append(tp)
                continue
            shards = tuple(replace(s, rank=mapping.get(s.rank, s.rank)) for s in tp.shards)
            out.append(replace(tp, shards=shards))
        return tuple(out)

    def hint(self, tables: tuple[TablePlan, ...]) -> None:
        """Start from a known plan: its candidate per table and its ranks."""
        local = self.workload.topology.ranks_per_host
        for tp in tables:
            cands = self.candidates[tp.name]
            match = next(
                (c for c, cand in enumerate(cands)
                 if cand.sharding_type == tp.sharding_type
                 and (cand.compute_kernel, cand.cache_load_factor, cand.replicated_rows)
                 == (tp.compute_kernel, tp.cache_load_factor, tp.replicated_rows)
                 and [(p.row_offset, p.col_offset, p.rows, p.cols) for p in cand.pieces]
                 == [(*s.offsets, *s.sizes) for s in tp.shards]),
                None,
            )
            for c in range(len(cands)):
                self.cp.add_hint(self.choose[tp.name, c], c == match)
            if match is None:
                continue
            cand = cands[match]
            if cand.placement == "host":
                host = tp.shards[0].rank // local
                for h, var in self.host[tp.name, match].items():
                    self.cp.add_hint(var, h == host)
            for p, shard in enumerate(tp.shards):
                for rank, var in self.place.get((tp.name, match, p), {}).items():
                    self.cp.add_hint(var, rank == shard.rank)

    def complete_hint(self, deterministic_s: float = 1.0) -> bool:
        """Extend the hinted placements to every variable (bytes, curve segments, peaks).

        CP-SAT given only the placements must complete them itself, and on 100 tables x 8 ranks
        it did not within the limit: no solution, and the greedy plan kept. With the placements
        fixed the rest follows by propagation, so a small solve of a copy finds it. False (the
        partial hint kept) where the hinted placements are not a plan of this model.
        """
        fixed = self.cp.clone()
        hint = fixed.proto.solution_hint
        for index, value in zip(hint.vars, hint.values):
            fixed.add(fixed.get_int_var_from_proto_index(index) == value)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = deterministic_s
        if solver.solve(fixed) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False
        self.hint_values(solver.response_proto.solution)
        return True

    def hint_values(self, values) -> None:
        """Hint every variable: ``values`` in the model's variable order (a solver's solution)."""
        self.cp.clear_hints()
        for index, value in enumerate(values):
            self.cp.add_hint(self.cp.get_int_var_from_proto_index(index), value)

    def solution(self, solver: cp_model.CpSolver) -> tuple[TablePlan, ...]:
        local = self.workload.topology.ranks_per_host
        out = []
        for table in self.workload.tables:
            cands = self.candidates[table.name]
            c = next(i for i in range(len(cands)) if solver.boolean_value(self.choose[table.name, i]))
            cand = cands[c]
            ranks = []
            for p in range(len(cand.pieces)):
                if cand.placement == "fixed":
                    ranks.append(p)
                elif cand.placement == "host" and cand.sharding_type == "table_row_wise":
                    host = next(h for h, v in self.host[table.name, c].items() if solver.boolean_value(v))
                    ranks.append(host * local + p)
                else:
                    ranks.append(next(rank for rank, v in self.place[table.name, c, p].items()
                                      if solver.boolean_value(v)))
            shards = tuple(
                Shard(rank=r, offsets=(pc.row_offset, pc.col_offset), sizes=(pc.rows, pc.cols))
                for r, pc in zip(ranks, cand.pieces)
            )
            out.append(TablePlan(name=table.name, sharding_type=cand.sharding_type, shards=shards,
                                 compute_kernel=cand.compute_kernel,
                                 cache_load_factor=cand.cache_load_factor,
                                 replicated_rows=cand.replicated_rows))
        return tuple(out)

