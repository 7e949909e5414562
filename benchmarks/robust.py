"""Plans under a wrong cost model, replayed side by side with TorchRec's: does the robust search hold?

    python benchmarks/robust.py [--per-regime 3] [--rounds 7] [--calibrated FILE] [--workload-budget 0]

For each held-out task of every regime (``shardopt.bench.regimes``) the plans below are made and
replayed side by side on this machine's kernels (distinct batches, interleaved ranks, comm from
the declared links); each plan's replayed step is divided by TorchRec's of the same round set.

- ``default``: ``shardopt plan`` as it ships (packaged model, ``--robust auto``);
- ``nominal``: the packaged model, ``--robust off``;
- ``calibrated``: ``--calibrated FILE`` (a ``shardopt calibrate`` model of this machine), its auto;
- ``x0.25`` / ``x4``: the packaged model's compute scaled (a deliberately wrong model),
  ``-off`` nominal search, ``-on`` robust search;
- ``noise``: each table's compute off by its own log-normal factor (log-sd ``--noise``, stable per
  table name), ``-off`` / ``-on`` likewise;
- ``probe`` / ``probe-on``: with ``--probe``, a model from ``shardopt calibrate --probe --workload`` of
  the task (20 s: the packaged model rescaled per pass on points that include the task's own
  kernels, and each table it may replicate measured as a replica: :mod:`shardopt.measure.alone`),
  its analytic part, ``--robust`` auto (off: measured here) / on; ``probe-fused``: that model
  without its replicas' factors (replicas priced by the model alone);
- ``foreign-on`` / ``foreign-off``: with ``--foreign FILE``, a model fitted on another machine
  (``benchmarks/models/cpu-avx2.json``), robust / nominal: wrong as a user's CPU finds the packaged one;
- ``workload``: with ``--workload-budget S``, a model from ``shardopt calibrate --workload`` of the
  task, S seconds, its analytic part (the task's own plans measured in the budget's last 35% and
  each table's price corrected: :mod:`shardopt.measure.refine`; batches of another seed than the
  replay's here; ``--workload-base FILE``: with that model as calibrate's ``--base``, e.g. another
  CPU's); ``workload-tree``: the same from another source tree (``--workload-tree DIR``, a ``git
  archive`` of another commit's ``shardopt``: a change to calibrate judged side by side, each
  calibration printing the model its file holds); ``workload-on``: that same file's model, ``--robust on``.

Puts on top of ``benchmarks/results/robust.md`` (``--output``; earlier runs kept below): per task,
and the geometric mean, worst task and measured bottleneck over the mean rank per variant.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from on_top import machine, put_on_top  # noqa: E402
from planner_ab import ScaledCompute  # noqa: E402

from shardopt.costmodel.analytic import AnalyticCostModel  # noqa: E402


class TableNoise(AnalyticCostModel):
    """The analytic model with each table's lookups times its own factor exp(N(0, sigma)),
    drawn from the table's name: an error of the model's kind that does not cancel on a rank."""

    def __init__(self, base: AnalyticCostModel, sigma: float) -> None:
        super().__init__(base._hardware, base.calibration)
        self.held_out, self.sigma = base.held_out, sigma

    def _factor(self, name: str) -> float:
        return float(np.exp(self.sigma * np.random.default_rng(zlib.crc32(name.encode())).standard_normal()))

    def _shard_cost(self, workload, hw, spec, cache):
        import dataclasses

        cost = super()._shard_cost(workload, hw, spec, cache)
        f = self._factor(spec.table.name.split("#")[0])
        return dataclasses.replace(cost, fwd_compute_ms=cost.fwd_compute_ms * f, bwd_compute_ms=cost.bwd_compute_ms * f)


def _scaled(base: AnalyticCostModel, factor: float) -> AnalyticCostModel:
    model = ScaledCompute(base, factor)
    model.held_out = base.held_out
    return model


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.regimes import REGIMES, regime_task
    from shardopt.contracts import Breakdown, rank_phases
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.torchrec.to_model import torchrec_plan

    parser = argparse.ArgumentParser()
    parser.add_argument("--per-regime", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=1000, help="held-out tasks' first seed (1000..)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calibrated", type=Path, help="a `shardopt calibrate` model file of this machine")
    parser.add_argument("--foreign", type=Path, help="a model file fitted on another machine")
    parser.add_argument("--noise", type=float, default=0.3)
    parser.add_argument("--workload-budget", type=float, default=0.0)
    parser.add_argument("--workload-base", type=Path, help="calibrate --workload's --base (default: the packaged"
                        " model): another CPU's model, as wrong here as the packaged one is on a user's CPU")
    parser.add_argument("--workload-tree", type=Path, help="with --workload-budget: also calibrate --workload"
                        " run from this source tree (another commit's shardopt), as workload-tree")
    parser.add_argument("--probe", action="store_true", help="add probe and probe-on: calibrate --probe --workload")
    parser.add_argument("--only", default="", help="comma-separated variants (default: all)")
    parser.add_argument("--regimes", default="", help="comma-separated regimes (default: all)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "robust.md")
    args = parser.parse_args()

    started = time.perf_counter()
    rows, ratios, imbalance, level = [], {}, {}, {}
    for regime in [r for r in REGIMES if not args.regimes or r in args.regimes.split(",")]:
        for i in range(args.per_regime):
            task = regime_task(regime, args.first_seed + i)
            w = task.workload
            packaged, _ = resolve_cost_model("analytic", w)
            makers = _makers(args, w, packaged)
            try:
                plans = {"torchrec": torchrec_plan(w)}
            except Exception as exc:  # TorchRec's planner found no plan: nothing to compare with
                print(f"| {task.name} | TorchRec: no plan ({exc}) |", flush=True)
                continue
            for name, make in makers.items():
                plans[name] = make()
            result = replay_side_by_side(w, plans, args.rounds, comm=comm_for(w, packaged))
            base = Breakdown.of(result.per_rank["torchrec"]).step_ms
            cells = []
            for name in ("torchrec", *makers):  # each phase's mean rank: the step were its ranks level
                phases = np.array([rank_phases(r) for r in result.per_rank[name]])
                level.setdefault(name, []).append(float(phases.mean(axis=0).sum()) / base)
            for name in makers:
                per_rank = result.per_rank[name]
                ratio = Breakdown.of(per_rank).step_ms / base
                totals = [r.fwd_compute_ms + r.bwd_compute_ms for r in per_rank]
                ratios.setdefault(name, []).append(ratio)
                imbalance.setdefault(name, []).append(max(totals) / float(np.mean(totals)))
                cells.append(f"{ratio:.3f}")
            rows.append(f"| {task.name} | " + " | ".join(cells) + " |")
            print(rows[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
    names = list(ratios)
    gmean = {n: math.exp(float(np.mean(np.log(ratios[n])))) for n in names}
    lines = [
        "# Plans under a wrong cost model, replayed beside TorchRec's",
        "",
        f"Command: `python benchmarks/robust.py --per-regime {args.per_regime} --rounds {args.rounds}"
        + (f" --first-seed {args.first_seed}" if args.first_seed != 1000 else "")
        + (f" --calibrated {args.calibrated.name}" if args.calibrated else "")
        + (f" --foreign {args.foreign}" if args.foreign else "")
        + (f" --workload-budget {args.workload_budget:g}" if args.workload_budget else "")
        + (f" --workload-base {args.workload_base}" if args.workload_base else "")
        + (f" --workload-tree {args.workload_tree}" if args.workload_tree else "")
        + (" --probe" if args.probe else "")
        + (f" --only {args.only}" if args.only else "")
        + (f" --regimes {args.regimes}" if args.regimes else "")
        + f" --noise {args.noise:g}`, one run, {time.perf_counter() - started:.0f} s, {time.strftime('%Y-%m-%d')}"
        f" on {machine()}. Held-out tasks"
        f" (seeds {args.first_seed}..) of every regime; each cell is the plan's replayed step over TorchRec's in the same"
        " side-by-side replay (lower is better). Variants: see the script's docstring.",
        "",
        "| task | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        *rows,
        "| **geomean** | " + " | ".join(f"**{gmean[n]:.3f}**" for n in names) + " |",
        "| worst | " + " | ".join(f"{max(ratios[n]):.3f}" for n in names) + " |",
        "| lookups' slowest rank / mean, median | " + " | ".join(f"{np.median(imbalance[n]):.3f}" for n in names) + " |",
        "| tasks with slowest rank <= 1.10x mean | "
        + " | ".join(f"{np.mean(np.array(imbalance[n]) <= 1.10):.0%}" for n in names) + " |",
        "| the same plans, ranks level (each phase's mean rank), geomean | "
        + " | ".join(f"{math.exp(float(np.mean(np.log(level[n])))):.3f}" for n in names) + " |",
        "",
        f"TorchRec's plans with level ranks: {math.exp(float(np.mean(np.log(level['torchrec'])))):.3f} of their own step"
        " (geomean): what balance alone would buy them.",
    ]
    ref = "workload" if "workload" in gmean else "calibrated" if "calibrated" in gmean else None
    if ref:
        lines += ["", f"Against `{ref}` (geomean of the same tasks): "
                  + ", ".join(f"{n} {gmean[n] / gmean[ref]:.3f}" for n in names if n != ref) + "."]
    put_on_top(args.output, lines)
    print("\n".join(lines))


def _makers(args, w, packaged) -> dict:
    """Each variant's name and how its plan of ``w`` is made (see the module's docstring)."""
    from shardopt.contracts import PlanConfig
    from shardopt.core.workload import workload_to_dict, workload_yaml
    from shardopt.planner.factory import plan_with

    makers = {
        "default": lambda: plan_with(w, PlanConfig()),
        "nominal": lambda: plan_with(w, PlanConfig(robust="off"), cost_model=packaged),
    }
    if args.calibrated:
        makers["calibrated"] = lambda: plan_with(w, PlanConfig(cost_model=f"analytic@{args.calibrated}"))
    if args.foreign:
        for mode in ("on", "off"):
            makers[f"foreign-{mode}"] = (lambda r=mode: plan_with(w, PlanConfig(cost_model=f"analytic@{args.foreign}",
                                                                                 robust=r)))
    for name, model in (("x0.25", _scaled(packaged, 0.25)), ("x4", _scaled(packaged, 4.0)),
                        ("noise", TableNoise(packaged, args.noise))):
        for mode in ("off", "on"):
            makers[f"{name}-{mode}"] = (lambda m=model, r=mode: plan_with(w, PlanConfig(robust=r), cost_model=m))
    if args.workload_budget:  # one calibration, planned as its file says (auto) and robust
        workload = functools.cache(lambda: _workload_calibrated(w, args.workload_budget, workload_yaml,
                                                                workload_to_dict, base=args.workload_base,
                                                                robust=("auto", "on")))
        makers["workload"] = lambda: workload()["auto"]
        makers["workload-on"] = lambda: workload()["on"]
        if args.workload_tree:
            makers["workload-tree"] = lambda: _workload_calibrated(w, args.workload_budget, workload_yaml,
                                                                   workload_to_dict, tree=args.workload_tree,
                                                                   base=args.workload_base)
    if args.probe:  # one probe, three plans of it
        probe = functools.cache(lambda: _workload_calibrated(w, 0, workload_yaml, workload_to_dict,
                                                             robust=("auto", "on", "fused")))
        makers["probe"] = lambda: probe()["auto"]
        makers["probe-on"] = lambda: probe()["on"]
        makers["probe-fused"] = lambda: probe()["fused"]
    if args.only:
        makers = {k: makers[k] for k in args.only.split(",") if k in makers}  # columns in --only's order
    return makers


def _workload_calibrated(workload, budget: float, workload_yaml, workload_to_dict, robust=None, tree=None,
                         base=None):
    """``shardopt calibrate --workload`` of this task (budget 0: ``--probe --workload``, 20 s; from
    the source ``tree`` and with the ``--base`` file ``base`` where given), then its plan with the
    model it wrote; with ``robust`` (modes of ``plan --robust``), mode -> plan. Prints which of
    calibrate's candidates the file holds."""
    from shardopt.contracts import PlanConfig
    from shardopt.planner.factory import plan_with

    with tempfile.TemporaryDirectory() as tmp:
        path, model = Path(tmp) / "w.yaml", Path(tmp) / "model.json"
        path.write_text(workload_yaml(workload_to_dict(workload)))
        how = (["--budget", f"{budget:g}"] if budget else ["--probe"]) + (["--base", str(base.resolve())] if base else [])
        env = {**os.environ, "PYTHONPATH": str(tree)} if tree else None
        subprocess.run([sys.executable, "-m", "shardopt", "calibrate", "--workload", str(path), *how, "-o", str(model)],
                       check=True, capture_output=True, env=env, cwd=tmp)  # not this folder's shardopt first
        data = json.loads(model.read_text())
        print(f"  {workload.name}{' (' + tree.name + ')' if tree else ''}: the file's model"
              f" {data.get('report', {}).get('model')}", flush=True)
        if robust is None:
            return plan_with(workload, PlanConfig(cost_model=f"analytic@{model}"))
        cal = data.get("calibration", {})
        cal["table_factors"] = [f for f in cal.get("table_factors", []) if f.get("kernel", "fused") == "fused"]
        fused = Path(tmp) / "fused.json"  # "fused": the probe without its replicas' factors
        fused.write_text(json.dumps(data))
        return {mode: plan_with(workload, PlanConfig(cost_model=f"analytic@{fused if mode == 'fused' else model}",
                                                     robust="auto" if mode == "fused" else mode))
                for mode in robust}


if __name__ == "__main__":
    main()
