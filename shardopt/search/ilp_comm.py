"""A rank's all-to-all time in CP-SAT: measured curves as piecewise-linear functions of its bytes.

Where comm is read off measured curves, it is not a sum of per-shard costs: a rank pays the
collective's latency floor once, then a time that bends with its total bytes (on a small host it
jumps where gloo changes algorithm). Charging each shard a straight-line share, as the search used
to, can miss the real optimum by tens of percent. Here each rank's bytes per collective are an
integer variable, and its time a piecewise-linear function of them: one segment literal per
stretch between breakpoints (the measured sizes and their geometric midpoints, which the curve's
log-log interpolation bends between), the time the chord of the curve on that stretch. The
function need not be convex, which is why each stretch has a literal of its own.
"""

from __future__ import annotations

import math
from typing import Callable

from ortools.sat.python import cp_model

from shardopt.costmodel.comm_curve import CommCurves

# Chords between breakpoints this far apart (a factor) stay within ~2% of the log-log curve.
BREAKPOINT_RATIO = 2.0
MAX_BYTE_UNITS = 10_000_000  # bytes are counted in units that keep a rank's total below this


def breakpoints(curves: CommCurves, world: int, pattern: str, most: float) -> list[float]:
    """0, then sizes from the smallest measured one up to ``most`` bytes, at most a factor apart."""
    sizes = [x for x, _ in curves.points[world, pattern]]
    points = {0.0}
    x = sizes[0]
    for size in sizes + [most]:
        while x < min(size, most):
            points.add(x)
            x = min(x * BREAKPOINT_RATIO, size)
        points.add(min(size, most))
        x = size
    return sorted(p for p in points if p <= most)


def curve_cost(
    cp: cp_model.CpModel,
    seconds: Callable[[float], float],
    points: list[float],
    terms: list[tuple[int, cp_model.IntVar]],
    unit: float,
    scale: float,
    name: str,
) -> cp_model.IntVar | None:
    """An integer variable at least the curve's time (in cost units) for the bytes ``terms`` sum to.

    ``terms`` are (bytes in ``unit``s, literal); ``seconds`` is the curve, ``scale`` cost units per
    millisecond. The first segment is "no bytes, no time"; the curve's latency floor starts above 0.
    """
    if not terms:
        return None
    total = cp.new_int_var(0, sum(b for b, _ in terms), f"bytes[{name}]")
    cp.add(total == sum(b * lit for b, lit in terms))
    top = math.ceil(seconds(points[-1]) * 1e3 * scale) + 1
    cost = cp.new_int_var(0, top, f"comm[{name}]")
    zero = cp.new_bool_var(f"seg[{name},0]")
    cp.add(total == 0).only_enforce_if(zero)
    segments = [zero]
    for k, (lo, hi) in enumerate(zip(points[:-1], points[1:]), start=1):
        seg = cp.new_bool_var(f"seg[{name},{k}]")
        segments.append(seg)
        lo_u, hi_u = math.floor(lo / unit), max(math.ceil(hi / unit), math.floor(lo / unit) + 1)
        cp.add(total >= lo_u).only_enforce_if(seg)
        cp.add(total <= hi_u).only_enforce_if(seg)
        # Just above zero the curve is its latency floor; elsewhere the chord over the stretch:
        # (hi - lo) cost >= (hi - lo) t_lo + (t_hi - t_lo)(bytes - lo), all in integers.
        t_lo = math.ceil(seconds(max(lo, 1.0)) * 1e3 * scale)
        t_hi = max(math.ceil(seconds(hi) * 1e3 * scale), t_lo)
        width = hi_u - lo_u
        cp.add(width * cost >= width * t_lo + (t_hi - t_lo) * (total - lo_u)).only_enforce_if(seg)
    cp.add_exactly_one(segments)
    return cost


def byte_unit(most: float) -> float:
    """Bytes per integer unit so that ``most`` bytes stay within MAX_BYTE_UNITS."""
    return max(1.0, most / MAX_BYTE_UNITS)


def in_units(size: float, unit: float) -> int:
    """Bytes as whole units, never rounding a nonzero message down to none (it pays latency)."""
    return math.ceil(size / unit) if size > 0 else 0
