"""Measured all-to-all times as curves over message size, one per world size and pattern.

Replay takes a rank's communication from these curves (log-log interpolation between measured
sizes), so a model that predicts replayed costs must read the same curves rather than a straight
alpha + beta line: on a small host the measured curve bends (a latency floor of milliseconds,
then super-linear growth once eight processes fight over two cores).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

import numpy as np


@dataclass(frozen=True)
class CommCurves:
    """``points[(world, pattern)]`` = sorted ((message bytes, seconds), ...)."""

    points: dict[tuple[int, str], tuple[tuple[float, float], ...]]

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> "CommCurves":
        grouped: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
        for r in records:
            grouped[int(r["world_size"]), r["pattern"]].append(
                (float(r["message_bytes"]), r["timing"]["median_us"] * 1e-6)
            )
        return cls({key: _monotone(sorted(pts)) for key, pts in sorted(grouped.items())})

    def convex_minorant(
        self, world: int, pattern: str, message_bytes: float, every_rank_sends: bool = False
    ) -> float:
        """The largest convex function below the curve, at ``message_bytes``.

        Averaged over ranks, the curve is at least this at the ranks' average message: a lower
        bound on the busiest rank's traffic time that no placement can beat. It starts at (0, 0),
        or at the curve's latency floor when ``every_rank_sends`` (no rank is idle in it).
        """
        if message_bytes <= 0 and not every_rank_sends:
            return 0.0
        measured = self.points[world, pattern]
        last_x, last_t = measured[-1]
        start = (0.0, measured[0][1] if every_rank_sends else 0.0)
        # Beyond the largest size the curve is a ray from the origin: a far point stands for it.
        far = (last_x * 1e6, last_t * 1e6)
        hull: list[tuple[float, float]] = []
        for p in [start, *measured, far]:  # lower hull by a monotone chain
            while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) <= 0:
                hull.pop()
            hull.append(p)
        if message_bytes >= far[0]:
            return last_t * message_bytes / last_x
        xs = np.array([h[0] for h in hull])
        ts = np.array([h[1] for h in hull])
        return float(np.interp(message_bytes, xs, ts))

    def world_sizes(self) -> list[int]:
        return sorted({w for w, _ in self.points})

    def covers(self, world: int) -> bool:
        return all((world, p) in self.points for p in ("even", "pooled"))

    def secant(self, world: int, pattern: str, around: float) -> float:
        """Seconds per byte over the octave each side of ``around`` bytes: the curve's slope there."""
        low, high = around / 2, around * 2
        return (self.seconds(world, pattern, high) - self.seconds(world, pattern, low)) / (high - low)

    def seconds(self, world: int, pattern: str, message_bytes: float) -> float:
        """Latency-bound below the smallest size measured, bandwidth-bound above the largest."""
        if message_bytes <= 0:
            return 0.0
        pts = self.points[world, pattern]
        sizes = np.array([p[0] for p in pts])
        times = np.array([p[1] for p in pts])
        if message_bytes <= sizes[0]:
            return float(times[0])
        if message_bytes >= sizes[-1]:
            return float(times[-1] * message_bytes / sizes[-1])
        return float(np.exp(np.interp(np.log(message_bytes), np.log(sizes), np.log(times))))

    def to_dict(self) -> dict:
        return {f"{w}/{p}": [list(pt) for pt in pts] for (w, p), pts in self.points.items()}

    @classmethod
    def from_dict(cls, data: dict) -> "CommCurves":
        out = {}
        for key, pts in data.items():
            world, pattern = key.split("/", 1)
            out[int(world), pattern] = tuple((float(a), float(b)) for a, b in pts)
        return cls(out)


def _monotone(points: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Each time lowered to the least time measured at any larger size (padding is free):
    timing noise must not make a smaller message slower than a bigger one."""
    out, best = [], float("inf")
    for size, seconds in reversed(points):
        best = min(best, seconds)
        out.append((size, best))
    return tuple(reversed(out))


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
