"""Ranks alike in make-up: the robust search's last step.

On a machine the model never saw, its error per table is large (34-47% log-sd on one CPU) and
leans with the tables' shapes (``benchmarks/table_error.py``); a plan balanced on the model's
figures then leaves one rank slow, whichever way the error leans. Ranks that hold the same mix of
shapes stay level under such an error. So, under a robust objective that carries shape variants of
the model (:func:`shardopt.costmodel.uncertainty.makeup_variants`), pieces are moved and swapped
between ranks while that lowers the objective's mean over the nominal model and its variants.
Rank loads are added up from shard costs (as in ``descent.py``); trials are counted, so the same
input gives the same plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from shardopt.arithmetic.memory import shard_memory
from shardopt.contracts import COMPUTE, ROBUST_TIE, RobustObjective, ShardSpec, rank_phases
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.table_factors import base_name
from shardopt.costmodel.uncertainty import plan_penalty
from shardopt.search.repair import movable

# Exchanges scored (candidates x partners x variants x phases), counted so the same input gives
# the same plan: 40 tables on 4 ranks settle in a small part of it, 1000 tables on 128 ranks take
# about ten steps in it (0.4 s on a slow 2-core machine), and at 5000 x 1024 one step would not fit.
TRIALS = 10_000_000
CHUNK = 2_000_000  # exchanges (x phases) scored at once: memory stays in tens of MB
_REL_EPS = 1e-9
EVEN_EPS = 1e-9  # an evening exchange must lower the summed squared loads by this much (relative)


class _Pieces:
    """Every movable piece: its lookups in each variant, its all-to-alls, memory, rank, table and
    where it may go; and each rank's loads."""

    def __init__(self, workload: Workload, model: CostModel, tables: Sequence[TablePlan],
                 objective: RobustObjective) -> None:
        topo = workload.topology
        tilt = dict(objective.makeup)
        variants = 1 + len(next(iter(tilt.values())))
        self.world = topo.world_size
        self.compute = np.zeros((self.world, variants, 2))  # each rank's lookups, per variant
        self.comm = np.zeros((self.world, 2))
        self.hbm = np.zeros(self.world)
        self.host = np.array([topo.host_of(r) for r in range(self.world)])
        self.holds = np.zeros((len(tables), self.world), dtype=np.int64)
        self.index: list[tuple[int, int]] = []
        lookups, comm, sizes, ranks, owner, host_only = [], [], [], [], [], []
        for ti, tp in enumerate(tables):
            where = movable(workload, tp)
            factors = np.array([1.0, *tilt.get(base_name(tp.name), (1.0,) * (variants - 1))])
            for si, shard in enumerate(tp.shards):
                spec = ShardSpec.placed(workload.table(tp.name), tp, shard)
                phases = rank_phases(model.shard_cost(workload, spec))
                varied = factors[:, None] * np.array([phases[i] for i in COMPUTE])[None, :]
                own_comm = np.array([phases[i] for i in range(4) if i not in COMPUTE])
                memory = shard_memory(workload.optimizer, spec)
                self.compute[shard.rank] += varied
                self.comm[shard.rank] += own_comm
                self.hbm[shard.rank] += memory.hbm_bytes
                self.holds[ti, shard.rank] += 1
                if where is None:
                    continue
                self.index.append((ti, si))
                lookups.append(varied)
                comm.append(own_comm)
                sizes.append(memory.hbm_bytes)
                ranks.append(shard.rank)
                owner.append(ti)
                # Across hosts a piece's all-to-alls change in ways its own cost does not add up
                # (measured: the slow-link tasks lost 2-5%), and host memory stays on its host.
                host_only.append(where == "host" or memory.ddr_bytes > 0 or topo.num_hosts > 1)
        self.piece_compute = np.array(lookups).reshape(len(self.index), variants, 2)
        self.piece_comm = np.array(comm).reshape(len(self.index), 2)
        self.size = np.array(sizes, dtype=np.float64)
        self.rank = np.array(ranks, dtype=np.int64)
        self.owner = np.array(owner, dtype=np.int64)
        self.host_only = np.array(host_only, dtype=bool)
        self.cap = np.array(topo.rank_caps, dtype=np.float64)

    def relocate(self, p: int, dest: int) -> None:
        src = self.rank[p]
        for load, piece in ((self.compute, self.piece_compute[p]), (self.comm, self.piece_comm[p])):
            load[src] -= piece
            load[dest] += piece
        self.hbm[src] -= self.size[p]
        self.hbm[dest] += self.size[p]
        self.holds[self.owner[p], src] -= 1
        self.holds[self.owner[p], dest] += 1
        self.rank[p] = dest


def _mean_score(objective: RobustObjective, penalty: float, compute: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """The objective's score of each column of peaks, averaged over the variants: ``compute`` the
    lookups' two peaks (variants, 2, ...), ``comm`` the all-to-alls' (2, ...), alike in every
    variant. Elementwise only (no reductions whose order a CPU's vector unit picks), so the same
    plan comes out on every CPU."""
    comm_ms = comm[0] + comm[1]
    total = np.zeros(comm_ms.shape)
    for v in range(compute.shape[0]):
        lookups = compute[v, 0] + compute[v, 1]
        worst = None
        for a, b in objective.factors():
            value = a * (lookups + penalty) + b * comm_ms
            worst = value if worst is None else np.maximum(worst, value)
        total = total + worst + ROBUST_TIE * (lookups + comm_ms)
    return total / compute.shape[0]


def _score_now(s: _Pieces, objective: RobustObjective, penalty: float) -> float:
    return float(_mean_score(objective, penalty, s.compute.max(axis=0), s.comm.max(axis=0)))


def _others(load: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per (a, b) pair, each column's largest load on a rank that is neither: ``load`` (W, ...)
    -> (..., len(a), len(b)), from the three heaviest ranks. Where there are fewer rank pairs
    than (a, b) pairs, chosen per rank pair and gathered (the same values: no arithmetic)."""
    top = min(3, load.shape[0])
    order = np.argsort(-load, axis=0, kind="stable")[:top]
    values = np.take_along_axis(load, order, axis=0)
    world = load.shape[0]
    if world * world < len(a) * len(b):
        ranks = np.arange(world)
        pairs = _chosen(order, values, ranks, ranks).reshape(*load.shape[1:], world * world)
        return np.take(pairs, a[:, None] * world + b[None, :], axis=-1)  # one gather per column
    return _chosen(order, values, a, b)


def _chosen(order: np.ndarray, values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    extra = (None,) * (order.ndim - 1)
    out = np.zeros((*order.shape[1:], len(a), len(b)))
    for k in range(len(order) - 1, -1, -1):
        rank_k = order[k][..., None, None]
        free = (rank_k != a[(*extra, slice(None), None)]) & (rank_k != b[(*extra, None, slice(None))])
        out = np.where(free, values[k][..., None, None], out)
    return out


def _exchanged(load: np.ndarray, pieces: np.ndarray, rank: np.ndarray, cands: np.ndarray,
               part_rank: np.ndarray) -> tuple[np.ndarray, ...]:
    """A candidate's rank and its partner's after each exchange, and before, as (..., candidate,
    partner) arrays: columns last, so each column's rows are one block."""
    columns = tuple(range(1, pieces.ndim))

    def last(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.transpose(*columns, 0))

    mine = last(pieces[cands])[..., :, None]
    theirs = last(np.concatenate([pieces, np.zeros((len(load), *pieces.shape[1:]))]))[..., None, :]
    was_a = last(load[rank[cands]])[..., :, None]
    was_b = last(load[part_rank])[..., None, :]
    return np.add(was_a - mine, theirs), np.add(was_b - theirs, mine), was_a, was_b


def _best_steps(s: _Pieces, objective: RobustObjective, penalty: float, now: float,
                cands: np.ndarray) -> tuple[int, float, int, int]:
    """The best exchange of a candidate piece with a partner on another rank: a piece (a swap) or
    nothing (partner ``-1 - rank``: a move there). As (kind, value, candidate, partner): kind 0
    lowers the score (value: the score), kind 1 keeps it and evens the ranks (value: the change in
    their summed squared loads; where several ranks tie at a peak no one exchange lowers it), 2
    none.

    The candidate's rank and the partner's take the exchanged loads; every other rank keeps its
    own, so each phase's peak is the largest of the three heaviest ranks that are neither."""
    world, count = s.world, len(s.index)
    part_rank = np.concatenate([s.rank, np.arange(world)])  # pieces, then an empty slot per rank
    part_owner = np.concatenate([s.owner, np.full(world, -1)])
    part_size = np.concatenate([s.size, np.zeros(world)])
    part_host_only = np.concatenate([s.host_only, np.zeros(world, dtype=bool)])
    a, b = s.rank[cands][:, None], part_rank[None, :]
    owner = s.owner[cands][:, None]
    ok = (a != b) & (part_owner[None, :] != owner) & (s.holds[owner, b] == 0)
    ok &= np.where(part_owner[None, :] >= 0, s.holds[np.maximum(part_owner, 0)[None, :], a], 0) == 0
    size = s.size[cands][:, None]
    ok &= (s.hbm[a] - size + part_size[None, :] <= s.cap[a]) & (s.hbm[b] - part_size[None, :] + size <= s.cap[b])
    ok &= ~(part_host_only[None, :] | s.host_only[cands][:, None]) | (s.host[b] == s.host[a])
    if not ok.any():
        return 2, 0.0, -1, -1
    peaks, exchanged = [], []
    for load, pieces in ((s.compute, s.piece_compute), (s.comm, s.piece_comm)):
        at_a, at_b, was_a, was_b = _exchanged(load, pieces, s.rank, cands, part_rank)
        larger = np.maximum(at_a, at_b)
        peaks.append(np.maximum(_others(load, s.rank[cands], part_rank), larger, out=larger))
        exchanged.append((at_a, at_b, was_a, was_b))
    scores = np.where(ok, _mean_score(objective, penalty, *peaks), np.inf)
    c, q = np.unravel_index(int(np.argmin(scores)), scores.shape)
    kind, value = 0, float(scores[c, q])
    if not value < now * (1 - _REL_EPS):  # no exchange lowers the score: the one that evens most
        evened = np.zeros(ok.shape)
        for at_a, at_b, was_a, was_b in exchanged:
            change = at_a * at_a + at_b * at_b - was_a * was_a - was_b * was_b
            for index in np.ndindex(*change.shape[:-2]):  # summed in a fixed order: alike on every CPU
                evened = evened + change[index]
        evened = np.where(ok & (scores <= now * (1 + _REL_EPS)), evened, np.inf)
        c, q = np.unravel_index(int(np.argmin(evened)), evened.shape)
        kind, value = (1, float(evened[c, q])) if evened[c, q] < -EVEN_EPS * now * now else (2, 0.0)
    return kind, value, int(cands[c]), int(q) if q < count else -1 - int(q - count)


def _peak_pieces(s: _Pieces) -> np.ndarray:
    """The pieces on a rank that sets some phase's peak in some variant: only moving one of them
    can lower a peak (a swap with any other piece is that piece's swap too)."""
    peaks = np.concatenate([s.compute.argmax(axis=0).ravel(), s.comm.argmax(axis=0)])
    return np.flatnonzero(np.isin(s.rank, np.unique(peaks)))


def even_makeup(workload: Workload, model: CostModel, tables: Sequence[TablePlan], objective,
                trials: int = TRIALS) -> tuple[tuple[TablePlan, ...], int]:
    """``tables`` with pieces moved or swapped while the mean over the objective's variants drops
    (see the module), and the moves made; unchanged without variants or on ranks unlike each other
    (a piece's cost there depends on its rank). Each step takes the best move or swap of a piece
    on a peak rank."""
    if not isinstance(objective, RobustObjective) or not objective.makeup or not workload.topology.uniform:
        return tuple(tables), 0
    s = _Pieces(workload, model, tables, objective)
    if not s.index or s.world < 2:
        return tuple(tables), 0
    penalty = plan_penalty(objective, workload, model, tables)  # moves change no cut
    now = _score_now(s, objective, penalty)
    spent = moves = 0
    per_candidate = (len(s.index) + s.world) * (s.compute.shape[1] + 1) * 2
    chunk = max(1, CHUNK // per_candidate)
    while spent < trials:
        cands = _peak_pieces(s)
        if spent + len(cands) * per_candidate > trials:
            break  # a step not finished within the count is not begun
        best = (2, 0.0, -1, -1)
        for start in range(0, len(cands), chunk):
            spent += len(cands[start:start + chunk]) * per_candidate
            best = min(best, _best_steps(s, objective, penalty, now, cands[start:start + chunk]))
        kind, _, p, q = best
        if kind == 2:
            break
        if q < 0:
            s.relocate(p, -1 - q)
        else:
            a, b = s.rank[p], s.rank[q]
            s.relocate(p, b)
            s.relocate(q, a)
        now = _score_now(s, objective, penalty)
        moves += 1
    placed = [list(tp.shards) for tp in tables]
    for (ti, si), rank in zip(s.index, s.rank):
        old = placed[ti][si]
        placed[ti][si] = Shard(rank=int(rank), offsets=old.offsets, sizes=old.sizes)
    return tuple(replace(tp, shards=tuple(placed[ti])) for ti, tp in enumerate(tables)), moves
