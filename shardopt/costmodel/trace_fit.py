"""A model fitted to a training job's traces: the user's own cluster, measured by their own job.

Each traced rank gives its lookups' milliseconds per pass (medians over steps,
:mod:`shardopt.traces.kineto`) for a known set of shards (the plan that ran). The base model's
prediction of the same ranks sets one factor per pass: the median over ranks of measured over
predicted, as ``calibrate`` rescales a model to a new machine (:mod:`.transfer`). A rank's
shapes are what the job ran, so a factor speaks for this cluster and this kind of plan. With
traces of two or more plans the factor rests on every plan's ranks, and the report gives each
plan's own factor: where they disagree by more than the ranks' spread, the base model's shape
does not carry to this cluster, and the report says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
from shardopt.costmodel.kernel_net import LearnedParts
from shardopt.costmodel.learned import LearnedCostModel
from shardopt.costmodel.transfer import rescaled
from shardopt.traces.kineto import MeasuredRank

# Plans whose own factors differ by more than this (log) are reported as a shape that does not carry.
DISAGREE = 0.10


@dataclass(frozen=True)
class TracedRun:
    """One traced job: the workload and plan it ran, each rank's measured medians."""

    workload: Workload
    plan: Plan
    ranks: tuple[MeasuredRank, ...]
    source: str
    collectives: tuple[tuple[float, float], ...] = ()  # each traced all-to-all: (bytes, fastest ms)


def predicted_compute(parts: LearnedParts, run: TracedRun) -> np.ndarray:
    """(ranks, 2): the model's forward and backward lookup milliseconds of each rank."""
    model = LearnedCostModel(parts, device=run.workload.topology.compute_device)
    return np.array([[r.fwd_compute_ms, r.bwd_compute_ms] for r in model.breakdown(run.workload, run.plan.tables)])


def measured_compute(run: TracedRun) -> np.ndarray:
    return np.array([[r.fwd_compute_ms, r.bwd_compute_ms] for r in sorted(run.ranks, key=lambda r: r.rank)])


def _log_ratios(parts: LearnedParts, run: TracedRun) -> np.ndarray:
    """log(measured / predicted) per rank and pass, for ranks with lookups in both."""
    measured, predicted = measured_compute(run), predicted_compute(parts, run)
    keep = (measured > 0).all(axis=1) & (predicted > 0).all(axis=1)
    return np.log(measured[keep] / predicted[keep])


def fit_links(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(latency s, seconds per byte) of the traced all-to-alls, (bytes, ms) each: least squares on
    relative error, both terms non-negative; None for fewer than three sizes."""
    from scipy.optimize import nnls

    if len({b for b, _ in points}) < 3:
        return None
    x = np.array([[1.0, b] for b, _ in points])
    t = np.array([ms / 1e3 for _, ms in points])
    weights = 1 / np.maximum(t, 1e-9)
    scale = np.linalg.norm(x * weights[:, None], axis=0)
    scale[scale == 0] = 1.0
    solution, _ = nnls(x * weights[:, None] / scale, t * weights)
    alpha, beta = solution / scale
    return float(alpha), float(beta)


def link_class(workload: Workload) -> str:
    """Which links a job's all-to-alls cross: one host's, or hosts' (set by the slowest)."""
    return "intra-host" if workload.topology.num_hosts == 1 else "inter-host"


def fit_traces(base: LearnedParts, runs: Sequence[TracedRun], trained_on: dict,
               collectives: Sequence[tuple[float, float]] = ()) -> tuple[LearnedParts, dict]:
    """``base`` rescaled per pass to the traced cluster, and a report of the fit. With the traces'
    all-to-alls (``collectives``: bytes and fastest-rank ms), their latency and bandwidth too,
    stored as the model's fitted all-to-all line at the traced world size."""
    per_run = [_log_ratios(base, run) for run in runs]
    pooled = np.concatenate(per_run)
    if len(pooled) == 0:
        raise ValueError("no traced rank holds lookups the model prices")
    scale = np.median(pooled, axis=0)
    here = dataclasses.replace(base.calibration, trained_on=trained_on)
    links = fit_links(collectives)
    world = runs[0].workload.topology.world_size
    if links is not None:
        # The traced links replace the base's curves, which speak for the machine it was profiled on.
        here = dataclasses.replace(here, comm={**here.comm, world: links}, comm_curves=None)
    parts = rescaled(base, scale, here)
    own = [np.median(r, axis=0).tolist() for r in per_run]
    spread = float(np.max(np.ptp(np.array(own), axis=0))) if len(own) > 1 else 0.0
    errors = [float(np.mean(np.abs(predicted_compute(parts, run).sum(axis=1) / measured_compute(run).sum(axis=1) - 1)))
              for run in runs]
    report = {
        "traces": [run.source for run in runs],
        "ranks": int(len(pooled)),
        "pass_factor": {"fwd": float(np.exp(scale[0])), "bwd": float(np.exp(scale[1]))},
        "per_plan_factor": [{"fwd": float(np.exp(f)), "bwd": float(np.exp(b))} for f, b in own],
        "shape_carries": spread <= DISAGREE,
        "in_sample_mape": errors,
        "links": None if links is None else {
            "class": link_class(runs[0].workload), "world_size": world, "collectives": len(collectives),
            "latency_us": links[0] * 1e6, "bandwidth_gbps": (1 / links[1] / 1e9) if links[1] > 0 else None,
        },
        # What ``--robust auto`` reads as the model's error (a file's held-out figure).
        "held_out_mape": {"analytic-calibrated": float(np.mean(errors)), "learned": float(np.mean(errors))},
    }
    return parts, report
