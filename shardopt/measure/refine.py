"""Measured refinement (``calibrate --workload``): plan, measure the plan's own ranks, correct.

A model fitted to a grid of kernels, even on this machine, is 15-20% off per rank on a workload it
never saw, and a synchronous step waits for the slowest rank: a plan balanced on figures that far
off leaves one rank's lookups 1.1-1.5x the mean. So the workload's own plan is measured: each rank's
fused kernels replayed on this machine (batches of their own, not the ones a later replay draws),
each table's lookups given a factor so the model's ranks match the measured ones
(:mod:`shardopt.costmodel.table_factors`), the workload planned again with the corrected model,
and its ranks measured in turn, until the plan repeats one already measured or the budget ends.
Every measured rank of every round goes into the fit, so a table moved between rounds is seen
on several ranks in several company. At the end the best rounds' plans and the last fit's are
measured again side by side and the factors behind the fastest are kept (autotuning's rule: what
was measured beats what was predicted). The result is the calibration with those factors: ``plan``
with it gives that plan for the same inputs, like any model file.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

from shardopt.contracts import Breakdown, PlanConfig, ShardSpec
from shardopt.core.manifest import layout_digest
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.constants import Calibration
from shardopt.costmodel.table_factors import TableFactor, fit_factors, rank_error, rank_samples, table_factors
from shardopt.measure.alone import REPLICA_BATCHES, REPLICA_ITERS, REPLICA_WARMUP, replica_factors, replicable
from shardopt.measure.replay import SIDE_BY_SIDE_ITERS, SIDE_BY_SIDE_WARMUP, replay_side_by_side
from shardopt.planner.factory import plan_with

ROUNDS = 3  # interleaved timings of each rank per measured plan (medians)
FINAL_ROUNDS = 5  # the finalists', side by side
FINALISTS = 3  # the best measured plans and the last fit's, measured again side by side
SEED = 7919  # the refinement's batches: not the seed-0 batches replay and the bench draw
# Before any round is measured, a round's time is guessed from the model: each rank timed
# (warm-up and timed iterations of its predicted lookups) ROUNDS times, plus building its kernels
# (weights and optimizer state written at BUILD_BYTES_PER_S), with MARGIN for what is not counted.
TIMED_ITERS = SIDE_BY_SIDE_WARMUP + SIDE_BY_SIDE_ITERS  # each rank's runs in one round
BUILD_BYTES_PER_S = 1e9
MARGIN = 2.0
# A replica's runs when it is timed (alone.replica_factors), for its time guessed before it is measured.
REPLICA_RUNS = REPLICA_BATCHES * (REPLICA_WARMUP + REPLICA_ITERS)


@dataclass(frozen=True)
class _Round:
    factors: tuple[TableFactor, ...]  # those of the model that made this plan
    plan: Plan
    step_ms: float
    row: dict  # what the report keeps of it


def refine(workload: Workload, calibration: Calibration, *, held_out: Optional[float], deadline: float,
           device: str = "cpu", backend: str = "auto", config: PlanConfig = PlanConfig(),
           progress: Optional[Callable[[str], None]] = None) -> tuple[Calibration, dict]:
    """``calibration`` with per-table factors fitted to the measured ranks of the workload's plans,
    measuring until ``deadline`` (a ``time.perf_counter`` value) or until a plan repeats; and a
    report: each round's measured step, slowest rank over the mean, and the model's error on that
    plan's ranks before the round's measurements were fitted (each plan is new to the model that
    made it, so that error is out of sample).

    The factors returned are those whose plan measured fastest: the best rounds' plans and the
    last fit's are measured again side by side (a round's own step is three timings, a few percent
    of noise), so ``plan`` with the file gives a plan seen to run that fast on this machine."""
    base = dataclasses.replace(calibration, table_factors=())
    base_model = _model(base, held_out)
    # The replicas' factors, wherever they fit; no table is measured alone: its factor would put the
    # model further off a plan's measured ranks (benchmarks/results/alone_factors.md).
    made = _replica_round(workload, base_model, deadline, device, backend)
    replicas, replica_row = made if made is not None else ((), None)
    if progress and replicas:
        progress(f"each table it may replicate measured as a replica ({len(replicas)} of them)")

    def corrected(factors: tuple[TableFactor, ...]) -> AnalyticCostModel:
        return _model(dataclasses.replace(base, table_factors=factors + replicas), held_out)

    measure = functools.partial(_measure, workload, device, backend)
    samples, seen, rounds = [], set(), []
    factors: tuple[TableFactor, ...] = ()
    fitted: dict[str, tuple[float, float]] = {}
    plan_s = measure_s = short_s = 0.0  # short_s: what the first plan's round lacked, guessed
    converged = False
    # Room for one more round and for the finalists' side-by-side after it.
    while time.perf_counter() + plan_s + measure_s * (1 + FINALISTS * FINAL_ROUNDS / ROUNDS) < deadline:
        started = time.perf_counter()
        plan = plan_with(workload, config, cost_model=corrected(factors))
        plan_s = time.perf_counter() - started
        digest = layout_digest(workload.topology.world_size, plan.tables)
        if digest in seen:
            converged = True
            break
        if not rounds and (short_s := time.perf_counter() - deadline + _round_guess_s(base_model, workload, plan) * (
                1 + FINALISTS * FINAL_ROUNDS / ROUNDS)) >= 0:
            break  # not even one round fits (a large world, a slow device): nothing is measured
        seen.add(digest)
        replayed = measure({"plan": plan}, ROUNDS, SEED + len(rounds))["plan"]
        measure_s = time.perf_counter() - started - plan_s
        measured = [(r.fwd_compute_ms, r.bwd_compute_ms) for r in replayed]
        new = rank_samples(base_model, workload, plan.tables, measured)
        before = rank_error(new, fitted)
        samples += new
        fitted = fit_factors(samples)
        lookups = [f + b for f, b in measured]
        step = Breakdown.of(replayed).step_ms
        rounds.append(_Round(factors, plan, step, {
            "step_ms": round(step, 4), "slowest_over_mean": round(max(lookups) / (sum(lookups) / len(lookups)), 4),
            "rank_error_before": round(before, 4), "rank_error_after": round(rank_error(new, fitted), 4)}))
        factors = table_factors(workload, fitted)
        if progress:
            row = rounds[-1].row
            progress(f"round {len(rounds)}: measured step {row['step_ms']:.2f} ms, slowest rank"
                     f" {row['slowest_over_mean']:.2f}x the mean, model off by {row['rank_error_before']:.1%} per"
                     " rank before the fit")
    last = None
    if rounds or factors:  # the last fit's plan: planned already when it repeated a measured one
        last = _Round(factors, plan if converged else plan_with(workload, config, cost_model=corrected(factors)),
                      float("inf"), {})
    chosen, final = _final(rounds, last, measure)
    if progress and final:
        steps = final["steps_ms"]
        progress(f"kept the plan of {final['kept']}: {steps[final['kept']]:.2f} ms measured side by side with "
                 + ", ".join(f"{name} {ms:.2f}" for name, ms in steps.items() if name != final["kept"]))
    report = {**({"replicas": replica_row} if replica_row is not None else {}),
              **({"short_s": math.ceil(short_s)} if short_s > 0 else {}),
              "rounds": [r.row for r in rounds], "converged": converged, "tables": len(chosen), "final": final,
              "rank_error_fitted": round(rank_error(samples, fitted), 4),
              "rank_error_unfitted": round(rank_error(samples), 4)}
    return dataclasses.replace(base, table_factors=chosen + replicas), report


def replicas_refined(workload: Workload, calibration: Calibration, *, held_out: Optional[float], deadline: float,
                     device: str = "cpu", backend: str = "auto") -> tuple[Calibration, dict]:
    """``calibration`` with the replicas' factors (``calibrate --probe --workload``: no plan is
    measured), and what the report keeps of it; without them where they do not fit before
    ``deadline``."""
    base = dataclasses.replace(calibration, table_factors=())
    made = _replica_round(workload, _model(base, held_out), deadline, device, backend)
    if made is None:
        return base, {"skipped": "the probe's time ended first (calibrate --workload without --probe takes longer)"}
    replicas, row = made
    return dataclasses.replace(base, table_factors=replicas), row


def _replica_round(workload: Workload, model: AnalyticCostModel, deadline: float, device: str,
                   backend: str) -> Optional[tuple[tuple[TableFactor, ...], dict]]:
    """Each table the search may replicate timed as a replica (:func:`replica_factors`) where that
    fits before ``deadline``: (their factors, what the report keeps of it); else None."""
    tables = replicable(model, workload)
    costs = [model.shard_cost(workload, ShardSpec(t, "data_parallel", t.num_embeddings, t.embedding_dim, "dense"))
             for t in tables]
    kernel_s = sum(c.fwd_compute_ms + c.bwd_compute_ms for c in costs) / 1e3
    if time.perf_counter() + MARGIN * REPLICA_RUNS * kernel_s >= deadline:
        return None
    started = time.perf_counter()
    replicas = replica_factors(model, workload, device=device, backend=backend)
    return replicas, {"replicas": len(replicas), "seconds": round(time.perf_counter() - started, 1)}


def _round_guess_s(model: AnalyticCostModel, workload: Workload, plan: Plan) -> float:
    """Seconds one measured round of ``plan`` may take, guessed before any was measured."""
    ranks = model.breakdown(workload, plan.tables)
    lookups_s = sum(r.fwd_compute_ms + r.bwd_compute_ms for r in ranks) / 1e3
    built_s = sum(r.hbm_bytes for r in ranks) / BUILD_BYTES_PER_S
    return MARGIN * ROUNDS * (TIMED_ITERS * lookups_s + built_s)  # kernels built afresh each round


def _final(rounds: list[_Round], last: Optional[_Round], measure) -> tuple[tuple[TableFactor, ...], dict]:
    """The factors of the fastest of the best measured rounds' plans and the last fit's plan,
    measured again side by side, and what that measured; with one candidate, its factors and {};
    with nothing measured, no factors."""
    if last is None:
        return (), {}
    named = {f"round {i + 1}": r for i, r in sorted(enumerate(rounds), key=lambda ir: (ir[1].step_ms, ir[0]))
             [:FINALISTS]}
    if layout_digest(0, last.plan.tables) not in {layout_digest(0, r.plan.tables) for r in named.values()}:
        named["the last fit"] = last
    if len(named) == 1:
        return next(iter(named.values())).factors, {}
    measured = measure({name: r.plan for name, r in named.items()}, FINAL_ROUNDS, SEED - 1)
    steps = {name: round(Breakdown.of(ranks).step_ms, 4) for name, ranks in measured.items()}
    kept = min(steps, key=lambda name: steps[name])  # ties: the first named, the best round
    return named[kept].factors, {"kept": kept, "steps_ms": steps}


def _measure(workload: Workload, device: str, backend: str, plans: dict[str, Plan], rounds: int, seed: int) -> dict:
    """Each plan's ranks replayed side by side: name -> per-rank breakdowns."""
    return replay_side_by_side(workload, plans, rounds, seed=seed, device=device, backend=backend).per_rank


def _model(calibration: Calibration, held_out: Optional[float]) -> AnalyticCostModel:
    model = AnalyticCostModel(calibration=calibration)
    model.held_out = held_out
    return model
