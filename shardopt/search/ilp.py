"""Exact search with OR-Tools CP-SAT: one candidate per table, ranks for its pieces,
minimising the bottleneck rank's cost under per-rank memory limits.

The greedy plan is the hint (so the first solution is never worse), costs are scaled to integers,
and the search stops at a deterministic-time limit (a third of the wall-clock one, which it never
exceeds) so that the same input gives the same plan.
CP-SAT's best bound is a lower bound on the bottleneck over the same candidates and additive
shard costs; the returned bound is the larger of it and the cheap balance bound. Instances whose
model would exceed ``max_variables`` are left to the greedy search, which reports its own bound.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ortools.sat.python import cp_model

from shardopt.costmodel.base import CostModel
from shardopt.errors import ErrorKind, ShardoptError
from shardopt.plan import Shard, TablePlan
from shardopt.search.candidates import Candidate, table_candidates
from shardopt.search.greedy import GreedySearch, SearchResult, piece_costs
from shardopt.workload import Workload

COST_RESOLUTION = 1_000_000  # the largest possible rank load maps to this many integer units


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
        time_limit_s: float = 5.0,
        max_variables: int = 400_000,
        workers: int | None = None,
        good_enough_gap: float = 0.01,
    ):
        self.time_limit_s = time_limit_s
        self.good_enough_gap = good_enough_gap
        self.max_variables = max_variables
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.last_report: IlpReport | None = None

    def search(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        greedy = GreedySearch().search(workload, cost_model)
        greedy_ms = max(r.total_ms for r in cost_model.breakdown(workload, greedy.tables))
        if greedy_ms <= greedy.lower_bound_ms * (1 + self.good_enough_gap):
            # Within a hair of the bound already: no solver time can buy more than the gap.
            self.last_report = IlpReport(
                f"SKIPPED (greedy within {self.good_enough_gap:.0%} of the bound)", greedy_ms,
                greedy.lower_bound_ms, 0,
            )
            return greedy
        candidates = {t.name: table_candidates(workload, t) for t in workload.tables}
        world = workload.topology.world_size
        size = sum(
            len(c.pieces) * (world if c.placement != "fixed" else 1)
            for cands in candidates.values()
            for c in cands
        )
        if size > self.max_variables:
            self.last_report = IlpReport("SKIPPED (too large; greedy)", float("nan"), greedy.lower_bound_ms, size)
            return greedy
        costs = {
            name: [piece_costs(workload, cost_model, c) for c in cands]
            for name, cands in candidates.items()
        }
        cheap = greedy.lower_bound_ms  # the balance bound over these same candidates and costs
        model = _Model(workload, candidates, costs)
        model.hint(greedy.tables)
        solver = cp_model.CpSolver()
        # The wall-clock limit is the user's; the deterministic limit, about a third of it, is
        # usually reached first, and then the same input gives the same plan.
        solver.parameters.max_time_in_seconds = self.time_limit_s
        solver.parameters.max_deterministic_time = self.time_limit_s / 3
        solver.parameters.num_workers = self.workers
        solver.parameters.interleave_search = True  # deterministic with several workers
        status = solver.solve(model.cp)
        name = solver.status_name(status)
        if status == cp_model.INFEASIBLE:
            raise ShardoptError(
                "no plan fits in memory: CP-SAT proved it over all candidates", kind=ErrorKind.INFEASIBLE
            )
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.last_report = IlpReport(f"{name} (greedy kept)", float("nan"), cheap, size)
            return greedy
        tables = model.solution(solver)
        bound = max(cheap, solver.best_objective_bound / model.scale)
        self.last_report = IlpReport(name, solver.objective_value / model.scale, bound, size)
        return SearchResult(tables, bound)


class _Model:
    """The CP-SAT model and the variables needed to read a plan back."""

    def __init__(self, workload: Workload, candidates: dict[str, list[Candidate]], costs) -> None:
        topo = workload.topology
        self.workload = workload
        self.candidates = candidates
        world, local = topo.world_size, topo.ranks_per_host
        biggest = sum(max(sum(p.total_ms for p in pieces) for pieces in per) for per in costs.values())
        self.scale = COST_RESOLUTION / max(biggest, 1e-9)
        cp = cp_model.CpModel()
        self.cp = cp
        load = [[] for _ in range(world)]  # (int cost, literal) terms per rank
        memory = [[] for _ in range(world)]
        self.choose: dict[tuple[str, int], cp_model.IntVar] = {}
        # Placement literals by (table, candidate, piece) -> {rank: literal}, and host literals by
        # (table, candidate) -> {host: literal}, so reading a piece's rank is a lookup, not a scan.
        self.place: dict[tuple[str, int, int], dict[int, cp_model.IntVar]] = {}
        self.host: dict[tuple[str, int], dict[int, cp_model.IntVar]] = {}

        def charge(rank, cost, literal):
            load[rank].append((int(round(cost.total_ms * self.scale)), literal))
            memory[rank].append((cost.hbm_bytes, literal))

        for name, cands in candidates.items():
            chosen = []
            for c, cand in enumerate(cands):
                x = cp.new_bool_var(f"x[{name},{c}]")
                self.choose[name, c] = x
                chosen.append(x)
                pcosts = costs[name][c]
                if cand.placement == "fixed":
                    for rank, cost in enumerate(pcosts):
                        charge(rank, cost, x)
                    continue
                hosts = range(topo.num_hosts) if cand.placement == "host" else [None]
                host_vars = {}
                if cand.placement == "host":
                    for h in hosts:
                        host_vars[h] = cp.new_bool_var(f"h[{name},{c},{h}]")
                    self.host[name, c] = host_vars
                    # Host-bound cuts live on exactly one host when chosen.
                    cp.add(sum(host_vars.values()) == x)
                for p, cost in enumerate(pcosts):
                    if cand.placement == "host" and cand.sharding_type == "table_row_wise":
                        for h, hv in host_vars.items():
                            charge(h * local + p, cost, hv)  # piece p on the host's p-th rank
                        continue
                    for h in hosts:
                        ranks = range(world) if h is None else range(h * local, (h + 1) * local)
                        ys = []
                        for rank in ranks:
                            y = cp.new_bool_var(f"y[{name},{c},{p},{rank}]")
                            self.place.setdefault((name, c, p), {})[rank] = y
                            ys.append(y)
                            charge(rank, cost, y)
                        # Each piece of a chosen cut sits on exactly one rank (of its host).
                        cp.add(sum(ys) == (x if h is None else host_vars[h]))
            # Exactly one cut per table.
            cp.add_exactly_one(chosen)
        # Memory: what a rank holds stays within its cap.
        for rank in range(world):
            if memory[rank]:
                cp.add(sum(b * lit for b, lit in memory[rank]) <= topo.hbm_cap)
        # The bottleneck bounds every rank's load; minimising it balances the ranks.
        self.bottleneck = cp.new_int_var(0, 2 * COST_RESOLUTION, "bottleneck")
        for rank in range(world):
            if load[rank]:
                cp.add(sum(w * lit for w, lit in load[rank]) <= self.bottleneck)
        cp.minimize(self.bottleneck)

    def hint(self, tables: tuple[TablePlan, ...]) -> None:
        """Start from a known plan: its candidate per table and its ranks."""
        local = self.workload.topology.ranks_per_host
        for tp in tables:
            cands = self.candidates[tp.name]
            match = next(
                (c for c, cand in enumerate(cands)
                 if cand.sharding_type == tp.sharding_type
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
                                 compute_kernel=cand.compute_kernel))
        return tuple(out)
