"""Why no plan fits: the smallest set of the workload's requirements that conflict.

A CP-SAT model of feasibility alone (cuts, placements, memory; no costs) where each requirement
holds only under its own assumption literal: each rank's HBM cap, each host's DDR cap, each table's
allow-lists (cuts of every type are in the model), each placement rule. CP-SAT returns a set of
assumptions that is infeasible on its own; dropping members while the rest stays infeasible makes
it minimal. The numbers then come from two more solves: the least HBM the conflicting ranks would
need with everything else kept, and a cut that a conflicting allow-list forbids.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Optional

from ortools.sat.python import cp_model

from shardopt.arithmetic.placement import pin_ranks
from shardopt.core.errors import ShardoptError
from shardopt.core.placement import Pin, listed
from shardopt.core.units import format_bytes
from shardopt.core.workload import SHARDING_TYPES, Workload
from shardopt.costmodel.base import CostModel
from shardopt.search.candidates import KERNEL_PAIRS, TORCHREC_TYPES, piece_costs, table_candidates, uvm_without_host
from shardopt.search.ilp import MAX_PLACEMENTS
from shardopt.search.ilp_placement import add_group, holding

# Per feasibility solve, in CP-SAT's deterministic seconds (the same answer on a busy machine);
# the wall clock only guards. The explanation makes a few solves per member, so the whole of it
# has a budget too: at 128 ranks a core held a cap per rank, and one solve per member took 220 s
# to say what the search had said at once. Past the budget the set is reported as found so far.
SOLVE_WORK = 5.0
EXPLAIN_WORK = 20.0
WALL_GUARD_S = 60.0


@dataclass(frozen=True)
class Requirement:
    key: tuple  # ("hbm", rank) | ("ddr", host) | ("allow", table) | ("rule", index)
    text: str
    fix: str


@dataclass(frozen=True)
class Conflict:
    members: tuple[Requirement, ...]
    line: str  # the one line a user reads
    minimal: bool  # every member was shown to be needed (no solve ran out of time)


class _Feasibility:
    """Cuts and placements with memory, each requirement under its assumption literal."""

    def __init__(self, workload: Workload, cost_model: CostModel, which: str) -> None:
        self.workload = workload
        topo = workload.topology
        self.world, self.local = topo.world_size, topo.ranks_per_host
        self.cp = cp_model.CpModel()
        self.guards: dict[tuple, cp_model.IntVar] = {}
        self.memory = [[] for _ in range(self.world)]
        self.ddr = [[] for _ in range(topo.num_hosts)]
        self.on: dict[tuple[str, int], list] = {}
        self.choose: dict[str, list[tuple]] = {}
        self.least: dict[str, int] = {}  # per table, the fewest HBM bytes a cut it allows holds
        self.refused: set[str] = set()  # the tables whose lists leave no cut that runs
        self.size = 0
        self.work_left, self.wall_end = EXPLAIN_WORK, time.perf_counter() + WALL_GUARD_S
        types = self.types = SHARDING_TYPES if which == "all" else TORCHREC_TYPES[topo.compute_device]
        for table in workload.tables:
            self._add_table(table, _cuts(workload, table, which, types, self.refused), cost_model)
            if self.size > MAX_PLACEMENTS:  # no explanation: the search's own words
                raise OverflowError
        self._add_caps()
        self._add_rules()

    def guard(self, key: tuple) -> cp_model.IntVar:
        if key not in self.guards:
            self.guards[key] = self.cp.new_bool_var(f"g{key}")
        return self.guards[key]

    def _add_table(self, table, cands, cost_model: CostModel) -> None:
        xs = []
        for c, cand in enumerate(cands):
            x = self.cp.new_bool_var(f"x[{table.name},{c}]")
            xs.append(x)
            self.choose.setdefault(table.name, []).append((x, cand))
            costs = piece_costs(self.workload, cost_model, cand)
            if cand.sharding_type not in table.allowed_sharding_types or (
                    table.compute_kernels is not None and cand.compute_kernel not in table.compute_kernels):
                self.cp.add(x == 0).only_enforce_if(self.guard(("allow", table.name)))
            else:
                held = sum(cost.hbm_bytes for cost in costs)
                self.least[table.name] = min(self.least.get(table.name, held), held)
            if cand.placement == "fixed":
                for rank, cost in enumerate(costs):
                    self._put(table.name, rank, cost, x)
            elif cand.placement == "host" and cand.sharding_type == "table_row_wise":
                hosts = [self.cp.new_bool_var("") for _ in range(self.world // self.local)]
                self.cp.add(sum(hosts) == x)
                for h, hv in enumerate(hosts):
                    for p, cost in enumerate(costs):
                        self._put(table.name, h * self.local + p, cost, hv)
            else:
                self._add_free(table.name, cand, costs, x)
        self.cp.add_exactly_one(xs)

    def _add_free(self, name: str, cand, costs, x) -> None:
        groups = [range(self.world)] if cand.placement == "free" else \
            [range(h * self.local, (h + 1) * self.local) for h in range(self.world // self.local)]
        hosts = [x] if cand.placement == "free" else [self.cp.new_bool_var("") for _ in groups]
        if cand.placement != "free":
            self.cp.add(sum(hosts) == x)
        per_rank: dict[int, list] = {}
        for ranks, hv in zip(groups, hosts):
            for cost in costs:
                ys = [self.cp.new_bool_var("") for _ in ranks]
                self.size += len(ys)
                self.cp.add(sum(ys) == hv)
                for rank, y in zip(ranks, ys):
                    self._put(name, rank, cost, y)
                    per_rank.setdefault(rank, []).append(y)
        if len(costs) > 1:
            for lits in per_rank.values():
                self.cp.add_at_most_one(lits)

    def _put(self, name: str, rank: int, cost, literal) -> None:
        self.memory[rank].append((cost.hbm_bytes, literal))
        if cost.ddr_bytes:
            self.ddr[rank // self.local].append((cost.ddr_bytes, literal))
        self.on.setdefault((name, rank), []).append(literal)

    def _add_caps(self) -> None:
        topo = self.workload.topology
        for rank, terms in enumerate(self.memory):
            if terms and sum(b for b, _ in terms) > topo.rank_caps[rank]:
                self.cp.add(sum(b * lit for b, lit in terms) <= topo.rank_caps[rank]).only_enforce_if(
                    self.guard(("hbm", rank)))
        for host, terms in enumerate(self.ddr):
            if terms:
                self.cp.add(sum(b * lit for b, lit in terms) <= (topo.ddr_cap or 0)).only_enforce_if(
                    self.guard(("ddr", host)))

    def _add_rules(self) -> None:
        holds = holding(self.cp, lambda name, rank: self.on.get((name, rank), []))
        for i, rule in enumerate(self.workload.placement):
            g = self.guard(("rule", i))
            if isinstance(rule, Pin):
                allowed = pin_ranks(self.workload, rule)
                for name in rule.tables:
                    for rank in range(self.world):
                        if rank not in allowed:
                            for lit in self.on.get((name, rank), []):
                                self.cp.add(lit == 0).only_enforce_if(g)
                continue
            add_group(self.cp, holds, rule.kind, rule.tables, self.world, enforce=g)

    def solve(self, keys, minimise_hbm: Optional[list[int]] = None):
        """(status, solver) with the requirements ``keys`` assumed; with ``minimise_hbm``, those
        ranks' caps are replaced by one cap that is minimised. UNKNOWN without a solve once the
        explanation's budget is spent."""
        solver = cp_model.CpSolver()
        wall_left = self.wall_end - time.perf_counter()
        if self.work_left <= 0 or wall_left <= 0:
            return cp_model.UNKNOWN, solver
        model = self.cp.clone()
        model.clear_assumptions()
        model.add_assumptions([self.guards[k] for k in keys])
        if minimise_hbm:
            cap = model.new_int_var(0, max(sum(b for b, _ in self.memory[r]) for r in minimise_hbm), "cap")
            for r in minimise_hbm:
                model.add(sum(b * model.get_bool_var_from_proto_index(lit.index) for b, lit in self.memory[r])
                          <= cap)
            model.minimize(cap)
        solver.parameters.catch_sigint_signal = False  # an interrupt is the command's, not an early stop
        solver.parameters.max_deterministic_time = min(SOLVE_WORK, self.work_left)
        solver.parameters.max_time_in_seconds = wall_left
        solver.parameters.num_workers = 1  # assumptions need a single worker for the core
        status = solver.solve(model)
        self.work_left -= solver.response_proto.deterministic_time
        return status, solver


def _cuts(workload: Workload, table, which: str, types, refused: set[str]) -> list:
    """The table's own cuts and those of every type: a type allowed alone gets cuts (a one-piece
    column-wise one) that it does not get beside table-wise. A table whose lists leave no cut that
    runs is added to ``refused``."""
    try:
        own = table_candidates(workload, table, which)  # type: ignore[arg-type]
    except ShardoptError:
        own = []  # nothing it allows runs: the allow-list's guard says so (and _refusal why)
        refused.add(table.name)
    relaxed = dataclasses.replace(table, sharding_types=tuple(types), compute_kernels=None)
    seen = {(c.sharding_type, c.pieces, c.compute_kernel, c.cache_load_factor) for c in own}
    return own + [c for c in table_candidates(workload, relaxed, which)  # type: ignore[arg-type]
                  if (c.sharding_type, c.pieces, c.compute_kernel, c.cache_load_factor) not in seen]


def find_conflict(workload: Workload, cost_model: CostModel, which: str = "all") -> Optional[Conflict]:
    """The smallest conflicting set of requirements, or None when none is found (the model is
    too big, or feasible: then the search ran out of time, not room)."""
    try:
        model = _Feasibility(workload, cost_model, which)
    except OverflowError:
        return None
    keys = sorted(model.guards)
    status, solver = model.solve(keys)
    if status == cp_model.UNKNOWN:
        # Too big to decide in the time: the plain count that a pin's tables outweigh its ranks.
        overflow = _pinned_overflow(workload, model)
        if overflow is None:
            return None
        core, ranks, need = overflow
        members = tuple(_requirement(workload, model, key, core) for key in core)
        return Conflict(members, _line(workload, model, members, core, keys, need), minimal=False)
    if status != cp_model.INFEASIBLE:
        return None
    by_lit = {model.guards[k].index: k for k in keys}
    core = [by_lit[i] for i in solver.sufficient_assumptions_for_infeasibility() if i in by_lit] or keys
    minimal = True
    for key in list(core):
        trial = [k for k in core if k != key]
        status, _ = model.solve(trial)
        if status == cp_model.INFEASIBLE:
            core = trial
        elif status != cp_model.FEASIBLE and status != cp_model.OPTIMAL:
            minimal = False
    members = tuple(_requirement(workload, model, key, core) for key in core)
    return Conflict(members, _line(workload, model, members, core, keys), minimal)


def _requirement(workload: Workload, model: _Feasibility, key: tuple, core: list) -> Requirement:
    kind, what = key
    topo = workload.topology
    if kind == "hbm":
        return Requirement(key, _caps_text(workload, [what]), "")
    if kind == "ddr":
        return Requirement(key, f"ddr_cap {format_bytes(topo.ddr_cap or 0)} of host {what}",
                           f"raise topology.ddr_cap (host {what})")
    if kind == "allow":
        table = workload.table(what)
        status, solver = model.solve([k for k in core if k != key])
        used = [cand for x, cand in model.choose[what] if status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
                and solver.boolean_value(x)]
        extra = _relaxed(table, used[0]) if used else _unlisted(table, model.types)
        host = ", or declare topology.ddr_cap (UVM keeps rows in host memory)" if uvm_without_host(workload, table) else ""
        return Requirement(key, f"{_lists_text(table)} of {what}{_refusal(model, table, bool(host))}",
                           f"allow {extra} for {what}{host}")
    rule = workload.placement[what]
    fix = f"unpin {listed(rule.tables)} (placement[{what}])" if isinstance(rule, Pin) else f"drop placement[{what}]"
    return Requirement(key, rule.describe(), fix)


def _refusal(model: _Feasibility, table, host_fix: bool) -> str:
    """Why the table's lists leave no cut that runs here, for the line (empty when some cut runs
    and the lists conflict with memory or rules instead, or when the fix already says to declare
    host memory for its UVM kernels)."""
    if table.name not in model.refused:
        return ""
    if not set(model.types) & set(table.allowed_sharding_types):
        device = model.workload.topology.compute_device
        return f" (none runs in TorchRec on {device}, which allows {', '.join(model.types)})"
    if host_fix:
        return ""
    return f" (its sharding_types run with none of its compute_kernels: {KERNEL_PAIRS})"


# What to suggest allowing when no solve says which cut would fit: the plainest cut first.
PLAINEST = ("table_wise", "column_wise", "row_wise", "table_column_wise", "table_row_wise", "data_parallel")


def _relaxed(table, cut) -> str:
    """What of ``cut`` the table's lists leave out: its sharding type, its kernel, or both."""
    kinds = [cut.sharding_type] if cut.sharding_type not in table.allowed_sharding_types else []
    if (table.compute_kernels and cut.compute_kernel not in table.compute_kernels) or not kinds:
        kinds.append(f"the {cut.compute_kernel} kernel" if kinds else cut.compute_kernel)
    return " with ".join(kinds)


def _unlisted(table, types) -> str:
    """A cut its lists leave out (the plainest that runs in this candidate set), else the fused kernel."""
    if table.sharding_types:
        for kind in PLAINEST:
            if kind in types and kind not in table.sharding_types:
                return kind
    if table.compute_kernels and "fused" not in table.compute_kernels:
        return "fused"
    return "another cut"


def _lists_text(table) -> str:
    """The allow-lists the user gave the table (a list left out allows everything: not named)."""
    lists = [f"{field} {list(given)}" for field, given in (("sharding_types", table.sharding_types),
                                                           ("compute_kernels", table.compute_kernels)) if given]
    return " and ".join(lists)


def _pinned_overflow(workload: Workload, model: _Feasibility) -> Optional[tuple[list, list[int], int]]:
    """A pin whose tables need more HBM than its ranks hold together, with the bytes per rank."""
    caps = workload.topology.rank_caps
    for i, rule in enumerate(workload.placement):
        if isinstance(rule, Pin):
            ranks = sorted(pin_ranks(workload, rule))
            need = sum(model.least.get(name, 0) for name in rule.tables)
            if need > sum(caps[r] for r in ranks):
                core = [("rule", i)] + [("hbm", r) for r in ranks if ("hbm", r) in model.guards]
                return core, ranks, -(-need // len(ranks))
    return None


def _line(workload: Workload, model: _Feasibility, members, core: list, keys: list,
          at_least: Optional[int] = None) -> str:
    ranks = [k[1] for k in core if k[0] == "hbm"]
    texts = [m.text for m in members if m.key[0] != "hbm"]
    fixes = list(dict.fromkeys(m.fix for m in members if m.fix))
    need = ""
    if ranks:
        texts.append(_caps_text(workload, ranks))
        if at_least is not None:
            status, value = cp_model.FEASIBLE, at_least
        else:
            status, solver = model.solve([k for k in keys if not (k[0] == "hbm" and k[1] in ranks)], ranks)
            value = int(solver.objective_value) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else 0
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            each = " each" if len(ranks) > 1 and at_least is not None else ""
            need = (f": {_ranks_text(ranks)} need{'s' if len(ranks) == 1 else ''}"
                    f"{' at least' if at_least is not None else ''} {format_bytes(value)}{each}")
            topo = workload.topology
            least = " at least" if at_least is not None else ""
            if all(topo.rank_caps[r] == topo.hbm_cap for r in ranks):
                fixes.append(f"raise hbm_cap{' of ' + _ranks_text(ranks) if len(ranks) < topo.world_size else ''}"
                             f" to{least} {format_bytes(value)}")
            else:
                fixes.append(f"give {_ranks_text(ranks)}{least} {format_bytes(value)} for shards (topology.ranks:"
                             " hbm_cap less reserved)")
    joined = texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]
    verb = "leaves no plan" if len(texts) == 1 else "conflict"
    if not fixes:
        return f"{joined} {verb}{need}"
    options = fixes[0] if len(fixes) == 1 else ", ".join(fixes[:-1]) + ", or " + fixes[-1]
    return f"{joined} {verb}{need}; {options}"


def _caps_text(workload: Workload, ranks: list[int]) -> str:
    topo = workload.topology
    caps = sorted({topo.rank_caps[r] for r in ranks})
    if caps == [topo.hbm_cap]:
        return f"hbm_cap {format_bytes(topo.hbm_cap)} of {_ranks_text(ranks)}"
    return f"the {' / '.join(format_bytes(c) for c in caps)} for shards of {_ranks_text(ranks)}"


def _ranks_text(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return f"ranks {', '.join(map(str, ranks[:6]))}" + (f" and {len(ranks) - 6} more" if len(ranks) > 6 else "")
