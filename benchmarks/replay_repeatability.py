"""Replay one plan several times in one run and report how much its bottleneck moves.

    python benchmarks/replay_repeatability.py [WORKLOAD] [--repeats 3]

Writes benchmarks/results/replay_repeatability.md. The plan is shardopt's own for the workload;
compute is measured on this machine's kernels, communication from the committed CPU profile.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="fbgemm_gpu")
    from shardopt.planner import plan_workload
    from shardopt.profile.dataset import ProfileDataset
    from shardopt.measure.replay import ProfiledComm, replay_plan
    from shardopt.core.workload import read_workload

    parser = argparse.ArgumentParser()
    parser.add_argument("workload", nargs="?", default=str(ROOT / "configs/dlrm-medium.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", default=str(ROOT / "shardopt/data/profiles/cpu-full"))
    args = parser.parse_args()

    workload, sha = read_workload(args.workload)
    plan = plan_workload(workload, sha256=sha)
    comm = ProfiledComm(list(ProfileDataset(args.profile).records("a2a")), args.profile)
    rows = []
    for i in range(args.repeats):
        started = time.perf_counter()
        result = replay_plan(workload, plan, comm=comm)
        b = result.bottleneck
        compute = b.fwd_compute_ms + b.bwd_compute_ms
        rows.append((i + 1, b.rank, b.total_ms, compute, time.perf_counter() - started))
        print(f"run {i + 1}: bottleneck rank {b.rank} {b.total_ms:.1f} ms", file=sys.stderr)
    totals = [r[2] for r in rows]
    spread = (max(totals) - min(totals)) / statistics.median(totals)
    lines = [
        "# Replay repeatability",
        "",
        f"Command: `python benchmarks/replay_repeatability.py {Path(args.workload).name}"
        f" --repeats {args.repeats}`; workload `{workload.name}`, shardopt's greedy plan"
        f" (predicted bottleneck {plan.predicted.max_ms:.1f} ms by {plan.predicted.cost_model}).",
        "Compute: FBGEMM kernels on this machine, median of 10 after 3 warm-up, one thread per rank;"
        " communication: the committed CPU all-to-all profile.",
        "",
        "| run | bottleneck rank | bottleneck ms | of it compute ms | replay s |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.1f} |" for r in rows]
    lines += ["", f"Median bottleneck {statistics.median(totals):.1f} ms; (max - min) / median = {spread:.1%}."]
    out = ROOT / "benchmarks/results/replay_repeatability.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
