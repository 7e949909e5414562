"""Which finished plan the CP-SAT search keeps: the solver's plan finished (repair, make-up) as
before 2026-12-05, against the better of it and the warm start's finish (made beside the solver)
as the whole model rates them, replayed side by side with TorchRec's.

    python benchmarks/finish_ab.py [--first-seed 1000] [--per-regime 8] [--rounds 7]

Per held-out task of every regime, plans of the packaged model as it ships (``default``) and
with its compute scaled x0.25 and x4 (deliberately wrong models, robust search), each made twice
(``=`` in a task's line: ``old`` is the same plan as ``new``): ``new`` as shipped, ``old`` always
the solver's plan finished where the solver's unfinished plan was kept. Cells: replayed step over
TorchRec's / lookups' slowest rank over the mean; then each variant's geometric mean, worst task
and median imbalance, and per model new over old, over every task and over those whose plans differ.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from robust import _scaled  # noqa: E402
from side_by_side import replay_regime_tasks  # noqa: E402


def _solver_finished(self, workload, cost_model, result):
    """The rule before: the solver's plan, finished, whatever the warm start's finish rates."""
    return result, self._finish(workload, cost_model, result.tables)


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.contracts import PlanConfig
    from shardopt.planner.factory import plan_with
    from shardopt.search.ilp import IlpSearch

    parser = argparse.ArgumentParser()
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--per-regime", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    shipped = IlpSearch._better_finished
    differ: dict[str, list[bool]] = {}

    def make_plans(w, packaged) -> dict:
        plans = {}
        for name, model in (("default", None), ("x0.25", _scaled(packaged, 0.25)), ("x4", _scaled(packaged, 4.0))):
            config = PlanConfig() if model is None else PlanConfig(robust="on")
            for rule, label in ((shipped, "new"), (_solver_finished, "old")):
                IlpSearch._better_finished = rule
                try:
                    plans[f"{name}-{label}"] = plan_with(w, config, cost_model=model)
                finally:
                    IlpSearch._better_finished = shipped
            differ.setdefault(name, []).append(plans[f"{name}-new"].tables != plans[f"{name}-old"].tables)
        return plans

    tally = replay_regime_tasks(args.first_seed, args.per_regime, args.rounds, make_plans)
    print("\n".join(tally.summary()))
    for name in ("default", "x0.25", "x4"):
        paired = np.array(tally.ratios[f"{name}-new"]) / np.array(tally.ratios[f"{name}-old"])
        changed = paired[np.array(differ[name])]
        line = (f"{name}: new over old, geomean {math.exp(float(np.mean(np.log(paired)))):.4f},"
                f" range {paired.min():.3f}-{paired.max():.3f} over {len(paired)} tasks")
        if len(changed):
            line += f"; over the {len(changed)} whose plans differ {math.exp(float(np.mean(np.log(changed)))):.4f}"
        print(line)


if __name__ == "__main__":
    main()
