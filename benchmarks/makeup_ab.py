"""The robust search's make-up step (``search/makeup.py``) on and off, replayed beside TorchRec.

    python benchmarks/makeup_ab.py [--seed 2000] [--per-regime 8] [--rounds 7]

Per task (seeds 2000.. of each regime: not the held-out ones), three plans of the packaged model
replayed side by side with TorchRec's (distinct batches, interleaved ranks, comm from the declared
links): ``makeup`` the default path, ``robust`` the default path with the make-up step switched
off, ``nominal`` ``--robust off``. Cells: replayed step over TorchRec's / lookups' slowest rank
over the mean rank's; then each variant's geometric mean, worst task and median imbalance.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings

import numpy as np


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import shardopt.search.ilp as ilp
    from shardopt.bench.regimes import REGIMES, regime_task
    from shardopt.contracts import PlanConfig
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.planner.factory import plan_with
    from shardopt.torchrec.to_model import torchrec_plan

    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=2000)
    parser.add_argument("--per-regime", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    step = ilp.even_makeup
    ratios: dict[str, list[float]] = {}
    imbalance: dict[str, list[float]] = {}
    started = time.perf_counter()
    for regime in REGIMES:
        for seed in range(args.seed, args.seed + args.per_regime):
            w = regime_task(regime, seed).workload
            packaged, _ = resolve_cost_model("analytic", w)
            try:
                plans = {"torchrec": torchrec_plan(w)}
            except Exception as exc:  # TorchRec's planner found no plan: nothing to compare with
                print(f"{regime}-{seed}: TorchRec found no plan ({str(exc).splitlines()[0]})", flush=True)
                continue
            plans["makeup"] = plan_with(w, PlanConfig())
            ilp.even_makeup = lambda workload, model, tables, objective: (tuple(tables), 0)
            try:
                plans["robust"] = plan_with(w, PlanConfig())
            finally:
                ilp.even_makeup = step
            plans["nominal"] = plan_with(w, PlanConfig(robust="off"), cost_model=packaged)
            result = replay_side_by_side(w, plans, args.rounds, comm=comm_for(w, packaged))
            base = result.step_ms("torchrec")
            cells = []
            for name in ("makeup", "robust", "nominal"):
                lookups = [r.fwd_compute_ms + r.bwd_compute_ms for r in result.per_rank[name]]
                ratios.setdefault(name, []).append(result.step_ms(name) / base)
                imbalance.setdefault(name, []).append(max(lookups) / float(np.mean(lookups)))
                cells.append(f"{name} {ratios[name][-1]:.3f}/{imbalance[name][-1]:.2f}")
            print(f"{regime}-{seed}", " | ".join(cells), f"({time.perf_counter() - started:.0f} s)", flush=True)
    for name, values in ratios.items():
        print(f"{name}: geomean {math.exp(float(np.mean(np.log(values)))):.3f}, worst {max(values):.3f},"
              f" slowest rank / mean (median) {np.median(imbalance[name]):.3f}")


if __name__ == "__main__":
    main()
