"""A lower bound on the bottleneck rank's cost, valid for the candidate set.

Any plan picks one candidate per table, so the busy ranks together carry at least the sum of each
table's cheapest candidate, and some rank carries at least the largest piece of each table's
candidate whose largest piece is smallest. Every busy rank also pays the model's per-rank overhead
(kernel calls, collective latency), at least the cheapest kind's: with k busy ranks the most loaded
carries at least total/k + overhead, which is smallest at k = world size.

When the model reads a rank's communication off measured all-to-all curves (not additive), the
bound splits each rank's cost into compute (additive) and traffic: the ranks' mean traffic time is
at least the curves' convex minorant at the mean bytes, and the rank holding the largest piece
sends at least that piece's bytes.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from shardopt.costmodel.analytic import CommBytes, comm_bytes, shard_lookups
from shardopt.costmodel.base import CostModel, ShardCost
from shardopt.search.candidates import Candidate
from shardopt.workload import Workload


def balance_lower_bound(
    workload: Workload,
    cost_model: CostModel,
    candidates: Mapping[str, Sequence[Candidate]],
    piece_costs: Mapping[str, Sequence[Sequence[ShardCost]]],
) -> float:
    """``piece_costs[table][candidate][piece]`` matches ``candidates``; returns milliseconds."""
    world = workload.topology.world_size
    kinds = {c.sharding_type for per in candidates.values() for c in per}
    overhead = min(cost_model.rank_overhead_ms(workload, {kind}) for kind in kinds)
    floor = getattr(cost_model, "comm_floor_ms", None)
    if floor is not None and floor(workload, CommBytes()) is not None:
        return _curve_bound(workload, cost_model, candidates, piece_costs, overhead)
    total = 0.0
    largest = 0.0
    for per_candidate in piece_costs.values():
        total += min(sum(p.total_ms for p in pieces) for pieces in per_candidate)
        largest = max(largest, min(max(p.total_ms for p in pieces) for pieces in per_candidate))
    return max(total / world + overhead, largest + overhead)


def _curve_bound(workload, cost_model, candidates, piece_costs, overhead) -> float:
    world = workload.topology.world_size
    by_name = {t.name: t for t in workload.tables}
    compute = 0.0
    traffic = CommBytes()
    largest = 0.0
    # The overhead's share that is compute (kernel calls); its latency lives in the curves.
    kernel_overhead = min(
        cost_model.compute_overhead_ms(workload, {kind})
        for kind in {c.sharding_type for per in candidates.values() for c in per}
    )
    for name, per_candidate in piece_costs.items():
        table = by_name[name]
        cands = candidates[name]
        compute += min(sum(p.fwd_compute_ms + p.bwd_compute_ms for p in pieces) for pieces in per_candidate)
        sent = [
            [comm_bytes(workload, c.sharding_type, p.rows, p.cols,
                        shard_lookups(workload, table, c.sharding_type, p.rows)) for p in c.pieces]
            for c in cands
        ]
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
    return max(compute / world + kernel_overhead + floor, largest + kernel_overhead)
