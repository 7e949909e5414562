"""Compute-speed scenarios: plans that stay balanced when compute runs faster or slower, relative
to communication, than the cost model says.

A model's compute and communication are fitted apart (kernels from one profile, collectives from
another or from declared bandwidths), and the two drift apart in use: on the 2-core VM the bench
replays on, the fused kernels ran 1.05x to 1.5x the profile's time on different days while
replay's communication came from a fixed all-to-all profile. A plan balanced on compute plus
communication at the model's ratio alone can hide a rank heavy on compute behind light traffic;
when compute slows down that rank becomes the bottleneck. With a spread, the search minimises a
weighted sum of the bottlenecks at a few compute speeds: with room to spare it balances compute
and communication each, and at worst it trades a little of the model's own bottleneck for it.

It is off by default because on the bench's training tasks it did not pay: with the machine near
the profile's speed, spreads of 0 / 0.25 / 0.5 replayed at 0.832 / 0.834 / 0.842 of TorchRec's
bottleneck (``benchmarks/planner_ab.py spread:0 spread:0.25 spread:0.5``, 14 tasks, one run), the
model's own bottleneck being 0.6% / 0.8% worse for the hedge. It is for users who know their compute and
communication costs are calibrated apart and drift (a cluster profile from another day, declared
bandwidths).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

DEFAULT_SPREAD = 0.0  # the model's speeds alone (see above)


@dataclass(frozen=True)
class SpeedScenarios:
    """Compute-time factors and their weights; the plan's score is the weighted bottleneck."""

    factors: tuple[float, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.factors) != len(self.weights) or not self.factors:
            raise ValueError("speed scenarios need one weight per factor")
        if min(self.factors) <= 0 or min(self.weights) <= 0:
            raise ValueError("speed factors and weights must be positive")
        if abs(sum(self.weights) - 1) > 1e-9:
            raise ValueError("speed scenario weights must add up to 1")

    @classmethod
    def spread(cls, spread: float) -> "SpeedScenarios":
        """Compute ``1 + spread`` times faster, as the model says, and ``1 + spread`` times slower,
        weighted 1:2:1; a spread of 0 is the model's speeds alone."""
        if spread < 0:
            raise ValueError(f"speed spread must be >= 0, got {spread}")
        if spread == 0:
            return NOMINAL
        return cls((1 / (1 + spread), 1.0, 1 + spread), (0.25, 0.5, 0.25))

    @property
    def nominal(self) -> bool:
        return self.factors == (1.0,)

    def score(self, ranks: Sequence[tuple[float, float]]) -> float:
        """The weighted bottleneck of ranks given as (compute ms, communication ms)."""
        return sum(
            w * max((k * c + m for c, m in ranks), default=0.0)
            for k, w in zip(self.factors, self.weights)
        )

    def bottlenecks(self, ranks: Sequence[tuple[float, float]]) -> list[tuple[int, float]]:
        """(rank, factor) of each scenario's bottleneck, the model's own speed first, each rank once."""
        order = sorted(range(len(self.factors)), key=lambda i: (self.factors[i] != 1.0, i))
        out: list[tuple[int, float]] = []
        for i in order:
            k = self.factors[i]
            rank = max(range(len(ranks)), key=lambda r: (k * ranks[r][0] + ranks[r][1], -r))
            if all(rank != seen for seen, _ in out):
                out.append((rank, k))
        return out


NOMINAL = SpeedScenarios((1.0,), (1.0,))
