"""What a search minimises: the bottleneck rank's total, or the critical path of a synchronous step.

A rank's cost has four phases: the input all-to-all (ids out, pooled embeddings back), the
lookups, the gradients' all-to-all (and replicas' all-reduce), and the backward lookups with the
fused update. Every all-to-all is a collective: no rank gets its inputs until the slowest rank has
sent them. So a training step takes about the sum over phases of the slowest rank in each phase
(TorchRec's planner estimates this "critical path" the same way, in its stats), not the slowest
rank's sum. The two differ when a plan trades compute on one rank against traffic on another: a
rank heavy in lookups and light in traffic looks balanced by its total, but the step still waits
for it in the lookup phase and for another rank in the all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

# One rank's milliseconds per phase, in this order.
PHASES = ("fwd_compute_ms", "fwd_comm_ms", "bwd_compute_ms", "bwd_comm_ms")
Phases = tuple[float, float, float, float]
ObjectiveName = Literal["critical-path", "bottleneck"]


def rank_phases(r) -> Phases:
    """A RankBreakdown (or ShardCost) as its four phases."""
    return (r.fwd_compute_ms, r.fwd_comm_ms, r.bwd_compute_ms, r.bwd_comm_ms)


def critical_path_ms(ranks: Sequence) -> float:
    """Sum over phases of the slowest rank in each, of RankBreakdowns."""
    return CRITICAL_PATH.score([rank_phases(r) for r in ranks])


@dataclass(frozen=True)
class Objective:
    name: ObjectiveName

    def score(self, ranks: Sequence[Phases]) -> float:
        if not ranks:
            return 0.0
        if self.name == "bottleneck":
            return max(sum(p) for p in ranks)
        return sum(max(p[i] for p in ranks) for i in range(len(PHASES)))

    def sources(self, ranks: Sequence[Phases]) -> list[tuple[int, Phases]]:
        """Ranks to move shards off, each with the weight of every phase in weighing its shards:
        the bottleneck rank, all phases alike; or each phase's slowest rank, its phases that are
        slowest. Heaviest first, each rank once."""
        world = range(len(ranks))
        if self.name == "bottleneck":
            worst = max(world, key=lambda r: (sum(ranks[r]), -r))
            return [(worst, (1.0,) * len(PHASES))]
        weights: dict[int, list[float]] = {}
        for i in range(len(PHASES)):
            slowest = max(world, key=lambda r: (ranks[r][i], -r))
            weights.setdefault(slowest, [0.0] * len(PHASES))[i] = 1.0
        order = sorted(weights, key=lambda r: (-sum(w * x for w, x in zip(weights[r], ranks[r])), r))
        return [(r, tuple(weights[r])) for r in order]


CRITICAL_PATH = Objective("critical-path")
BOTTLENECK = Objective("bottleneck")
OBJECTIVES = {o.name: o for o in (CRITICAL_PATH, BOTTLENECK)}
