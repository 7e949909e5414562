"""The robust CP-SAT search's last steps: the bottleneck repair, then the make-up step (as
shipped) against the make-up step alone where it moves pieces (tried 2026-12-05 to plan 100
tables x 8 ranks sooner, and not kept), replayed side by side with TorchRec's.

    python benchmarks/repair_ab.py [--first-seed 1000] [--per-regime 8] [--rounds 7]

Per held-out task of every regime, plans of the packaged model as it ships (``default``) and
with its compute scaled x0.25 and x4 (deliberately wrong models, robust search), each made twice:
``new`` finishes with the make-up step alone where it moves pieces (the repair where it moves
none), ``old`` as shipped: the repair first, then the make-up step on what it kept. Cells: replayed step over TorchRec's; then
each variant's geometric mean, worst task and median of the lookups' slowest rank over the mean.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from robust import _scaled  # noqa: E402

_shipped_search = None  # IlpSearch.search as shipped, set by main()


def _makeup_first(self, workload, cost_model, tables):
    """The variant tried: the make-up step alone where it moves pieces, else the repair."""
    from shardopt.search.ilp import REPAIR_SHARE, even_makeup, repair_bottleneck

    evened, moves = even_makeup(workload, cost_model, tables, self.objective)
    if moves:
        return None, (evened, moves)
    fixed = repair_bottleneck(workload, cost_model, tables, objective=self.objective,
                              time_budget_s=max(0.2, self.time_limit_s * REPAIR_SHARE))
    return fixed, (fixed.kept(tables), 0)


def _search(self, workload, cost_model):
    """IlpSearch.search taking a finish without a repair (None) as the variant returns it."""
    from shardopt.search import ilp

    with_repair = ilp.with_repair
    ilp.with_repair = lambda result, fixed: result if fixed is None else with_repair(result, fixed)
    try:
        return _shipped_search(self, workload, cost_model)
    finally:
        ilp.with_repair = with_repair


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.regimes import REGIMES, regime_task
    from shardopt.contracts import Breakdown, PlanConfig
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.planner.factory import plan_with
    from shardopt.search.ilp import IlpSearch
    from shardopt.torchrec.to_model import torchrec_plan

    parser = argparse.ArgumentParser()
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--per-regime", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    global _shipped_search
    shipped, _shipped_search = IlpSearch._finish, IlpSearch.search
    ratios: dict[str, list[float]] = {}
    imbalance: dict[str, list[float]] = {}
    started = time.perf_counter()
    for regime in REGIMES:
        for seed in range(args.first_seed, args.first_seed + args.per_regime):
            w = regime_task(regime, seed).workload
            packaged, _ = resolve_cost_model("analytic", w)
            try:
                plans = {"torchrec": torchrec_plan(w)}
            except Exception as exc:  # TorchRec's planner found no plan: nothing to compare with
                print(f"{regime}-{seed}: TorchRec found no plan ({str(exc).splitlines()[0]})", flush=True)
                continue
            models = {"default": None, "x0.25": _scaled(packaged, 0.25), "x4": _scaled(packaged, 4.0)}
            for finish, search, label in ((_makeup_first, _search, "new"), (shipped, _shipped_search, "old")):
                IlpSearch._finish, IlpSearch.search = finish, search
                try:
                    for name, model in models.items():
                        config = PlanConfig() if model is None else PlanConfig(robust="on")
                        plans[f"{name}-{label}"] = plan_with(w, config, cost_model=model)
                finally:
                    IlpSearch._finish, IlpSearch.search = shipped, _shipped_search
            result = replay_side_by_side(w, plans, args.rounds, comm=comm_for(w, packaged))
            base = Breakdown.of(result.per_rank["torchrec"]).step_ms
            cells = []
            for name in plans:
                if name == "torchrec":
                    continue
                lookups = [r.fwd_compute_ms + r.bwd_compute_ms for r in result.per_rank[name]]
                ratios.setdefault(name, []).append(Breakdown.of(result.per_rank[name]).step_ms / base)
                imbalance.setdefault(name, []).append(max(lookups) / float(np.mean(lookups)))
                same = "=" if name.endswith("-old") and plans[name].tables == plans[name[:-4] + "-new"].tables else ""
                cells.append(f"{name} {ratios[name][-1]:.3f}{same}")
            print(f"{regime}-{seed}", " | ".join(cells), f"({time.perf_counter() - started:.0f} s)", flush=True)
    for name, values in ratios.items():
        print(f"{name}: geomean {math.exp(float(np.mean(np.log(values)))):.3f}, worst {max(values):.3f},"
              f" slowest rank / mean (median) {np.median(imbalance[name]):.3f}")
    for name in ("default", "x0.25", "x4"):
        paired = np.array(ratios[f"{name}-new"]) / np.array(ratios[f"{name}-old"])
        print(f"{name}: new over old, geomean {math.exp(float(np.mean(np.log(paired)))):.4f},"
              f" range {paired.min():.3f}-{paired.max():.3f} over {len(paired)} tasks")


if __name__ == "__main__":
    main()
