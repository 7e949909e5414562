"""Fit the analytic model's constants to a profile by non-negative least squares.

Each measured kernel gives one equation per pass: its time equals a per-kernel overhead plus the
sum of its shards' terms times per-term constants. Rows are divided by the measured time, so the
fit minimises relative error, which is what planning cares about. Terms a profile never exercises
(UVM on a CPU) keep the hardware profile's constant. All-to-all: time = alpha + beta * bytes per
world size, fitted the same way.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np
from scipy.optimize import nnls

from shardopt.costmodel.comm_curve import CommCurves
from shardopt.costmodel.analytic import Calibration
from shardopt.costmodel.profile_data import KernelSample, kernel_terms
from shardopt.costmodel.terms import hardware_coefficients
from shardopt.hardware import Hardware


def _fit(rows: np.ndarray, targets: np.ndarray, defaults: np.ndarray) -> tuple[np.ndarray, float]:
    """Coefficients for the columns (plus an intercept) minimising relative squared error."""
    used = np.abs(rows).sum(axis=0) > 0
    design = np.hstack([rows[:, used], np.ones((len(rows), 1))]) / targets[:, None]
    # Scale columns to unit norm so the solver sees a well-conditioned problem.
    scale = np.linalg.norm(design, axis=0)
    scale[scale == 0] = 1.0
    solution, _ = nnls(design / scale, np.ones(len(rows)), maxiter=10_000)
    solution = solution / scale
    coef = defaults.copy()
    coef[used] = solution[:-1]
    return coef, float(solution[-1])


def calibrate(
    hw: Hardware, samples: Sequence[KernelSample], comm_records: Sequence[dict], trained_on: dict
) -> Calibration:
    terms = [kernel_terms(hw, s.shards) for s in samples]
    fwd_rows = np.array([t[0] for t in terms])
    bwd_rows = np.array([t[1] for t in terms])
    fwd_default, bwd_default = hardware_coefficients(hw)
    fwd, fwd_kernel = _fit(fwd_rows, np.array([s.fwd_s for s in samples]), fwd_default)
    bwd, bwd_kernel = _fit(bwd_rows, np.array([s.bwd_s for s in samples]), bwd_default)
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
    )
