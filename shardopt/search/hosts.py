"""Host-bound cuts (table-row-wise, table-column-wise): every piece of a table on one host's ranks.

The greedy weighs every host for each such table. At 4096 ranks (512 hosts, 620 table-row-wise
tables) a host at a time, in Python, was most of a plan's time; pieces in rank order are weighed
on every host at once instead, with each rank's overhead for the cut's kind kept in a vector (as
the free pieces' placement keeps it), the same sums in the same order, so the host chosen is too.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel, ShardCost
from shardopt.search.explain import Unplaceable
from shardopt.search.rules import RankGuard


def load_with(workload: Workload, model: CostModel, ranks, rank: int, kind: str, cost: ShardCost) -> float:
    """Rank ``rank``'s load with the piece on it, its kinds' overhead included."""
    kinds = set(ranks.kinds[rank]) | {kind}
    return ranks.load_ms[rank] + ranks.ms(cost, rank) + model.rank_overhead_ms(workload, kinds)


def roomiest(ranks) -> int:
    return int(np.argmax(ranks.free_bytes))  # the first of the roomiest


def place_host_bound(workload: Workload, model: CostModel, ranks, chosen, assigned, guard: RankGuard | None) -> None:
    """Host-bound pieces: the host whose ranks end least loaded, each piece on its least-loaded rank."""
    overheads: dict[str, np.ndarray] = {}  # per kind, each rank's overhead once it holds that kind
    for name, (cand, pcosts) in chosen.items():
        if cand.placement != "host":
            continue
        kind = cand.sharding_type
        if guard is None and kind == "table_row_wise" and len(pcosts) <= ranks.local:
            if kind not in overheads:
                overheads[kind] = ranks.overheads_with(workload, model, kind)
            best = _best_in_order(workload, ranks, pcosts, overheads[kind])
        else:
            best = _best_host(workload, model, ranks, cand, pcosts, guard.open_to(name) if guard is not None
                              else np.ones(workload.topology.world_size, dtype=bool))
        if best is None:
            rank = roomiest(ranks)
            raise Unplaceable(name, max(c.hbm_bytes for c in pcosts), rank, int(ranks.free_bytes[rank]))
        for rank, cost in zip(best[2], pcosts):
            take(workload, model, ranks, name, rank, kind, cost, guard, overheads)
        assigned[name] = best[2]


def take(workload: Workload, model: CostModel, ranks, name: str, rank: int, kind: str, cost: ShardCost,
         guard: RankGuard | None, overheads: dict[str, np.ndarray]) -> None:
    """Put a piece of ``name`` on ``rank``: its load, the rules' record and each kept overhead vector
    (per kind, each rank's overhead once it holds that kind) where the rank's kinds changed."""
    ranks.take(rank, kind, cost)
    if guard is not None:
        guard.took(name, rank)
    if ranks.kinds[rank][kind] == 1:  # the rank's kinds changed: so did its overheads
        for other, vector in overheads.items():
            vector[rank] = model.rank_overhead_ms(workload, set(+ranks.kinds[rank]) | {other})


def _best_host(workload, model, ranks, cand, pcosts, open_to) -> tuple[float, int, list[int]] | None:
    """(peak, host, ranks) of the first host whose ranks end least loaded, host by host."""
    topo, local = workload.topology, ranks.local
    best: tuple[float, int, list[int]] | None = None
    for host in range(topo.num_hosts):
        host_ranks = list(range(host * local, (host + 1) * local))
        in_order = cand.sharding_type == "table_row_wise"
        if not open_to[host_ranks].all() and (in_order or open_to[host_ranks].sum() < len(pcosts)):
            continue
        trial = fit_on(ranks, [r for r in host_ranks if open_to[r]] if not in_order else host_ranks, pcosts, in_order)
        if trial is None:
            continue
        peak = max(load_with(workload, model, ranks, r, cand.sharding_type, c) for r, c in zip(trial, pcosts))
        if best is None or peak < best[0]:
            best = (peak, host, trial)
    return best


def _best_in_order(workload, ranks, pcosts: Sequence[ShardCost], overhead: np.ndarray) -> tuple[float, int, list[int]] | None:
    """:func:`_best_host` for pieces in rank order (piece i on a host's rank i), every host at once:
    the same fits, the same peak per host and the first host of the least peak."""
    hosts = workload.topology.num_hosts
    grid = np.arange(hosts)[:, None] * ranks.local + np.arange(len(pcosts))  # host x piece -> rank
    fits = (ranks.free_bytes[grid] >= np.array([c.hbm_bytes for c in pcosts])).all(axis=1)
    fits &= ranks.free_ddr[:hosts] >= sum(c.ddr_bytes for c in pcosts)
    if not fits.any():
        return None
    loads = ranks.load_ms[grid] + np.stack([ranks.ms(c, grid[:, i]) for i, c in enumerate(pcosts)], axis=1)
    peaks = np.where(fits, np.max(loads + overhead[grid], axis=1), np.inf)
    host = int(np.argmin(peaks))  # the first of the least peak
    return float(peaks[host]), host, [int(r) for r in grid[host]]


def fit_on(ranks, host_ranks: list[int], pcosts: Sequence[ShardCost], in_order: bool) -> list[int] | None:
    """Ranks of one host for the pieces (piece i on rank i when ``in_order``), or None."""
    ddr = ranks.free_ddr[host_ranks[0] // ranks.local]
    if sum(c.ddr_bytes for c in pcosts) > ddr:
        return None
    if in_order:
        picked = host_ranks[: len(pcosts)]
        ok = all(c.hbm_bytes <= ranks.free_bytes[r] for r, c in zip(picked, pcosts))
        return picked if ok else None
    free = {r: ranks.free_bytes[r] for r in host_ranks}
    load = {r: ranks.load_ms[r] for r in host_ranks}
    picked = []
    for cost in pcosts:
        fits = [r for r in host_ranks if free[r] >= cost.hbm_bytes]
        if not fits:
            return None
        rank = min(fits, key=lambda r: (load[r], r))
        free[rank] -= cost.hbm_bytes
        load[rank] += cost.total_ms
        picked.append(rank)
    return picked
