"""Plan variants replayed beside TorchRec's on the regime tasks: the loop the A/B scripts share.

For each task of every regime (seeds ``first_seed``..), TorchRec's plan (a task it cannot plan is
skipped, said so), the variants' plans, all replayed side by side on this machine's kernels
(distinct batches, interleaved ranks, comm from the declared links); each variant's replayed step
over TorchRec's and its lookups' slowest rank over the mean rank's.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings
from typing import Callable

import numpy as np


class Tally:
    """Per variant, each task's step over TorchRec's and lookups' slowest rank over the mean."""

    def __init__(self) -> None:
        self.ratios: dict[str, list[float]] = {}
        self.imbalance: dict[str, list[float]] = {}

    def geomean(self, name: str) -> float:
        return math.exp(float(np.mean(np.log(self.ratios[name]))))

    def summary(self) -> list[str]:
        return [f"{name}: geomean {self.geomean(name):.3f}, worst {max(values):.3f},"
                f" slowest rank / mean (median) {np.median(self.imbalance[name]):.3f}"
                for name, values in self.ratios.items()]


def replay_regime_tasks(first_seed: int, per_regime: int, rounds: int,
                        make_plans: Callable[[object, object], dict]) -> Tally:
    """Replay ``make_plans(workload, packaged model)``'s plans beside TorchRec's on each task,
    printing a line per task (``=`` marks a plan identical to the one before it)."""
    from shardopt.bench.regimes import REGIMES, regime_task
    from shardopt.contracts import Breakdown
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.torchrec.to_model import torchrec_plan

    tally, started = Tally(), time.perf_counter()
    for regime in REGIMES:
        for seed in range(first_seed, first_seed + per_regime):
            w = regime_task(regime, seed).workload
            packaged, _ = resolve_cost_model("analytic", w)
            try:
                plans = {"torchrec": torchrec_plan(w)}
            except Exception as exc:  # TorchRec's planner found no plan: nothing to compare with
                print(f"{regime}-{seed}: TorchRec found no plan ({str(exc).splitlines()[0]})", flush=True)
                continue
            plans.update(make_plans(w, packaged))
            result = replay_side_by_side(w, plans, rounds, comm=comm_for(w, packaged))
            base = Breakdown.of(result.per_rank["torchrec"]).step_ms
            cells, before = [], None
            for name, plan in plans.items():
                if name == "torchrec":
                    continue
                lookups = [r.fwd_compute_ms + r.bwd_compute_ms for r in result.per_rank[name]]
                tally.ratios.setdefault(name, []).append(Breakdown.of(result.per_rank[name]).step_ms / base)
                tally.imbalance.setdefault(name, []).append(max(lookups) / float(np.mean(lookups)))
                same = "=" if before is not None and plan.tables == before.tables else ""
                cells.append(f"{name} {tally.ratios[name][-1]:.3f}/{tally.imbalance[name][-1]:.2f}{same}")
                before = plan
            print(f"{regime}-{seed}", " | ".join(cells), f"({time.perf_counter() - started:.0f} s)", flush=True)
    return tally


def replay_new_against_old(first_seed: int, per_regime: int, rounds: int, switch: Callable[[str | None], None],
                           foreign: str | None = None) -> None:
    """Plans of the packaged model (the default path) and of its compute scaled x0.25 and x4 (deliberately
    wrong models, robust search), with ``foreign`` also of that model file (one fitted on another
    machine: wrong the way a user's machine finds the packaged model), each made with
    ``switch("new")`` and then ``switch("old")`` in force (``switch(None)`` puts back what ships),
    replayed beside TorchRec's on each task; prints each variant's tally and, per model, new over
    old over every task and over those whose plans differ."""
    from robust import _scaled

    from shardopt.contracts import PlanConfig
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.planner.factory import plan_with

    differ: dict[str, list[bool]] = {}

    def make_plans(w, packaged) -> dict:
        plans = {}
        models = [("default", None), ("x0.25", _scaled(packaged, 0.25)), ("x4", _scaled(packaged, 4.0))]
        if foreign:
            models.append(("foreign", resolve_cost_model(f"analytic@{foreign}", w)[0]))
        for name, model in models:
            config = PlanConfig() if model is None else PlanConfig(robust="on")
            for label in ("new", "old"):
                switch(label)
                try:
                    plans[f"{name}-{label}"] = plan_with(w, config, cost_model=model)
                finally:
                    switch(None)
            differ.setdefault(name, []).append(plans[f"{name}-new"].tables != plans[f"{name}-old"].tables)
        return plans

    tally = replay_regime_tasks(first_seed, per_regime, rounds, make_plans)
    print("\n".join(tally.summary()))
    for name, changed in differ.items():
        paired = np.array(tally.ratios[f"{name}-new"]) / np.array(tally.ratios[f"{name}-old"])
        line = (f"{name}: new over old, geomean {math.exp(float(np.mean(np.log(paired)))):.4f},"
                f" range {paired.min():.3f}-{paired.max():.3f} over {len(paired)} tasks")
        if any(changed):
            line += f"; over the {sum(changed)} whose plans differ {math.exp(float(np.mean(np.log(paired[changed])))):.4f}"
        print(line)


def new_against_old_main(make_switch: Callable[[argparse.Namespace], Callable[[str | None], None]],
                         add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """An A/B script's command line (``--first-seed``, ``--per-regime``, ``--rounds`` and its own
    ``add_arguments``), then :func:`replay_new_against_old` with ``make_switch(args)``'s switch."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser()
    if add_arguments is not None:
        add_arguments(parser)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--per-regime", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--foreign", help="also plan with this model file, one fitted on another machine"
                        " (benchmarks/models/cpu-avx2.json), robust")
    args = parser.parse_args()
    replay_new_against_old(args.first_seed, args.per_regime, args.rounds, make_switch(args), args.foreign)
