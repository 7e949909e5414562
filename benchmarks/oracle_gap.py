"""How far the default search's predicted step is from an oracle run of the same search.

    python benchmarks/oracle_gap.py [--suite regimes] [--time-limit 5] [--oracle-factor 20] [--tasks N]

``--tasks N`` keeps the first N tasks of each regime (task names are ``<regime>-<seed>``).

Per task: shardopt as shipped (`PlanConfig()`: CP-SAT from the greedy, TorchRec's cuts, the time
limit), and the oracle: the same search over every candidate (`--candidates all`) at
``oracle-factor`` times the time limit. Both plans are scored by the same model (the one the plan
used); the ratio default / oracle is how much a longer, wider search would still have found.
Writes benchmarks/results/oracle_gap.md.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.suites import suite_tasks
    from shardopt.contracts import Breakdown, PlanConfig
    from shardopt.planner import plan_with, resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="regimes")
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--oracle-factor", type=float, default=20.0)
    parser.add_argument("--tasks", type=int, default=0, help="only the first N tasks of each regime (0: all)")
    args = parser.parse_args()
    tasks = suite_tasks(args.suite)
    if args.tasks:
        seen: dict[str, int] = {}
        kept = []
        for task in tasks:
            regime = task.name.rsplit("-", 1)[0]
            seen[regime] = seen.get(regime, 0) + 1
            if seen[regime] <= args.tasks:
                kept.append(task)
        tasks = kept
    default = PlanConfig(time_limit_s=args.time_limit)
    oracle = PlanConfig(time_limit_s=args.time_limit * args.oracle_factor, candidates="all")
    rows, ratios = [], []
    for task in tasks:
        model, _ = resolve_model(default, task.workload)
        steps, seconds = [], []
        for config in (default, oracle):
            started = time.perf_counter()
            plan = plan_with(task.workload, config, cost_model=model)
            seconds.append(time.perf_counter() - started)
            steps.append(Breakdown.of(model.breakdown(task.workload, plan.tables)).step_ms)
        ratio = steps[0] / steps[1]
        ratios.append(ratio)
        rows.append(f"| {task.name} | {steps[0]:.3f} | {seconds[0]:.1f} | {steps[1]:.3f} | {seconds[1]:.1f}"
                    f" | {ratio:.3f} |")
        print(rows[-1], flush=True)
    lines = [
        "# Default search against an oracle run", "",
        f"Command: `python benchmarks/oracle_gap.py --suite {args.suite} --time-limit {args.time_limit:g}"
        f" --oracle-factor {args.oracle_factor:g}{f' --tasks {args.tasks}' if args.tasks else ''}`,"
        " one run on this machine (2 cores). Predicted step (critical path), both plans scored by the"
        " model they were planned with.", "",
        f"Default over oracle: median {statistics.median(ratios):.3f}, worst {max(ratios):.3f};"
        f" within 3% on {sum(r <= 1.03 for r in ratios)} of {len(ratios)} tasks.", "",
        "| task | default step ms | default s | oracle step ms | oracle s | default / oracle |",
        "|---|---|---|---|---|---|", *rows, "",
    ]
    out = ROOT / "benchmarks" / "results" / "oracle_gap.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
