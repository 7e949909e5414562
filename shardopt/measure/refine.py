"""Measured refinement (``calibrate --workload``): plan, measure the plan's own ranks, correct.

A model fitted to a grid of kernels, even on this machine, is 15-20% off per rank on a workload it
never saw, and a synchronous step waits for the slowest rank: a plan balanced on figures that far
off leaves one rank's lookups 1.1-1.5x the mean. So the workload's own plan is measured: each rank's
fused kernels replayed on this machine (batches of their own, not the ones a later replay draws),
each table's lookups given a factor so the model's ranks match the measured ones
(:mod:`shardopt.costmodel.table_factors`), the workload planned again with the corrected model,
and its ranks measured in turn, until the plan repeats one already measured or the budget ends.
Every measured rank of every round goes into the fit, so a table moved between rounds is seen
on several ranks in several company. The result is the calibration with the factors: ``plan``
with it gives the same plan for the same inputs, like any model file.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

from shardopt.contracts import Breakdown, PlanConfig
from shardopt.core.manifest import layout_digest
from shardopt.core.workload import Workload
from shardopt.costmodel.analytic import AnalyticCostModel, Calibration
from shardopt.costmodel.table_factors import fit_factors, rank_error, rank_samples, table_factors
from shardopt.measure.replay import replay_side_by_side
from shardopt.planner.factory import plan_with

ROUNDS = 3  # interleaved timings of each rank per measured plan (medians)
SEED = 7919  # the refinement's batches: not the seed-0 batches replay and the bench draw


def refine(workload: Workload, calibration: Calibration, *, held_out: Optional[float], deadline: float,
           device: str = "cpu", backend: str = "auto", config: PlanConfig = PlanConfig(),
           progress: Optional[Callable[[str], None]] = None) -> tuple[Calibration, dict]:
    """``calibration`` with per-table factors fitted to the measured ranks of the workload's plans,
    measuring until ``deadline`` (a ``time.perf_counter`` value) or until a plan repeats; and a
    report: each round's measured step, slowest rank over the mean, and the model's error on that
    plan's ranks before the round's measurements were fitted (each plan is new to the model that
    made it, so that error is out of sample)."""
    base = dataclasses.replace(calibration, table_factors=())
    base_model = _model(base, held_out)
    model, samples, seen, rounds = base_model, [], set(), []
    fitted: dict[str, tuple[float, float]] = {}
    last_s, converged = 0.0, False
    while time.perf_counter() + last_s < deadline:
        started = time.perf_counter()
        plan = plan_with(workload, config, cost_model=model)
        digest = layout_digest(workload.topology.world_size, plan.tables)
        if digest in seen:
            converged = True
            break
        seen.add(digest)
        replayed = replay_side_by_side(workload, {"plan": plan}, ROUNDS, seed=SEED + len(rounds), device=device,
                                       backend=backend).per_rank["plan"]
        measured = [(r.fwd_compute_ms, r.bwd_compute_ms) for r in replayed]
        new = rank_samples(base_model, workload, plan.tables, measured)
        before = rank_error(new, fitted)
        samples += new
        fitted = fit_factors(samples)
        model = _model(dataclasses.replace(base, table_factors=table_factors(workload, fitted)), held_out)
        lookups = [f + b for f, b in measured]
        rounds.append({"step_ms": round(Breakdown.of(replayed).step_ms, 4),
                       "slowest_over_mean": round(max(lookups) / (sum(lookups) / len(lookups)), 4),
                       "rank_error_before": round(before, 4), "rank_error_after": round(rank_error(new, fitted), 4)})
        last_s = time.perf_counter() - started
        if progress:
            r = rounds[-1]
            progress(f"round {len(rounds)}: measured step {r['step_ms']:.2f} ms, slowest rank {r['slowest_over_mean']:.2f}x"
                     f" the mean, model off by {r['rank_error_before']:.1%} per rank before the fit")
    report = {"rounds": rounds, "converged": converged,
              "tables": len(fitted), "rank_error_fitted": round(rank_error(samples, fitted), 4),
              "rank_error_unfitted": round(rank_error(samples), 4)}
    return dataclasses.replace(base, table_factors=table_factors(workload, fitted)), report


def _model(calibration: Calibration, held_out: Optional[float]) -> AnalyticCostModel:
    model = AnalyticCostModel(calibration=calibration)
    model.held_out = held_out
    return model
