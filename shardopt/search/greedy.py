"""Memory-aware greedy search: the warm start for the ILP and the planner for very large instances.

Each table starts at its least-split candidate whose largest piece is no heavier than a balanced
rank's share (else the cut that overshoots it least; a piece on every rank counts on top of that
share, since every rank pays it, and such pieces add up: ``stacked.py``); pieces then go, heaviest
first, onto the least-loaded rank with room (longest processing time first). A table whose piece
fits nowhere is cut finer and the placement restarts; a final pass moves pieces off the bottleneck
rank while that lowers it. Under the critical-path objective one more plan starts from a target
per phase (a table whose lookups alone outweigh a balanced rank's is cut although traffic
dominates its total), and the best plan's phases are then balanced by moves and swaps
(``balance.py``): at 1000 tables x 128 ranks, where the greedy is the answer, the step fell from
17.5 to 13.7 ms.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from shardopt.costmodel.base import CostModel, ShardCost
from shardopt.costmodel.uncertainty import plan_score
from shardopt.core.plan import TablePlan
from shardopt.search.balance import balance_phases
from shardopt.search.bound import balance_lower_bound
from shardopt.search.candidates import Candidate, table_plan, workload_candidates
from shardopt.search.pricing import distinct, pieces_max, pieces_total
from shardopt.search.explain import Unplaceable, greedy_failure
from shardopt.search.hosts import place_host_bound, roomiest, take
from shardopt.search.rules import RankGuard, same_piece_counts
from shardopt.search.shared import shared
from shardopt.search.stacked import fixed_barred, forced_ms, phase_share, unstacked
from shardopt.contracts import CRITICAL_PATH, DEFAULT_CANDIDATES, PHASES, Objective, SearchResult, rank_phases
from shardopt.core.workload import Workload

Order = Literal["cost", "memory"]
_MAX_MOVES = 10_000
# Tables are cut until their largest piece is at most this multiple of a balanced rank's load;
# each multiple yields a plan and the one the cost model rates best is kept.
TARGETS = (1.0, 1.5, float("inf"))
BALANCE_MOVES_PER_RANK = 4  # balance_phases' budget, in moves or swaps


@dataclass
class _Ranks:
    """Mutable placement state, private to one search: numpy rows so that a piece weighs every
    rank at once (5000 tables over 1024 ranks)."""

    load_ms: np.ndarray  # per rank, the shards' totals (overheads apart)
    free_bytes: np.ndarray
    kinds: list[Counter] = field(default_factory=list)
    free_ddr: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per host; none without a ddr_cap
    local: int = 1
    slow: np.ndarray = field(default_factory=lambda: np.ones(0))  # per rank, 1/speed: lookups take longer

    @classmethod
    def empty(cls, workload: Workload) -> "_Ranks":
        topo = workload.topology
        world = topo.world_size
        ddr = 0.0 if topo.ddr_cap is None else float(topo.ddr_cap)
        return cls(np.zeros(world), np.array(topo.rank_caps, dtype=np.int64),
                   [Counter() for _ in range(world)], np.full(topo.num_hosts, ddr), topo.ranks_per_host,
                   1.0 / np.array(topo.rank_speeds))

    def ms(self, cost: ShardCost, rank=slice(None)):
        """The piece's milliseconds on ``rank`` (every rank, as a vector, by default)."""
        compute = cost.fwd_compute_ms + cost.bwd_compute_ms
        return cost.total_ms + compute * (self.slow[rank] - 1.0)

    def room(self, rank: int, cost: ShardCost) -> bool:
        return bool(cost.hbm_bytes <= self.free_bytes[rank] and cost.ddr_bytes <= self.free_ddr[rank // self.local])

    def rooms(self, cost: ShardCost) -> np.ndarray:
        """Which ranks have room for the piece, as a mask."""
        hosts = np.arange(len(self.load_ms)) // self.local
        return (self.free_bytes >= cost.hbm_bytes) & (self.free_ddr[hosts] >= cost.ddr_bytes)

    def take(self, rank: int, kind: str, cost: ShardCost, sign: int = 1) -> None:
        self.load_ms[rank] += sign * self.ms(cost, rank)
        self.free_bytes[rank] -= sign * cost.hbm_bytes
        self.free_ddr[rank // self.local] -= sign * cost.ddr_bytes
        self.kinds[rank][kind] += sign

    def overheads_with(self, workload: Workload, model: CostModel, kind: str) -> np.ndarray:
        """Each rank's overhead once it holds a shard of ``kind`` (one price per set of kinds)."""
        memo: dict[frozenset, float] = {}
        out = np.empty(len(self.load_ms))
        for rank, kinds in enumerate(self.kinds):
            key = frozenset(+kinds) | {kind}
            if key not in memo:
                memo[key] = model.rank_overhead_ms(workload, set(key))
            out[rank] = memo[key]
        return out


class GreedySearch:
    """Largest-cost-first placement with candidate escalation and a bottleneck move pass."""

    name = "greedy"

    def __init__(
        self, targets: Sequence[float] = TARGETS, repair_s: float = 1.0, candidates: str = DEFAULT_CANDIDATES,
        objective: Objective = CRITICAL_PATH, balance: bool = True,
    ) -> None:
        self.targets = tuple(targets)
        self.repair_s = repair_s
        self.candidate_set = candidates
        self.objective = objective  # the repair's score; placement itself balances rank totals
        self.balance = balance  # under the critical path: phase targets and balance_phases

    def search(self, workload: Workload, cost_model: CostModel, candidates=None, costs=None,
               possible: bool = True) -> SearchResult:
        """``candidates`` and their ``costs`` may be passed in when the caller has them already.
        The result's bound is over every cut the tables allow (``possible``) or over those offered."""
        if candidates is None or costs is None:
            candidates, costs = workload_candidates(workload, cost_model, self.candidate_set)
        bound = balance_lower_bound(workload, cost_model, candidates, costs, possible=possible)
        world = workload.topology.world_size
        totals = {name: list(map(pieces_total, per)) for name, per in costs.items()}
        cheapest = {name: min(range(len(t)), key=t.__getitem__) for name, t in totals.items()}
        average = sum(totals[name][i] for name, i in cheapest.items()) / world
        # Each table's share of a balanced rank (its cheapest cut over every rank), per phase and in all.
        shares = {name: (phase_share(costs[name][i], world), totals[name][i] / world) for name, i in cheapest.items()}
        targets: list = [average * scale for scale in self.targets]
        steps = self.balance and self.objective.name == CRITICAL_PATH.name
        if steps:
            targets.append(_phase_means([costs[name][i] for name, i in cheapest.items()], world))
        best, failure = self._best_of(workload, cost_model, candidates, costs, targets, shares, None)
        barred = fixed_barred(candidates, costs, best[1]) if best is not None else None
        if barred is not None:
            # A cut on every rank (row-wise over the world, a replica) adds its piece to the
            # slowest rank too, which the start's guess of a balanced rank cannot see; the plans
            # without the ones taken are weighed by the whole model (at 1024 ranks, a hot table
            # cut 8 ways within a host instead of 1024 ways: 8.10 -> 7.57 ms).
            best, _ = self._best_of(workload, cost_model, *barred, targets, shares, best)
        if best is None:
            assert failure is not None
            raise greedy_failure(workload, costs, failure)
        if steps:
            # Kept only where the whole model rates the step shorter (balance_phases checks).
            best = (best[0], balance_phases(workload, cost_model, best[1],
                                            BALANCE_MOVES_PER_RANK * workload.topology.world_size,
                                            objective=self.objective))
        result = SearchResult(best[1], bound)
        if self.repair_s > 0:
            from shardopt.search.repair import repaired

            result = repaired(workload, cost_model, result, self.repair_s, objective=self.objective)
        return result

    def _best_of(self, workload, cost_model, candidates, costs, targets, shares, best):
        """The plan the objective rates best of ``best`` and those placed at each target, and the
        last placement's failure (None where every target placed)."""
        failure: Unplaceable | None = None
        for target in targets:
            try:
                placed = self._search_at(workload, cost_model, candidates, costs, target, shares)
            except Unplaceable as exc:
                failure = exc
                continue
            peak = plan_score(self.objective, workload, cost_model, placed)
            if best is None or peak < best[0] - 1e-12:
                best = (peak, placed)
        return best, failure

    @staticmethod
    def _search_at(workload, cost_model, candidates, costs, target_ms, shares) -> tuple[TablePlan, ...]:
        """Place with tables cut until their largest piece is at most ``target_ms`` (placement
        balances rank totals whatever the objective, so a robust greedy reuses the nominal one's)."""
        target = tuple(target_ms.tolist()) if isinstance(target_ms, np.ndarray) else float(target_ms)
        held = shared(cost_model, workload, ("placed", id(candidates), id(costs), target), lambda: (
            candidates, costs, GreedySearch._place_at(workload, cost_model, candidates, costs, target_ms, shares)))
        if held[0] is candidates and held[1] is costs:
            return held[2]
        return GreedySearch._place_at(workload, cost_model, candidates, costs, target_ms, shares)

    @staticmethod
    def _place_at(workload, cost_model, candidates, costs, target_ms, shares) -> tuple[TablePlan, ...]:
        failure: Unplaceable | None = None
        start = unstacked({
            name: _initial_choice(costs[name], target_ms, [c.sharding_type for c in candidates[name]],
                                  [c.placement == "fixed" for c in candidates[name]], shares[name])
            for name in candidates}, candidates, costs, target_ms, shares)
        for order in ("cost", "memory"):
            choice = dict(start)  # each order escalates from the same first cuts
            while True:
                try:
                    return _place(workload, cost_model, candidates, costs, choice, order)
                except Unplaceable as exc:
                    failure = exc
                    if choice[exc.table] + 1 >= len(candidates[exc.table]):
                        break
                    choice[exc.table] += 1
        assert failure is not None
        raise failure


def _phase_means(cheapest: Sequence[Sequence[ShardCost]], world: int) -> np.ndarray:
    """A balanced rank's milliseconds in each phase, with every table at its cheapest cut."""
    return np.array([sum(rank_phases(p)[k] for pieces in cheapest for p in pieces) for k in range(len(PHASES))]) / world


def _initial_choice(per_candidate: Sequence[Sequence[ShardCost]], target_ms, kinds: Sequence[str] = (),
                    fixed: Sequence[bool] = (), share: tuple = (0.0, 0.0)) -> int:
    """The least-split candidate that keeps every rank within ``target_ms`` (``forced_ms``),
    else the one that overshoots it least; with a target per phase, first the cheapest candidate
    whose pieces are each within every phase's target (a table whose lookups alone outweigh a
    balanced rank's is cut although traffic dominates its total). ``share``: the table's share of a
    balanced rank, per phase and in all (what a fixed cut's piece stands in for)."""
    if isinstance(target_ms, np.ndarray):
        # Pieces of one shape share one cost object: a cut over 1024 ranks has two distinct ones
        # (reading the phases of 1024 pieces one by one was 3 s of 5000 x 1024's plan under a profiler).
        phases_of = [list(map(rank_phases, distinct(pieces))) for pieces in per_candidate]
        peaks = [np.array([max(ph[k] for ph in phases) for k in range(len(PHASES))]) for phases in phases_of]
        own = share[0]
        within = [i for i, peak in enumerate(peaks)
                  if (forced_ms(peak, target_ms, bool(fixed and fixed[i]), own) <= target_ms).all()]
        if within:
            return min(within, key=lambda i: (pieces_total(per_candidate[i]), i))
        target_ms = float(target_ms.sum())
    own = share[1]
    forced = [forced_ms(pieces_max(pieces), target_ms, bool(fixed and fixed[i]), own)
              for i, pieces in enumerate(per_candidate)]
    fitting = [i for i, load in enumerate(forced) if load <= target_ms]
    if not fitting:
        return min(range(len(per_candidate)), key=lambda i: (forced[i], i))
    # The least split that fits; but a replica on every rank (data-parallel) fits by its piece
    # while every rank pays it: it is taken only where no fitting cut costs the world less.
    first = fitting[0]
    if kinds and kinds[first] == "data_parallel":
        cheaper = [i for i in fitting[1:] if pieces_total(per_candidate[i]) < pieces_total(per_candidate[first])]
        if cheaper:
            return cheaper[0]
    return first


def _place(
    workload: Workload,
    model: CostModel,
    candidates: dict[str, list[Candidate]],
    costs: dict[str, list[list[ShardCost]]],
    choice: dict[str, int],
    order: Order,
) -> tuple[TablePlan, ...]:
    """Fixed pieces first (no choice of rank), then host-bound cuts, then free pieces."""
    ranks = _Ranks.empty(workload)
    assigned: dict[str, list[int]] = {}
    names = [t.name for t in workload.tables]
    guard = RankGuard(workload) if workload.placement else None
    if guard is not None:
        same_piece_counts(workload, candidates, choice)
    chosen = {name: (candidates[name][choice[name]], costs[name][choice[name]]) for name in names}
    _place_fixed(ranks, chosen, assigned, guard)
    place_host_bound(workload, model, ranks, chosen, assigned, guard)
    _place_free(workload, model, ranks, chosen, assigned, order, guard)
    if guard is None:  # moves would have to re-check every rule: the rules' plans go to CP-SAT as placed
        _move_off_bottleneck(workload, model, candidates, costs, choice, assigned, ranks)
    return tuple(
        table_plan(candidates[name][choice[name]], assigned[name]) for name in names
    )


def _place_fixed(ranks: _Ranks, chosen, assigned: dict[str, list[int]], guard: RankGuard | None) -> None:
    """Fixed pieces (row-wise, data-parallel) have no choice of rank."""
    for name, (cand, pcosts) in chosen.items():
        if cand.placement != "fixed":
            continue
        if guard is not None and not guard.open_to(name)[: len(pcosts)].all():
            raise Unplaceable(name, 0, 0, 0, rule="placement rules (a cut on every rank)")
        for rank, cost in enumerate(pcosts):
            if not ranks.room(rank, cost):
                raise Unplaceable(name, cost.hbm_bytes, rank, int(ranks.free_bytes[rank]))
            ranks.take(rank, cand.sharding_type, cost)
            if cand.replicated_rows:
                ranks.kinds[rank]["data_parallel"] += 1  # the hot replica is a kernel of its own
            if guard is not None:
                guard.took(name, rank)
        assigned[name] = list(range(len(pcosts)))


def _place_free(workload: Workload, model: CostModel, ranks: _Ranks, chosen, assigned, order: Order,
                guard: RankGuard | None) -> None:
    """Free pieces, heaviest first (by cost, or by bytes when memory is what binds), each on the
    least-loaded rank with room, every rank weighed at once. (Weighing ranks by the step instead,
    each phase's slowest rank summed, was tried: at 5000 tables x 1024 ranks the step came out
    within 0.3% of this one, or 10% longer, and the placement took 10x as long.)"""
    free = [
        (name, i, cost)
        for name, (cand, pcosts) in chosen.items()
        if cand.placement == "free"
        for i, cost in enumerate(pcosts)
    ]
    key = (lambda x: (-x[2].total_ms, x[0], x[1])) if order == "cost" else (
        lambda x: (-x[2].hbm_bytes, -x[2].total_ms, x[0], x[1])
    )
    free.sort(key=key)
    if guard is not None:
        free = guard.grouped_last(free)
    overheads: dict[str, np.ndarray] = {}
    for name, i, cost in free:
        kind = chosen[name][0].sharding_type
        fits = ranks.rooms(cost)
        if guard is not None:
            fits &= guard.open_to(name)
            if not fits.any():
                raise Unplaceable(name, cost.hbm_bytes, 0, 0, rule="placement rules")
        if not fits.any():
            rank = roomiest(ranks)
            raise Unplaceable(name, cost.hbm_bytes, rank, int(ranks.free_bytes[rank]))
        # Pieces of one table spread over ranks when they can: it keeps each rank's load lighter.
        pool = fits.copy()
        pool[assigned.get(name, [])] = False
        pool = pool if pool.any() else fits
        if kind not in overheads:
            overheads[kind] = ranks.overheads_with(workload, model, kind)
        total = np.where(pool, ranks.load_ms + ranks.ms(cost) + overheads[kind], np.inf)
        rank = int(np.argmin(total))  # the first of the least loaded
        take(workload, model, ranks, name, rank, kind, cost, guard, overheads)
        assigned.setdefault(name, []).append(rank)


def _move_off_bottleneck(workload, model, candidates, costs, choice, assigned, ranks) -> None:
    """Move free pieces off the most loaded rank while that lowers the pair's maximum."""

    def total(rank: int) -> float:
        return ranks.load_ms[rank] + model.rank_overhead_ms(workload, set(+ranks.kinds[rank]))

    for _ in range(_MAX_MOVES):
        totals = [total(r) for r in range(workload.topology.world_size)]
        worst = max(range(len(totals)), key=lambda r: (totals[r], -r))
        moves = []
        for name, rank_list in assigned.items():
            cand = candidates[name][choice[name]]
            if cand.placement != "free":
                continue
            for i, rank in enumerate(rank_list):
                if rank != worst:
                    continue
                cost = costs[name][choice[name]][i]
                for dest in range(len(totals)):
                    if dest == worst or cost.hbm_bytes > ranks.free_bytes[dest]:
                        continue
                    if dest // ranks.local != worst // ranks.local and not ranks.room(dest, cost):
                        continue
                    kinds = set(+ranks.kinds[dest]) | {cand.sharding_type}
                    after = ranks.load_ms[dest] + ranks.ms(cost, dest) + model.rank_overhead_ms(workload, kinds)
                    if after < totals[worst] - 1e-9:
                        moves.append((after, name, i, dest, cost, cand.sharding_type))
        if not moves:
            return
        after, name, i, dest, cost, kind = min(moves, key=lambda m: (m[0], m[1], m[2], m[3]))
        ranks.take(worst, kind, cost, -1)
        ranks.take(dest, kind, cost)
        assigned[name][i] = dest
