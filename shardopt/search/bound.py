"""A lower bound on the bottleneck rank's cost, valid for the candidate set and an additive model.

Any plan picks one candidate per table, so the ranks together carry at least the sum of each
table's cheapest candidate, and some rank carries at least the largest piece of each table's
candidate whose largest piece is smallest. Every rank that holds a shard also pays the model's
per-rank overhead (kernel calls, collective latency), at least the cheapest kind's.
"""

from __future__ import annotations

from typing import Mapping, Sequence

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
    total = 0.0
    largest = 0.0
    busy_ranks = 1  # ranks that surely hold a shard: all of a fixed cut's ranks
    for name, per_candidate in piece_costs.items():
        total += min(sum(p.total_ms for p in pieces) for pieces in per_candidate)
        largest = max(largest, min(max(p.total_ms for p in pieces) for pieces in per_candidate))
        busy_ranks = max(
            busy_ranks,
            min(len(c.pieces) if c.placement == "fixed" else 1 for c in candidates[name]),
        )
    busy_ranks = min(busy_ranks, world)
    return max((total + busy_ranks * overhead) / world, largest + overhead)
