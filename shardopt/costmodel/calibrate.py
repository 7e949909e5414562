"""Fit the analytic model's constants to a profile by non-negative least squares.

Each measured kernel gives one equation per pass: its time equals a per-kernel overhead plus the
sum of its shards' terms times per-term constants. Rows are divided by the time (measured, then
predicted: see ``_fit``), so the fit minimises relative error, which is what planning cares about.
The size of the last-level cache a rank keeps is fitted too, by trying a grid of sizes and keeping
the best fit. Terms a profile never exercises (UVM on a CPU) keep the hardware profile's constant.
Data-parallel replicas' dense kernel gets constants of its own from its own points.
All-to-all: time = alpha + beta * bytes per world size, fitted the same way.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Sequence

import numpy as np
from scipy.optimize import nnls

from shardopt.costmodel.comm_curve import CommCurves
from shardopt.costmodel.constants import Calibration, KernelConstants
from shardopt.costmodel.profile_data import KernelSample, kernel_terms
from shardopt.costmodel.provenance import FittedRange
from shardopt.costmodel.terms import hardware_coefficients
from shardopt.core.hardware import Hardware


# Refits weighted by the previous fit's predictions rather than the measurements themselves.
REWEIGHTS = 4
# Replicas' own constants need this many of their points (some 25 terms); fewer, and replicas
# are priced with the fused kernel's constants.
MIN_DENSE_POINTS = 40


def _fit(rows: np.ndarray, targets: np.ndarray, defaults: np.ndarray) -> tuple[np.ndarray, float]:
    """Coefficients for the columns (plus an intercept) minimising relative squared error.

    Dividing by the measured time is biased: a point measured slow by noise weighs less than one
    measured fast, so the fit comes out low by about 1.5 sigma^2 (some 9% at the 25% noise of a
    shared 2-core VM). So the first fit only seeds weights; the refits divide by the predicted
    time instead, which noise in the measurement does not move (iteratively reweighted least
    squares for a relative error).
    """
    used = np.abs(rows).sum(axis=0) > 0
    design = np.hstack([rows[:, used], np.ones((len(rows), 1))])
    # Scale columns to unit norm so the solver sees a well-conditioned problem.
    weights = targets
    for _ in range(1 + REWEIGHTS):
        weighted = design / weights[:, None]
        scale = np.linalg.norm(weighted, axis=0)
        scale[scale == 0] = 1.0
        solution, _ = nnls(weighted / scale, targets / weights, maxiter=10_000)
        solution = solution / scale
        weights = np.maximum(design @ solution, 1e-3 * targets)
    coef = defaults.copy()
    coef[used] = solution[:-1]
    return coef, float(solution[-1])


def _fit_kernels(hw: Hardware, samples: Sequence[KernelSample], defaults=None):
    """(fwd, fwd kernel, bwd, bwd kernel, mean squared relative error) for these cache sizes;
    terms the samples never exercise keep ``defaults`` (the hardware profile's constants)."""
    terms = [kernel_terms(hw, s.shards) for s in samples]
    fwd_rows = np.array([t[0] for t in terms])
    bwd_rows = np.array([t[1] for t in terms])
    fwd_default, bwd_default = defaults or hardware_coefficients(hw)
    fwd_s, bwd_s = np.array([s.fwd_s for s in samples]), np.array([s.bwd_s for s in samples])
    fwd, fwd_kernel = _fit(fwd_rows, fwd_s, fwd_default)
    bwd, bwd_kernel = _fit(bwd_rows, bwd_s, bwd_default)
    error = np.mean(((fwd_rows @ fwd + fwd_kernel) / fwd_s - 1) ** 2
                    + ((bwd_rows @ bwd + bwd_kernel) / bwd_s - 1) ** 2)
    return fwd, fwd_kernel, bwd, bwd_kernel, float(error)


def llc_grid(hw: Hardware) -> list[int]:
    """Last-level cache sizes a fit tries: from the near cache up 32-fold, in half-octaves.

    The share of a shared L3 one rank keeps is not a datasheet number (neighbours, other ranks,
    the rest of the step use it too), so it is fitted like the other constants.
    """
    if not hw.llc_bytes:
        return []
    return [int(hw.cache_bytes * 2 ** (k / 2)) for k in range(1, 11)]


def calibrate(
    hw: Hardware, samples: Sequence[KernelSample], comm_records: Sequence[dict], trained_on: dict
) -> Calibration:
    """The constants of ``samples``: the fused kernel's from its points, replicas' dense kernel's
    from theirs where there are :data:`MIN_DENSE_POINTS` (it shares no algorithm to fit together)."""
    dense = [s for s in samples if s.dense]
    samples = [s for s in samples if not s.dense]
    llc_bytes = None
    best = _fit_kernels(hw, samples)
    for size in llc_grid(hw):
        fit = _fit_kernels(dataclasses.replace(hw, llc_bytes=size), samples)
        if fit[-1] < best[-1]:
            best, llc_bytes = fit, size
    fwd, fwd_kernel, bwd, bwd_kernel, _ = best
    replicas = None
    if len(dense) >= MIN_DENSE_POINTS:
        at = dataclasses.replace(hw, llc_bytes=llc_bytes) if llc_bytes is not None else hw
        d_fwd, d_fwd_kernel, d_bwd, d_bwd_kernel, _ = _fit_kernels(at, dense, (fwd, bwd))
        replicas = KernelConstants(tuple(float(c) for c in d_fwd), tuple(float(c) for c in d_bwd),
                                   d_fwd_kernel, d_bwd_kernel)
    by_world: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for r in comm_records:
        by_world[r["world_size"]].append((float(r["message_bytes"]), r["timing"]["median_us"] * 1e-6))
    comm = {}
    for world, pts in sorted(by_world.items()):
        x = np.array([p[0] for p in pts])[:, None]
        t = np.array([p[1] for p in pts])
        (beta,), alpha = _fit(x, t, np.zeros(1))
        comm[world] = (alpha, float(beta))
    return Calibration(
        hardware=hw.name,
        fwd=tuple(float(c) for c in fwd),
        bwd=tuple(float(c) for c in bwd),
        fwd_kernel_s=fwd_kernel,
        bwd_kernel_s=bwd_kernel,
        comm=comm,
        trained_on=trained_on,
        comm_curves=CommCurves.from_records(comm_records) if comm_records else None,
        llc_bytes=llc_bytes if llc_bytes is not None else hw.llc_bytes,
        fitted=fitted_range(samples),
        dense=replicas,
    )


def fitted_range(samples: Sequence[KernelSample]) -> FittedRange | None:
    """The per-table shapes of the measured kernels: what the fitted constants speak for."""
    return FittedRange.of(
        (float(s.lookups / s.samples), int(s.rows), int(s.cols), int(s.samples))
        for sample in samples for s in sample.shards if s.samples > 0
    )
