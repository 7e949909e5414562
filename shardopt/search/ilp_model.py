"""The CP-SAT model behind :class:`~shardopt.search.ilp.IlpSearch`: one choice variable per
candidate cut, placement literals per piece and rank, memory caps, per-phase loads (with measured
all-to-all curves read off piecewise-linear segments, ``ilp_comm.py``), symmetry breaking over
interchangeable ranks, and the objective; hints in, a plan out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ortools.sat.python import cp_model

from shardopt.arithmetic.placement import PlacementRules
from shardopt.contracts import BOTTLENECK, COMPUTE, PHASES, ROBUST_TIE, Objective, rank_phases
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.comm_curve import CommCurves
from shardopt.search.bound import collective_bytes, piece_bytes
from shardopt.search.candidates import Candidate
from shardopt.search.ilp_comm import breakpoints, byte_unit, curve_cost, in_units
from shardopt.search.ilp_placement import add_groups
from shardopt.search.ilp_symmetry import break_symmetry, canonical

COST_RESOLUTION = 1_000_000  # the largest possible rank load maps to this many integer units
ROBUST_RESOLUTION = round(1 / ROBUST_TIE)  # a robust step's weights, in these units; the nominal one ties


COLLECTIVES = ("ids", "pooled", "allreduce")  # the order of bound.collective_bytes
MOVE_RESOLUTION = 2**50  # budgets up to this many bytes are counted exactly
TIE_RESOLUTION = 1_000  # moved bytes, in these units of the most a plan can move, break ties


@dataclass(frozen=True)
class MoveLimit:
    """A re-shard's limit (``search/replan.py``): the bytes piece ``p`` of a cut would move to
    ``rank``, and how many may move in all. Ranks then differ by what they hold: no symmetry."""

    piece_bytes: Callable[[str, Candidate, int, int], int]
    max_bytes: int


def _most_bytes(sent_by_cut: dict[tuple[str, int], list[tuple[float, float, float]]]) -> dict[str, float]:
    """Per collective, more bytes than any rank can send: every table's largest cut, summed."""
    largest: dict[tuple[str, int], float] = {}
    for (name, _), pieces in sent_by_cut.items():
        for i in range(len(COLLECTIVES)):
            key = (name, i)
            largest[key] = max(largest.get(key, 0.0), sum(b[i] for b in pieces))
    return {c: max(sum(v for (_, i), v in largest.items() if i == k), 1.0) for k, c in enumerate(COLLECTIVES)}


class IlpModel:
    """The CP-SAT model and the variables needed to read a plan back.

    Built in a fixed order (cuts table by table, replicas' latency, symmetry, memory, comm
    curves, objective): CP-SAT's deterministic search depends on the order of variables.
    """

    def __init__(
        self, workload: Workload, candidates: dict[str, list[Candidate]], costs, replica_ms: float = 0.0,
        curves: CommCurves | None = None, objective: Objective = BOTTLENECK, moves: MoveLimit | None = None,
    ) -> None:
        topo = workload.topology
        self.workload = workload
        self.candidates = candidates
        self.costs = costs
        self.curves = curves
        world = topo.world_size
        biggest = sum(max(sum(p.total_ms for p in pieces) for pieces in per) for per in costs.values())
        # The replicas' all-reduce counts too: it can dwarf tiny tables' costs.
        self.scale = COST_RESOLUTION / max(biggest + replica_ms, 1e-9)
        self.cp = cp_model.CpModel()
        self.load = [[[] for _ in PHASES] for _ in range(world)]  # (int cost, literal) per rank and phase
        self.memory = [[] for _ in range(world)]
        self.ddr = [[] for _ in range(topo.num_hosts)]
        # Pinned (row-wise, data-parallel, table-row-wise) load per rank, for symmetry classes.
        self.pinned = [[] for _ in range(world)]
        self.choose: dict[tuple[str, int], cp_model.IntVar] = {}
        # Placement literals by (table, candidate, piece) -> {rank: literal}, and host literals by
        # (table, candidate) -> {host: literal}, so reading a piece's rank is a lookup, not a scan.
        self.place: dict[tuple[str, int, int], dict[int, cp_model.IntVar]] = {}
        self.host: dict[tuple[str, int], dict[int, cp_model.IntVar]] = {}
        # With measured comm curves, shards are charged their compute and their bytes; each rank's
        # all-to-all time is then read off the curves for its total bytes (ilp_comm.py).
        self.sent: list[dict[str, list]] = [{key: [] for key in COLLECTIVES} for _ in range(world)]
        self.sent_by_cut = {
            (name, c): [collective_bytes(b, world) for b in piece_bytes(workload, workload.table(name), cand)]
            for name, cands in candidates.items() for c, cand in enumerate(cands)
        } if curves else {}
        self.most = _most_bytes(self.sent_by_cut) if curves else {}
        self.unit = {key: byte_unit(size) for key, size in self.most.items()}
        self.moves = moves
        self.moved: list[tuple[int, cp_model.IntVar]] = []  # (bytes, literal), with a MoveLimit
        self.rules = PlacementRules.of(workload)
        self.on: dict[str, dict[int, list]] = {}  # grouped tables: rank -> literals putting a piece there
        for name, cands in candidates.items():
            self._add_table(name, cands, costs[name])
        add_groups(self.cp, self.rules, self.on, world)
        self._add_replica_latency(replica_ms)
        if moves is None and not workload.placement:  # rules tie ranks to tables; the hint's relabelling would not
            break_symmetry(self, workload, costs, self.pinned)
        else:
            self.classes, self.order = [], []  # ranks differ by what they hold: none interchangeable
        self._add_memory_caps()
        top = self._add_comm_curves()
        self._add_objective(objective, top, self._add_move_limit())

    def _charge(self, name, rank, cost, literal, pin=None, sent_bytes=None) -> None:
        """Charge ``rank`` the shard's phases, bytes and memory when ``literal`` holds."""
        slow = 1.0 / self.workload.topology.rank_speeds[rank]  # a slower rank's lookups take longer
        for i, ms in enumerate(rank_phases(cost)):
            if self.curves is not None and PHASES[i].endswith("comm_ms"):
                continue  # read off the curves in _add_comm_curves
            ms = ms * slow if PHASES[i].endswith("compute_ms") else ms
            if ms:
                self.load[rank][i].append((int(round(ms * self.scale)), literal))
        if self.curves is not None:
            for key, size in zip(COLLECTIVES, sent_bytes):
                if size > 0:
                    self.sent[rank][key].append((in_units(size, self.unit[key]), literal))
        self.memory[rank].append((cost.hbm_bytes, literal))
        if name in self.rules.grouped:
            self.on.setdefault(name, {}).setdefault(rank, []).append(literal)
        if cost.ddr_bytes:
            self.ddr[rank // self.workload.topology.ranks_per_host].append((cost.ddr_bytes, literal))
        if pin is not None:
            self.pinned[rank].append((pin, int(round(cost.total_ms * self.scale)), cost.hbm_bytes,
                                      cost.ddr_bytes))

    def _add_table(self, name: str, cands: list[Candidate], costs) -> None:
        """One choice variable per cut (exactly one chosen), and its pieces' placements."""
        chosen = []
        for c, cand in enumerate(cands):
            x = self.cp.new_bool_var(f"x[{name},{c}]")
            self.choose[name, c] = x
            chosen.append(x)
            pcosts = costs[c]
            pbytes = self.sent_by_cut[name, c] if self.curves else [None] * len(pcosts)
            if cand.placement == "fixed":
                if not self.rules.may_hold_all(name, range(len(pcosts))):
                    self.cp.add(x == 0)
                for rank, (cost, b) in enumerate(zip(pcosts, pbytes)):
                    self._charge(name, rank, cost, x, pin=(name, c), sent_bytes=b)
                    self._move(name, cand, rank, rank, x)
                continue
            self._add_placed_cut(name, c, cand, x, pcosts, pbytes)
        # Exactly one cut per table.
        self.cp.add_exactly_one(chosen)

    def _add_placed_cut(self, name: str, c: int, cand: Candidate, x, pcosts, pbytes) -> None:
        topo = self.workload.topology
        world, local, cp = topo.world_size, topo.ranks_per_host, self.cp
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
                    if not self.rules.may_hold(name, h * local + p):
                        cp.add(hv == 0)
                        continue
                    self._charge(name, h * local + p, cost, hv, pin=(name, c, h), sent_bytes=b)
                    self._move(name, cand, p, h * local + p, hv)
                continue
            for h in hosts:
                ranks = range(world) if h is None else range(h * local, (h + 1) * local)
                ranks = [r for r in ranks if self.rules.may_hold(name, r)]
                ys = []
                for rank in ranks:
                    y = cp.new_bool_var(f"y[{name},{c},{p},{rank}]")
                    self.place.setdefault((name, c, p), {})[rank] = y
                    ys.append(y)
                    self._charge(name, rank, cost, y, sent_bytes=b)
                    self._move(name, cand, p, rank, y)
                # Each piece of a chosen cut sits on exactly one rank (of its host).
                cp.add(sum(ys) == (x if h is None else host_vars[h]))
        if len(cand.pieces) > 1:
            # Pieces of one cut on distinct ranks: two on one rank are one bigger piece.
            for rank in range(world):
                lits = [self.place[name, c, p][rank] for p in range(len(cand.pieces))
                        if rank in self.place.get((name, c, p), {})]
                if len(lits) > 1:
                    cp.add_at_most_one(lits)

    def _move(self, name: str, cand: Candidate, piece: int, rank: int, literal) -> None:
        if self.moves is not None:
            size = self.moves.piece_bytes(name, cand, piece, rank)
            if size > 0:
                self.moved.append((size, literal))

    def _add_move_limit(self):
        """The budget on bytes moved, and a tie-break term: of two plans with the same step, the
        one that moves less (None without a MoveLimit)."""
        if self.moves is None or not self.moved:
            return None
        # Exact bytes: a budget of exactly the forced bytes must stay feasible. Only budgets past
        # what int64 sums hold safely are counted in coarser units (rounded up per piece).
        unit = max(1, math.ceil(self.moves.max_bytes / MOVE_RESOLUTION))
        self.cp.add(sum(-(-b // unit) * lit for b, lit in self.moved) <= self.moves.max_bytes // unit)
        most = max(1, sum(b for b, _ in self.moved))
        return sum(max(1, round(TIE_RESOLUTION * b / most)) * lit for b, lit in self.moved)

    def _add_replica_latency(self, replica_ms: float) -> None:
        """One gradient all-reduce (its latency) on every rank once any table is replicated."""
        replicating = [self.choose[name, c] for name, cands in self.candidates.items()
                       for c, cand in enumerate(cands)
                       if cand.sharding_type == "data_parallel" or cand.replicated_rows]
        if not (replicating and replica_ms > 0 and self.curves is None):
            return
        any_replica = self.cp.new_bool_var("any_replica")
        for x in replicating:
            self.cp.add_implication(x, any_replica)
        cost = int(round(replica_ms * self.scale))
        for rank in range(self.workload.topology.world_size):
            self.load[rank][PHASES.index("bwd_comm_ms")].append((cost, any_replica))

    def _add_memory_caps(self) -> None:
        """What a rank holds stays within its cap (and a host's UVM bytes within its DDR)."""
        topo = self.workload.topology
        for rank in range(topo.world_size):
            if self.memory[rank]:
                self.cp.add(sum(b * lit for b, lit in self.memory[rank]) <= topo.rank_caps[rank])
        if topo.ddr_cap is not None:
            for host_terms in self.ddr:
                if host_terms:
                    self.cp.add(sum(b * lit for b, lit in host_terms) <= topo.ddr_cap)

    def _add_comm_curves(self) -> int:
        """A rank's comm, as replay reads it: ids out and pooled embeddings back (forward), their
        gradients and a ring all-reduce of replicas' gradients (backward). Returns the largest
        value a phase's peak can take."""
        top = 2 * COST_RESOLUTION
        curves = self.curves
        if curves is None:
            return top
        world = self.workload.topology.world_size
        fwd, bwd = PHASES.index("fwd_comm_ms"), PHASES.index("bwd_comm_ms")
        for key, pattern, where in (("ids", "even", ((fwd, 1),)), ("pooled", "pooled", ((fwd, 1), (bwd, 1))),
                                    ("allreduce", "even", ((bwd, 2),))):
            points = breakpoints(curves, world, pattern, self.most[key])
            seconds = lambda size, p=pattern: curves.seconds(world, p, size)  # noqa: E731
            top += sum(w for _, w in where) * (math.ceil(seconds(points[-1]) * 1e3 * self.scale) + 1)
            for rank in range(world):
                cost = curve_cost(self.cp, seconds, points, self.sent[rank][key], self.unit[key], self.scale,
                                  f"{key},{rank}")
                if cost is not None:
                    for phase, weight in where:
                        self.load[rank][phase].append((weight, cost))
        return top

    def _add_objective(self, objective: Objective, top: int, tie=None) -> None:
        cp, world = self.cp, self.workload.topology.world_size
        # A tie-break term stays below one unit of the step: it never buys a longer step.
        weight, tie = (1, 0) if tie is None else (TIE_RESOLUTION + 2 * len(self.moved) + 1, tie)
        self.step_weight = weight  # the objective's units per unit of step
        if objective.name == BOTTLENECK.name:
            # The bottleneck bounds every rank's load; minimising it balances the ranks.
            peak = cp.new_int_var(0, top, "bottleneck")
            for rank in range(world):
                terms = [t for phase in self.load[rank] for t in phase]
                if terms:
                    cp.add(sum(w * lit for w, lit in terms) <= peak)
            cp.minimize(weight * peak + tie)
            return
        # Each phase's slowest rank bounds every rank's time in it; their sum is the step.
        peaks = []
        for i, phase in enumerate(PHASES):
            peak = cp.new_int_var(0, top, f"slowest[{phase}]")
            peaks.append(peak)
            for rank in range(world):
                if self.load[rank][i]:
                    cp.add(sum(w * lit for w, lit in self.load[rank][i]) <= peak)
        if objective.robust:
            cp.minimize(weight * (ROBUST_RESOLUTION * self._robust_step(objective, peaks, top) + sum(peaks)) + tie)
            return
        cp.minimize(weight * sum(peaks) + tie)

    def _robust_step(self, objective, peaks, top: int):
        """The robust step (:class:`~shardopt.contracts.RobustObjective`): at least, at every
        compute scale, the lookups' peaks and the cuts' penalty times the scale's weight plus the
        all-to-alls' times theirs; the nominal peaks, at 1/ROBUST_RESOLUTION of it, break ties."""
        cp = self.cp
        penalty = [(int(round(objective.penalty_of(name, self.costs[name][c]) * self.scale)), x)
                   for (name, c), x in self.choose.items()]
        penalty = [(w, x) for w, x in penalty if w > 0]
        factors = objective.factors()
        most = max(max(a, b) for a, b in factors)
        bound = int(math.ceil(most * (len(PHASES) * top + sum(w for w, _ in penalty)))) + 1
        robust = cp.new_int_var(0, bound, "robust_step")
        for a, b in factors:
            wa, wb = int(round(ROBUST_RESOLUTION * a)), int(round(ROBUST_RESOLUTION * b))
            terms = [(wa if i in COMPUTE else wb) * peak for i, peak in enumerate(peaks)]
            terms += [wa * w * x for w, x in penalty]
            cp.add(sum(terms) <= ROBUST_RESOLUTION * robust)
        return robust

    def canonical(self, tables: tuple[TablePlan, ...]) -> tuple[TablePlan, ...]:
        """The same plan with interchangeable ranks relabelled to meet the symmetry constraints."""
        return canonical(self, tables)

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
        solver.parameters.catch_sigint_signal = False  # an interrupt is the command's, not an early stop
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = deterministic_s
        if solver.solve(fixed) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False
        self.hint_values(solver.response_proto.solution)
        return True

    def hint_values(self, values) -> None:
        """Hint every variable: ``values`` in the model's variable order (a solver's solution)."""
        self.cp.clear_hints()
        hint = self.cp.proto.solution_hint  # as add_hint per variable writes it, 30x sooner
        hint.vars.extend(range(len(values)))
        hint.values.extend(int(value) for value in values)

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

