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
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from side_by_side import replay_regime_tasks  # noqa: E402


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import shardopt.search.ilp as ilp
    from shardopt.contracts import PlanConfig
    from shardopt.planner.factory import plan_with

    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=2000)
    parser.add_argument("--per-regime", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    step = ilp.even_makeup

    def make_plans(w, packaged) -> dict:
        plans = {"makeup": plan_with(w, PlanConfig())}
        ilp.even_makeup = lambda workload, model, tables, objective: (tuple(tables), 0)
        try:
            plans["robust"] = plan_with(w, PlanConfig())
        finally:
            ilp.even_makeup = step
        plans["nominal"] = plan_with(w, PlanConfig(robust="off"), cost_model=packaged)
        return plans

    print("\n".join(replay_regime_tasks(args.seed, args.per_regime, args.rounds, make_plans).summary()))


if __name__ == "__main__":
    main()
