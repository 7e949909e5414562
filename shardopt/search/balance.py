"""Balance each phase of a step at scale: moves and swaps over additive shard costs, every
destination weighed at once.

Where an instance is too large for CP-SAT (5000 tables x 1024 ranks: 72 million placements) the
greedy balances rank totals, but a step waits for each phase's slowest rank: a rank heavy in
lookups beside one heavy in traffic left the step 1.35x its bottleneck at that scale. This pass
takes the phase whose slowest rank sits farthest above the phase's mean, and moves one of that
rank's shards elsewhere, or swaps it with a shard of another rank, whichever shortens the step
most, all destinations and partners priced at once with numpy. Shard costs are the model's
additive ones (priced on an average rank); the caller re-scores the result with the whole model
and keeps it only if the step fell. Moves are counted, not timed, so the same input gives the
same plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from shardopt.arithmetic.memory import plan_memory
from shardopt.contracts import CRITICAL_PATH, PHASES, Objective, ShardSpec, rank_phases
from shardopt.core.plan import TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.uncertainty import plan_penalty
from shardopt.search.repair import movable

ITEMS_TRIED = 4  # the slowest rank's shards tried per step, heaviest in the phase first
SWAP_RANKS = 32  # swap partners come from the ranks lightest in the phase (all of them: 3x slower)
_EPS = 1e-9


def balance_phases(
    workload: Workload, model: CostModel, tables: Sequence[TablePlan], max_moves: int,
    objective: Objective = CRITICAL_PATH,
) -> tuple[TablePlan, ...]:
    """The plan after at most ``max_moves`` moves or swaps that each shorten the additive step,
    if the whole model agrees that the step is shorter; else the plan as given. (Shards priced on
    an average rank can mislead: on a CPU comm-bound task a random plan came out 13% longer by the
    whole model, its caches shared per rank.)"""
    state = _Items.of(workload, model, tables, objective)
    if state is None:
        return tuple(tables)
    # The whole model's score, as scored below; moves change no cut, so the cuts' penalty is fixed.
    state.penalty = plan_penalty(objective, workload, model, tables)
    before = objective.score_peaks(state.load.max(axis=0), state.penalty)
    for _ in range(max_moves):
        if not state.step_once():
            break
    balanced = state.tables()
    after = objective.score([rank_phases(r) for r in model.breakdown(workload, balanced)], state.penalty)
    return balanced if after < before - 1e-12 else tuple(tables)


def smallest(values: np.ndarray, n: int) -> np.ndarray:
    """``np.argsort(values, kind="stable")[:n]`` of a 1-D array without sorting all of it: the
    values up to the n-th smallest, ties in index order (a balancing step at 1024 ranks sorted
    every rank's load five times to read three or 32 of them)."""
    if len(values) <= n:
        return np.argsort(values, kind="stable")
    kth = np.partition(values, n - 1)[n - 1]
    near = np.flatnonzero(values <= kth)
    return near[np.argsort(values[near], kind="stable")][:n]


class _Items:
    """The movable shards as arrays: phase costs, bytes, rank and table of each."""

    def __init__(self, workload, tables, keys, cost, hbm, ddr, rank, table, load, free, free_ddr,
                 objective: Objective = CRITICAL_PATH):
        self.objective, self.penalty = objective, 0.0
        self.workload, self.plan = workload, list(tables)
        self.keys, self.cost, self.hbm, self.ddr = keys, cost, hbm, ddr
        self.rank, self.table = rank, table
        self.load, self.free, self.free_ddr = load, free, free_ddr
        self.local = workload.topology.ranks_per_host
        # Each table's items (fixed: moves change ranks, not tables), for the one-piece-per-rank rule.
        by_table = np.argsort(table, kind="stable")
        bounds = np.searchsorted(table[by_table], np.arange(len(self.plan) + 1))
        self._of_table = [by_table[bounds[t]:bounds[t + 1]] for t in range(len(self.plan))]

    @classmethod
    def of(cls, workload: Workload, model: CostModel, tables: Sequence[TablePlan],
           objective: Objective = CRITICAL_PATH) -> "_Items | None":
        topo = workload.topology
        if topo.world_size < 3:
            return None
        keys, cost, hbm, ddr, rank, table = [], [], [], [], [], []
        for ti, tp in enumerate(tables):
            if tp.replicated_rows or movable(workload, tp) != "any":
                continue
            spec_table = workload.table(tp.name)
            by_shape: dict[tuple[int, int], object] = {}
            for si, shard in enumerate(tp.shards):
                if shard.sizes not in by_shape:
                    by_shape[shard.sizes] = model.shard_cost(workload, ShardSpec(
                        spec_table, tp.sharding_type, shard.sizes[0], shard.sizes[1], tp.compute_kernel,
                        tp.cache_load_factor))
                c = by_shape[shard.sizes]
                keys.append((ti, si))
                cost.append(rank_phases(c))
                hbm.append(c.hbm_bytes)
                ddr.append(c.ddr_bytes)
                rank.append(shard.rank)
                table.append(ti)
        if not keys:
            return None
        load = np.array([rank_phases(r) for r in model.breakdown(workload, tables)])
        used, used_ddr = plan_memory(workload, tables)
        free = np.array([cap - used.get(r, 0) for r, cap in enumerate(topo.rank_caps)], dtype=np.int64)
        ddr_cap = np.inf if topo.ddr_cap is None else float(topo.ddr_cap)
        free_ddr = np.array([ddr_cap - used_ddr.get(h, 0) for h in range(topo.num_hosts)])
        return cls(workload, tables, keys, np.array(cost), np.array(hbm, dtype=np.int64), np.array(ddr, float),
                   np.array(rank), np.array(table), load, free, free_ddr, objective)

    def step_once(self) -> bool:
        """Apply the best move or swap off the slowest rank of the most unbalanced phase that
        has one; False when no phase has one."""
        peaks = self.load.max(axis=0)
        step = self.objective.score_peaks(peaks, self.penalty)
        self._order = np.stack([smallest(-column, 3) for column in self.load.T], axis=1)  # (<=3, phases): the slowest ranks
        self._top = np.take_along_axis(self.load, self._order, axis=0)
        gaps = (peaks - self.load.mean(axis=0)) * np.array(self.objective.phase_weights(peaks, self.penalty))
        others: dict[int, np.ndarray] = {}  # per slowest rank: _others_max over every destination
        for k in sorted(range(len(PHASES)), key=lambda k: (-gaps[k], k)):
            src = int(np.argmax(self.load[:, k]))
            on_src = np.flatnonzero(self.rank == src)
            best = None
            light = np.zeros(len(self.load), dtype=bool)
            light[smallest(self.load[:, k], SWAP_RANKS)] = True
            partners = np.flatnonzero(light[self.rank])
            if src not in others:
                others[src] = self._others_max(src, np.arange(len(self.load)))
            src_tables = np.zeros(len(self.plan), dtype=bool)
            src_tables[self.table[on_src]] = True
            items = np.array(sorted(on_src, key=lambda i: (-self.cost[i, k], i))[:ITEMS_TRIED], dtype=np.int64)
            moves = self._moves(items, src, others[src])
            swaps = self._swaps(items, src, partners, others[src][self.rank[partners]], src_tables)
            for i, move, swap in zip(items.tolist(), moves, swaps):
                for score, partner in (move, swap):
                    if score < step - _EPS and (best is None or score < best[0] - _EPS):
                        best = (score, i, partner)
            if best is not None:
                self._apply(best[1], best[2])
                return True
        return False

    def _others_max(self, src: int, dest: np.ndarray) -> np.ndarray:
        """Per destination and phase, the slowest rank's load leaving out ``src`` and the destination
        (of the slowest three: the first not ``src``, or the next where that is the destination)."""
        order, top = self._order, self._top
        not_src = order != src
        nth = np.cumsum(not_src, axis=0)
        first, second = not_src & (nth == 1), not_src & (nth == 2)
        first_load = np.where(first, top, -np.inf).max(axis=0)
        first_rank = np.where(first, order, -1).max(axis=0)
        second_load = np.where(second, top, -np.inf).max(axis=0)
        return np.where(dest[:, None] == first_rank[None, :], second_load[None, :], first_load[None, :])

    def _moves(self, items: np.ndarray, src: int, others: np.ndarray) -> list[tuple[float, int | None]]:
        """Per item, the best destination: (step after, rank), or (inf, None); ``others`` is
        ``_others_max(src, every rank)``. The items are scored at once, each row as alone."""
        world = len(self.load)
        dest = np.arange(world)
        hosts = dest // self.local
        hbm, ddr, cost = self.hbm[items], self.ddr[items], self.cost[items]
        ok = (dest != src)[None, :] & (self.free[None, :] >= hbm[:, None])
        ok &= (hosts == src // self.local)[None, :] | (self.free_ddr[hosts][None, :] >= ddr[:, None])
        for row, i in enumerate(items):  # pieces of one table on distinct ranks
            ok[row, self.rank[self._of_table[self.table[i]]]] = False
        after_src = self.load[src][None, :] - cost  # (items, phases)
        after_dest = self.load[None, :, :] + cost[:, None, :]  # (items, ranks, phases)
        peaks = np.maximum(np.maximum(others[None, :, :], after_src[:, None, :]), after_dest)
        scores = self.objective.score_rows(peaks.reshape(-1, peaks.shape[-1]), self.penalty)
        step = np.where(ok, scores.reshape(ok.shape), np.inf)
        best = np.argmin(step, axis=1)
        return [(float(step[row, d]), int(d)) if ok[row].any() else (np.inf, None)
                for row, d in enumerate(best.tolist())]

    def _swaps(self, items: np.ndarray, src: int, partners: np.ndarray, others: np.ndarray,
               src_tables: np.ndarray) -> list[tuple[float, int | None]]:
        """Per item, the best of ``partners`` to swap it with: (step after, item), or (inf, None);
        ``others`` is ``_others_max(src, the partners' ranks)``, ``src_tables`` the tables ``src``
        holds a piece of."""
        if not len(partners):
            return [(np.inf, None)] * len(items)
        dest, hbm, ddr, cost = self.rank[partners], self.hbm[partners], self.ddr[partners], self.cost[partners]
        i_hbm, i_ddr, i_cost = self.hbm[items][:, None], self.ddr[items][:, None], self.cost[items]
        ok = (dest != src)[None, :] & ~src_tables[self.table[partners]][None, :]  # src holds none of theirs
        ok = ok & (self.free[src] + i_hbm - hbm[None, :] >= 0) & (self.free[dest][None, :] + hbm[None, :] - i_hbm >= 0)
        src_host, hosts = src // self.local, dest // self.local
        cross = hosts != src_host
        ok &= ~cross[None, :] | ((self.free_ddr[src_host] + i_ddr - ddr[None, :] >= 0)
                                 & (self.free_ddr[hosts][None, :] + ddr[None, :] - i_ddr >= 0))
        for row, i in enumerate(items):  # nor the partner's rank any of item i's
            holds_i = np.zeros(len(self.load), dtype=bool)
            holds_i[self.rank[self._of_table[self.table[i]]]] = True
            ok[row] &= ~holds_i[dest]
        after_src = self.load[src][None, None, :] - i_cost[:, None, :] + cost[None, :, :]
        after_dest = self.load[dest][None, :, :] - cost[None, :, :] + i_cost[:, None, :]
        peaks = np.maximum(np.maximum(others[None, :, :], after_src), after_dest)
        scores = self.objective.score_rows(peaks.reshape(-1, peaks.shape[-1]), self.penalty)
        step = np.where(ok, scores.reshape(ok.shape), np.inf)
        best = np.argmin(step, axis=1)
        # partners are told from ranks by sign
        return [(float(step[row, j]), -1 - int(partners[j])) if ok[row].any() else (np.inf, None)
                for row, j in enumerate(best.tolist())]

    def _apply(self, i: int, partner: int) -> None:
        if partner >= 0:
            self._relocate(i, partner)
            return
        j = -1 - partner
        a, b = int(self.rank[i]), int(self.rank[j])
        self._relocate(i, b)
        self._relocate(j, a)

    def _relocate(self, i: int, dest: int) -> None:
        src = int(self.rank[i])
        self.load[src] -= self.cost[i]
        self.load[dest] += self.cost[i]
        self.free[src] += self.hbm[i]
        self.free[dest] -= self.hbm[i]
        self.free_ddr[src // self.local] += self.ddr[i]
        self.free_ddr[dest // self.local] -= self.ddr[i]
        self.rank[i] = dest

    def tables(self) -> tuple[TablePlan, ...]:
        out = list(self.plan)
        moved: dict[int, dict[int, int]] = {}
        for (ti, si), rank in zip(self.keys, self.rank):
            if int(rank) != out[ti].shards[si].rank:
                moved.setdefault(ti, {})[si] = int(rank)
        for ti, changes in moved.items():
            shards = tuple(replace(s, rank=changes.get(si, s.rank)) for si, s in enumerate(out[ti].shards))
            out[ti] = replace(out[ti], shards=shards)
        return tuple(out)
