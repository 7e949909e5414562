"""Moves under a byte budget: the descent that spends a re-shard's budget where it buys most step.

Each step tries every movable piece on every rank it may go to (vectorised over ranks, on rank
loads added up from shard costs) and takes the move that lowers the step most per byte it costs,
free moves first. Where several ranks tie at a phase's peak (the old ranks of a grown world), no
one move lowers the step: then the move that evens the rank loads most per byte is taken. It stops
when no move helps, the budget is spent, or its trials (counted, so the same input gives the same
plan) run out.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from shardopt.arithmetic.memory import shard_memory
from shardopt.contracts import Objective, ShardSpec, rank_phases
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.search.repair import movable

_EPS = 1e-9
# An evening move must even the squared rank totals by at least this much per byte moved (1 ms^2
# per GB), so that moves that even nothing measurable spend no bytes.
EVEN_PER_BYTE = 1e-9


class _Pieces:
    """Every piece with its phases, memory, where it may go and what moving it costs per rank."""

    def __init__(self, workload: Workload, cost_model: CostModel, tables: Sequence[TablePlan],
                 shard_bytes: Callable[[str, Shard], np.ndarray]) -> None:
        topo = workload.topology
        world = topo.world_size
        self.plan = [list(tp.shards) for tp in tables]
        self.items = []  # (table, shard, phases, hbm bytes, allowed ranks mask, bytes to each rank)
        self.load, self.hbm = np.zeros((world, 4)), np.zeros(world)
        for ti, tp in enumerate(tables):
            where = movable(workload, tp)
            for si, shard in enumerate(tp.shards):
                spec = ShardSpec.placed(workload.table(tp.name), tp, shard)
                phases = np.array(rank_phases(cost_model.shard_cost(workload, spec)))
                size = shard_memory(workload.optimizer, spec).hbm_bytes
                self.load[shard.rank] += phases
                self.hbm[shard.rank] += size
                if where is None:
                    continue
                allowed = np.ones(world, dtype=bool)
                if where == "host":
                    allowed[:] = [topo.host_of(r) == topo.host_of(shard.rank) for r in range(world)]
                cost = shard_bytes(tp.name, shard)
                self.items.append((ti, si, phases, size, allowed, cost))


def _scores(load: np.ndarray, totals: np.ndarray, spread: float, src: int, phases: np.ndarray,
            critical: bool) -> tuple[np.ndarray, np.ndarray]:
    """The step and the sum of squared rank totals if the piece left ``src`` for each rank
    (``totals``: each rank's summed phases; ``spread``: the sum of their squares, now)."""
    m = load.copy()
    m[src] -= phases
    p = phases.sum()
    moved_spread = spread - totals[src] ** 2 + (totals[src] - p) ** 2
    new_spread = moved_spread - totals ** 2 + (totals + p) ** 2
    if critical:
        order = np.argsort(-m, axis=0)
        top, second = m[order[0], range(4)], m[order[1], range(4)] if len(m) > 1 else np.zeros(4)
        others = np.where(np.arange(len(m))[:, None] == order[0][None, :], second[None, :], top[None, :])
        steps = np.maximum(others, m + phases).sum(axis=1)
    else:
        t = m.sum(axis=1)
        order = np.argsort(-t)
        others = np.where(np.arange(len(m)) == order[0], t[order[1]] if len(t) > 1 else 0.0, t[order[0]])
        steps = np.maximum(others, t + p)
    new_spread[src] = spread
    return steps, new_spread


def budget_descent(workload: Workload, cost_model: CostModel, tables: Sequence[TablePlan], objective: Objective,
                   shard_bytes: Callable[[str, Shard], np.ndarray], budget: int, trials: int = 200_000,
                   max_moves: int | None = None) -> tuple[TablePlan, ...]:
    """``tables`` with pieces moved, at most ``budget`` more bytes in all (see the module);
    ``shard_bytes(table, shard)``: the bytes the piece would cost on each rank; ``max_moves`` caps
    the moves (for tests that follow it step by step)."""
    state = _Pieces(workload, cost_model, tables, shard_bytes)
    critical = objective.name == "critical-path"
    cap = np.array(workload.topology.rank_caps, dtype=np.int64)
    spent = moves = 0
    while spent < trials and (max_moves is None or moves < max_moves):
        moves += 1
        load = state.load
        totals = load.sum(axis=1)
        now = float(load.max(axis=0).sum() if critical else totals.max())
        spread = float((totals ** 2).sum())
        best, best_key = None, (0.0, 0.0)
        for index, (ti, si, phases, size, allowed, cost) in enumerate(state.items):
            shard = state.plan[ti][si]
            src = shard.rank
            ok = allowed & (state.hbm + size <= cap)
            ok[src] = False
            ok[[s.rank for j, s in enumerate(state.plan[ti]) if j != si]] = False
            extra = cost - cost[src]
            ok &= extra <= budget
            if not ok.any():
                continue
            spent += int(ok.sum())
            steps, spreads = _scores(load, totals, spread, src, phases, critical)
            per_byte = 1.0 / np.maximum(extra, 1.0)
            gain = now - steps
            evened = (spread - spreads) * per_byte
            first = np.where(gain > _EPS, gain * per_byte, 0.0)
            second = np.where((gain > -_EPS) & (gain <= _EPS) & (evened > EVEN_PER_BYTE), evened, 0.0)
            for key_values in (first, second):
                masked = np.where(ok, key_values, 0.0)
                dest = int(np.argmax(masked))
                if masked[dest] > 0:
                    key = (float(masked[dest]), 0.0) if key_values is first else (0.0, float(masked[dest]))
                    if key > best_key:
                        best, best_key = (index, dest, int(extra[dest])), key
                    break
        if best is None:
            break
        index, dest, extra = best
        ti, si, phases, size, _, _ = state.items[index]
        src = state.plan[ti][si].rank
        state.load[src] -= phases
        state.load[dest] += phases
        state.hbm[src] -= size
        state.hbm[dest] += size
        state.plan[ti][si] = Shard(rank=dest, offsets=state.plan[ti][si].offsets, sizes=state.plan[ti][si].sizes)
        budget -= extra
    return tuple(TablePlan(name=tp.name, sharding_type=tp.sharding_type, shards=tuple(state.plan[ti]),
                           compute_kernel=tp.compute_kernel, cache_load_factor=tp.cache_load_factor,
                           replicated_rows=tp.replicated_rows) for ti, tp in enumerate(tables))
