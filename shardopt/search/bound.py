"""A lower bound on the bottleneck rank's cost, valid for any plan the tables' sharding types allow.

The offered candidates are joined by each table's finest cuts (row-wise over every rank, the
narrowest columns, replicas), so a gap is a gap to what is possible. Any plan picks one cut per table, so the busy ranks together carry at least the sum of each
table's cheapest candidate, and some rank carries at least the largest piece of each table's
candidate whose largest piece is smallest. Every busy rank also pays the model's per-rank overhead
(kernel calls, collective latency), at least the cheapest kind's: with k busy ranks the most loaded
carries at least total/k + overhead, which is smallest at k = world size.

A model whose shard costs depend on the rank's other shards (a shared cache) prices each piece
for the bound by its floor, the piece with the caches to itself.

When the model reads a rank's communication off measured all-to-all curves (not additive), the
bound splits each rank's cost into compute (additive) and traffic: the ranks' mean traffic time is
at least the curves' convex minorant at the mean bytes, and the rank holding the largest piece
sends at least that piece's bytes.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from shardopt.arithmetic.traffic import CommBytes, comm_bytes, shard_lookups
from shardopt.costmodel.base import CostModel, ShardCost
from shardopt.contracts import ShardSpec
from shardopt.search.candidates import Candidate, finest_cuts, piece_costs as costs_of, split_evenly, whole_row_cut
from shardopt.core.workload import Workload
from shardopt.search.shared import shared


def balance_lower_bound(
    workload: Workload,
    cost_model: CostModel,
    candidates: Mapping[str, Sequence[Candidate]],
    piece_costs: Mapping[str, Sequence[Sequence[ShardCost]]],
    possible: bool = False,
) -> float:
    """``piece_costs[table][candidate][piece]`` matches ``candidates``; returns milliseconds
    (computed once per set of candidates, workload and model)."""
    key = ("bound", id(candidates), id(piece_costs), possible)
    held = shared(cost_model, workload, key, lambda: (candidates, piece_costs, _bound(
        workload, cost_model, candidates, piece_costs, possible)))
    if held[0] is candidates and held[1] is piece_costs:
        return held[2]
    return _bound(workload, cost_model, candidates, piece_costs, possible)  # ids of objects gone


def _bound(
    workload: Workload,
    cost_model: CostModel,
    candidates: Mapping[str, Sequence[Candidate]],
    piece_costs: Mapping[str, Sequence[Sequence[ShardCost]]],
    possible: bool,
) -> float:
    """``piece_costs[table][candidate][piece]`` matches ``candidates``; returns milliseconds.

    With ``possible``, each table's finest cuts join the offered ones, so the bound speaks of
    what is possible (what a plan reports); without, of what was offered (what tells a search
    it can stop).
    """
    curves = cost_model.comm_floor_ms(workload, CommBytes()) is not None
    floor = cost_model.floor_below_cost  # the search priced shards on an average rank; a bound adds floors
    if possible:
        candidates, piece_costs = _with_finest(workload, cost_model, candidates, piece_costs, whole_rows=curves,
                                               floor=floor)
    if floor:
        piece_costs = {
            name: [_floor_costs(workload, cost_model, c) for c in candidates[name]]
            for name in piece_costs
        }
    world = workload.topology.world_size
    kinds = {c.sharding_type for per in candidates.values() for c in per}
    if curves:
        overhead = min(cost_model.rank_overhead_ms(workload, {kind}) for kind in kinds)
        return _curve_bound(workload, cost_model, candidates, piece_costs, overhead)
    total = 0.0
    largest = 0.0
    for name, per_candidate in piece_costs.items():
        cuts = [_sum_and_largest(pieces) for pieces in per_candidate]
        if possible and (whole := _row_wise_everywhere(workload, cost_model, workload.table(name), floor)):
            cuts.append(whole)
            kinds.add("row_wise")
        total += min(c[0] for c in cuts)
        largest = max(largest, min(c[1] for c in cuts))
    overhead = min(cost_model.rank_overhead_ms(workload, {kind}) for kind in kinds)
    return max(total / world + overhead, largest + overhead)


def _floor_costs(workload, cost_model, cand: Candidate) -> list[ShardCost]:
    """The candidate's floor costs, once per plan: a search asks for the bound over the offered
    cuts and over every cut (5000 tables x 1024 ranks: 8 s of floors priced twice). Kept with the
    plan's other shared work on the model (the candidate beside its costs, so its id cannot be
    reused while the entry lives), not in a module global, which kept the last plan's whole search
    (640 MB at 800 tables x 4096 ranks) alive in a planner plugin's training process."""
    memo = shared(cost_model, workload, ("floors",), dict)
    hit = memo.get(id(cand))
    if hit is None or hit[0] is not cand:
        hit = memo[id(cand)] = (cand, costs_of(workload, cost_model, cand, floor=True))
    return hit[1]


def _sum_and_largest(pieces: Sequence[ShardCost]) -> tuple[float, float]:
    """(sum, largest) of the pieces' totals, each distinct cost priced once: the pieces of a cut
    share a few cost objects (one per shape), and 5000 tables x 1024 ranks summed 57 million."""
    if len(pieces) == 1:  # most candidates: a whole table
        total = pieces[0].total_ms
        return total, total
    counts = Counter(map(id, pieces))
    if len(counts) == len(pieces):
        totals = [p.total_ms for p in pieces]
        return sum(totals), max(totals)
    first = dict(zip(map(id, pieces), pieces))
    totals = {key: first[key].total_ms for key in counts}
    return sum(totals[key] * n for key, n in counts.items()), max(totals.values())


def _with_finest(workload, cost_model, candidates, piece_costs, whole_rows: bool = True, floor: bool = False):
    """The offered candidates plus each table's finest cuts (:func:`finest_cuts`), with costs (with
    ``floor``, the added cuts' floors: the bound reads nothing else); without ``whole_rows``, less
    the row-wise cut over every rank (:func:`_row_wise_everywhere`)."""
    out_c, out_p = {}, {}
    for table in workload.tables:
        cands, costs = list(candidates[table.name]), list(piece_costs[table.name])
        for cut in finest_cuts(workload, table, whole_rows=whole_rows):
            if cut not in cands:
                cands.append(cut)
                costs.append(_floor_costs(workload, cost_model, cut) if floor else costs_of(workload, cost_model, cut))
        out_c[table.name], out_p[table.name] = cands, costs
    return out_c, out_p


def _row_wise_everywhere(workload, cost_model, table, floor: bool) -> tuple[float, float] | None:
    """(sum, largest) of the row-wise cut over every rank, priced by its two piece shapes: at
    5000 tables x 1024 ranks, its five million pieces were most of a plan's time."""
    cut = whole_row_cut(workload, table)
    if cut is None:
        return None
    cost = cost_model.shard_floor if floor else cost_model.shard_cost
    sizes = Counter(split_evenly(table.num_embeddings, cut))
    costs = {rows: cost(workload, ShardSpec(table, "row_wise", rows, table.embedding_dim)).total_ms
             for rows in sizes}
    return sum(costs[r] * n for r, n in sizes.items()), max(costs.values())


def _curve_bound(workload, cost_model, candidates, piece_costs, overhead) -> float:
    world = workload.topology.world_size
    compute = 0.0
    traffic = CommBytes()
    largest = 0.0
    # The overhead's share that is compute (kernel calls); its latency lives in the curves.
    kernel_overhead = min(
        cost_model.compute_overhead_ms(workload, {kind})
        for kind in {c.sharding_type for per in candidates.values() for c in per}
    )
    for name, per_candidate in piece_costs.items():
        table = workload.table(name)
        cands = candidates[name]
        compute += min(sum(p.fwd_compute_ms + p.bwd_compute_ms for p in pieces) for pieces in per_candidate)
        sent = [piece_bytes(workload, table, c) for c in cands]
        # The least bytes any cut of this table sends, by collective (each a valid floor).
        traffic = traffic + CommBytes(
            ids=min(sum(b.ids for b in per) for per in sent),
            pooled=min(sum(b.pooled for b in per) for per in sent),
            host_local=min(sum(b.host_local for b in per) for per in sent),
            allreduce=min(sum(b.allreduce for b in per) for per in sent),
        )
        largest = max(largest, min(
            max(p.fwd_compute_ms + p.bwd_compute_ms + cost_model.comm_floor_ms(workload, b)
                for p, b in zip(pieces, per))
            for pieces, per in zip(per_candidate, sent)
        ))
    # The mean over the k busy ranks is at least compute/k + floor(bytes/k), no less than at
    # k = W. Without replicas, every busy rank sends, so its floor starts at the latency.
    replicas = any(c.sharding_type == "data_parallel" for per in candidates.values() for c in per)
    floor = cost_model.comm_floor_ms(workload, traffic.scaled(1 / world), every_rank_sends=not replicas)
    separate = compute / world + kernel_overhead + floor
    joint = _joint_bound(workload, cost_model, candidates, piece_costs, not replicas)
    return max(separate, joint + kernel_overhead, largest + kernel_overhead)


# A rank's comm is g_even(ids) + 2 g_pooled(pooled) + 2 g_even(all-reduce share): weights per term.
_TERMS = (("even", 1.0, True), ("pooled", 2.0, True), ("even", 2.0, False))


def _joint_bound(workload, cost_model, candidates, piece_costs, busy_send) -> float:
    """Compute and traffic of one cut per table, priced together through tangents of the curves.

    With m_i the convex minorants, m_i(y) >= m_i(y0) + s_i (y - y0) for a tangent at y0, so the
    ranks' mean cost is at least sum over tables of min over cuts of (compute + sum_i w_i s_i
    bytes_i) / W plus a constant: separable, hence exact to minimise. A few tangent points are
    tried (the least-bytes cuts', then the minimiser's own), and the best bound is kept.
    """
    curves = cost_model.comm_curves(workload)
    world = workload.topology.world_size
    rows = []  # per table: [(compute ms, (ids, pooled, all-reduce share) bytes), ...] per cut
    for name, per_candidate in piece_costs.items():
        table = workload.table(name)
        cuts = []
        for cand, pieces in zip(candidates[name], per_candidate):
            sent = [collective_bytes(b, world) for b in piece_bytes(workload, table, cand)]
            compute = sum(p.fwd_compute_ms + p.bwd_compute_ms for p in pieces)
            cuts.append((compute, tuple(sum(b[i] for b in sent) for i in range(3))))
        rows.append(cuts)

    def minorant(i: int, y: float) -> float:
        pattern, _, sends = _TERMS[i]
        return curves.convex_minorant(world, pattern, y, sends and busy_send) * 1e3

    anchor = [sum(min(c[1][i] for c in cuts) for cuts in rows) / world for i in range(3)]
    best = 0.0
    for _ in range(4):
        slopes, const = [], 0.0
        for i, (_, weight, _) in enumerate(_TERMS):
            y0 = max(anchor[i], 1.0)
            slope = (minorant(i, y0 * 1.001) - minorant(i, y0)) / (0.001 * y0)
            slopes.append(weight * slope)
            const += weight * (minorant(i, y0) - slope * y0)
        total, used = 0.0, [0.0, 0.0, 0.0]
        for cuts in rows:
            price, pick = min((c[0] + sum(s * b for s, b in zip(slopes, c[1])), c) for c in cuts)
            total += price
            used = [u + b for u, b in zip(used, pick[1])]
        best = max(best, total / world + const)
        anchor = [u / world for u in used]
    return best


def collective_bytes(sent: CommBytes, world: int) -> tuple[float, float, float]:
    """(ids, pooled, all-reduce share): the bytes a rank puts into each curve replay reads."""
    return sent.ids, sent.pooled + sent.host_local, sent.allreduce * (world - 1) / world


def piece_bytes(workload: Workload, table, cand: Candidate) -> list[CommBytes]:
    """What each piece's rank sends for it (a hot-row cut: its cold rows plus the replica's share)."""
    owner, extra = table, CommBytes()
    if cand.replicated_rows:
        from shardopt.arithmetic.hotrows import split_table

        hot, owner = split_table(table, cand.replicated_rows)
        extra = comm_bytes(workload, "data_parallel", hot.num_embeddings, table.embedding_dim, 0.0)
    return [
        comm_bytes(workload, cand.sharding_type, p.rows, p.cols,
                   shard_lookups(workload, owner, cand.sharding_type, p.rows), len(table.features),
                   table.pooled) + extra
        for p in cand.pieces
    ]
