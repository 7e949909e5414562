"""A lower bound on the bottleneck rank's cost, valid for the candidate set and an additive model.

Any plan picks one candidate per table, so the busy ranks together carry at least the sum of each
table's cheapest candidate, and some rank carries at least the largest piece of each table's
candidate whose largest piece is smallest. Every busy rank also pays the model's per-rank overhead
(kernel calls, collective latency), at least the cheapest kind's: with k busy ranks the most loaded
carries at least total/k + overhead, which is smallest at k = world size.
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
    for per_candidate in piece_costs.values():
        total += min(sum(p.total_ms for p in pieces) for pieces in per_candidate)
        largest = max(largest, min(max(p.total_ms for p in pieces) for pieces in per_candidate))
    return max(total / world + overhead, largest + overhead)
