"""Do tables measured alone price them in a rank? Factors fitted to each table alone, against the
same model without them, judged on the ranks of plans replayed side by side.

    python benchmarks/alone_factors.py [--tasks compute-1005,hot-1005] [--rounds 11] [--base FILE]

For each task (``regime-seed`` of ``shardopt.bench.regimes``):

1. ``shardopt calibrate --probe --workload`` (the base model rescaled per pass to this machine,
   the workload's own kernels among its points, its replicas measured): the ``probe`` model;
   ``--base FILE`` rescales another machine's model instead (``benchmarks/models/cpu-avx2.json``:
   a model as wrong here as the packaged one is on a user's CPU).
2. Every table on a rank of its own, replayed (``shardopt.measure.alone.alone_plan``, 3 rounds, as
   ``calibrate`` measured it until it stopped pricing tables alone), a factor per table and pass
   fitted to that (``table_factors.fit_factors``): the ``alone`` model, the probe with those factors.
3. TorchRec's plan, the default plan and each model's plan replayed side by side; each model's
   per-rank lookups (forward plus backward) against the measured ones, as the log rms error with
   each plan's mean taken out (balance is what a plan needs of a model; a uniform scale is not).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

TASKS = "compute-1000,compute-1005,compute-1006,hot-1001,hot-1005,comm-1001"


def alone_factors(model, workload) -> tuple:
    """Each fused table's factor from one replay of every table on a rank of its own."""
    from shardopt.costmodel.table_factors import fit_factors, rank_samples, table_factors
    from shardopt.measure.alone import alone_plan
    from shardopt.measure.replay import replay_side_by_side

    alone, plan = alone_plan(workload)
    replayed = replay_side_by_side(alone, {"alone": plan}, 3, seed=7917).per_rank["alone"]
    *samples, empty = rank_samples(model, alone, plan.tables, [(r.fwd_compute_ms, r.bwd_compute_ms) for r in replayed])
    (own,) = empty.tables.values()
    overhead = tuple(max(0.0, m - c) for m, c in zip(empty.measured_ms, own))
    samples = [dataclasses.replace(s, overhead_ms=overhead, weight=10.0) for s in samples]
    return table_factors(workload, fit_factors(samples))


def run_task(name: str, rounds: int, base: str | None, folder: Path) -> dict:
    from shardopt.bench.regimes import regime_task
    from shardopt.contracts import Breakdown, PlanConfig, rank_phases
    from shardopt.core.workload import workload_to_dict, workload_yaml
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.costmodel.store import load_model, save_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.planner.factory import plan_with
    from shardopt.torchrec.to_model import torchrec_plan

    regime, seed = name.rsplit("-", 1)
    workload = regime_task(regime, int(seed)).workload
    path, probe, alone = folder / f"{name}.yaml", folder / f"{name}-probe.json", folder / f"{name}-alone.json"
    path.write_text(workload_yaml(workload_to_dict(workload)))
    subprocess.run([sys.executable, "-m", "shardopt", "calibrate", "--probe", "--workload", str(path), "-o", str(probe),
                    *(["--base", base] if base else [])], check=True, capture_output=True)
    parts, report = load_model(probe)
    cal = parts.calibration
    factors = alone_factors(resolve_cost_model(f"analytic@{probe}", workload)[0], workload)
    save_model(alone, dataclasses.replace(parts, calibration=dataclasses.replace(
        cal, table_factors=factors + cal.table_factors)), report)
    specs = {"packaged": "analytic", "probe": f"analytic@{probe}", "alone": f"analytic@{alone}"}
    models = {k: resolve_cost_model(v, workload)[0] for k, v in specs.items()}
    plans = {"torchrec": torchrec_plan(workload), "default": plan_with(workload, PlanConfig())}
    plans.update({k: plan_with(workload, PlanConfig(cost_model=v)) for k, v in specs.items() if k != "packaged"})
    measured = replay_side_by_side(workload, plans, rounds, comm=comm_for(workload, models["packaged"])).per_rank
    base_ms = Breakdown.of(measured["torchrec"]).step_ms
    out = {"step": {k: Breakdown.of(v).step_ms / base_ms for k, v in measured.items()}, "error": {}}
    for model_name, model in models.items():
        squares = []
        for plan_name, ranks in measured.items():
            got = np.array([rank_phases(r) for r in ranks])[:, [0, 2]].sum(axis=1)
            want = np.array([rank_phases(r) for r in model.breakdown(workload, plans[plan_name].tables)])[:, [0, 2]].sum(axis=1)
            e = np.log(got / want)
            squares.append(float(np.mean((e - e.mean()) ** 2)))
        out["error"][model_name] = float(np.sqrt(np.mean(squares)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=TASKS)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--base", help="calibrate --probe's --base (default: the packaged model)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="alone-factors-") as tmp:
        for name in args.tasks.split(","):
            rows[name] = r = run_task(name, args.rounds, args.base, Path(tmp))
            print(f"{name}: per-rank error packaged {r['error']['packaged']:.3f} probe {r['error']['probe']:.3f}"
                  f" alone {r['error']['alone']:.3f}; step over TorchRec's: default {r['step']['default']:.3f}"
                  f" probe {r['step']['probe']:.3f} alone {r['step']['alone']:.3f}", flush=True)
    for key in ("error", "step"):
        print(f"geomean {key}: " + " ".join(
            f"{k} {np.exp(np.mean([np.log(r[key][k]) for r in rows.values()])):.3f}"
            for k in next(iter(rows.values()))[key] if k != "torchrec"))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
