"""Arithmetic whose rounding does not depend on the CPU, so the same input gives the same plan.

A dot product through BLAS (``a @ b``, ``np.dot``) sums in an order set by the kernel OpenBLAS picks
for the CPU, and numpy's ``exp`` has an AVX-512 path of its own: on an AVX2 machine the packaged
configs' shard costs differed from an AVX-512 machine's in their last bits, enough to turn a
greedy's tie and fail the users' gate on dlrm-large (step +1.9%, headroom -2.1 points). So costs
that plans are chosen by are summed exactly (each product is rounded alike everywhere) and rounded
to ``DIGITS`` significant digits where a transcendental function fed them.
"""

from __future__ import annotations

import math

import numpy as np

DIGITS = 10  # far below any cost's real precision; a last-bit difference crosses it ~1e-6 of the time


def dot(a, b) -> float:
    """sum(a * b), correctly rounded: the same float on every CPU."""
    return math.fsum((np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)).tolist())


def settled(x: float) -> float:
    """``x`` to ``DIGITS`` significant digits: what a last-bit difference of libm or SIMD leaves alike."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, DIGITS - 1 - math.floor(math.log10(abs(x))))
