"""Does a replay's verdict depend on where its kernels' buffers landed? One build against a build each round.

    python benchmarks/replay_builds.py [--tasks hot-1014,hot-1010,...] [--rounds 7] [--replays 4]

First, one task's TorchRec plan, each rank built six times and timed five times per build: the
forward's time per build. Then, per task, shardopt's default plan and TorchRec's replayed side by
side ``--replays`` times with their kernels built once (``rounds_per_build`` = rounds) and built
afresh each round (the default since 2026-12-06), every rank centred as replay centres it
(:func:`shardopt.measure.replay.rank_centre`): the sd of log(shardopt's step / TorchRec's) between
the replays of one task says how much one replay's verdict is worth. Puts its tables on top of
``benchmarks/results/replay_builds.md`` (earlier runs kept below).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from on_top import machine, put_on_top  # noqa: E402

TASKS = "hot-1014,hot-1010,hot-1005,compute-1015,compute-1000,comm-1010"


def _builds(task_name: str) -> list[str]:
    """The forward of each rank of the task's TorchRec plan, per build: six builds, five timings each."""
    import torch

    from shardopt.bench.regimes import regime_task
    from shardopt.measure.replay import PlanReplay
    from shardopt.torchrec.to_model import torchrec_plan

    torch.set_num_threads(1)
    regime, seed = task_name.split("-")
    workload = regime_task(regime, int(seed)).workload
    replay = PlanReplay(workload, torchrec_plan(workload))
    lines = [f"`{task_name}`, TorchRec's plan: each rank's forward (ms, median of 5 timings) in each of six builds.", "",
             "| rank | build 1 | 2 | 3 | 4 | 5 | 6 |", "|---|---|---|---|---|---|---|"]
    for rank in range(workload.topology.world_size):
        cells = []
        for _ in range(6):
            kernels = replay.build_rank(rank)
            cells.append(statistics.median(replay.time_rank(rank, kernels, 2, 10).measured.fwd_compute_ms
                                           for _ in range(5)))
            del kernels
        lines.append(f"| {rank} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    return lines


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.regimes import regime_task
    from shardopt.contracts import Breakdown, PlanConfig
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.planner.factory import plan_with
    from shardopt.torchrec.to_model import torchrec_plan

    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default=TASKS)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--replays", type=int, default=4)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "replay_builds.md")
    args = parser.parse_args()
    started = time.perf_counter()
    tasks = args.tasks.split(",")
    lines = ["# A replay's verdict against where its kernels' buffers landed", "",
             f"Command: `python benchmarks/replay_builds.py --tasks {args.tasks} --rounds {args.rounds}"
             f" --replays {args.replays}`, {time.strftime('%Y-%m-%d')} on {machine()}.", "",
             *_builds(tasks[0]), "",
             f"Per task, shardopt's default plan over TorchRec's replayed step, in each of {args.replays} side-by-side"
             f" replays of {args.rounds} rounds; kernels built once per replay, or afresh each round.", "",
             "| task | built once | built each round |", "|---|---|---|"]
    spread: dict[str, list] = {"once": [], "each": []}
    seconds = {"once": 0.0, "each": 0.0}
    for name in tasks:
        regime, seed = name.split("-")
        workload = regime_task(regime, int(seed)).workload
        packaged, _ = resolve_cost_model("analytic", workload)
        plans = {"torchrec": torchrec_plan(workload), "default": plan_with(workload, PlanConfig())}
        cells = []
        for mode, per_build in (("once", args.rounds), ("each", 1)):
            ratios = []
            for _ in range(args.replays):
                t0 = time.perf_counter()
                result = replay_side_by_side(workload, plans, args.rounds, comm=comm_for(workload, packaged),
                                             rounds_per_build=per_build)
                seconds[mode] += time.perf_counter() - t0
                ratios.append(Breakdown.of(result.per_rank["default"]).step_ms
                              / Breakdown.of(result.per_rank["torchrec"]).step_ms)
            logs = np.log(ratios)
            spread[mode].append(logs - logs.mean())
            cells.append(" ".join(f"{r:.3f}" for r in ratios))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    count = len(tasks) * args.replays
    lines += ["| sd of log(ratio) between replays of a task | "
              + " | ".join(f"{np.concatenate(spread[m]).std(ddof=len(tasks)):.4f}" for m in ("once", "each")) + " |",
              "| seconds per replay | " + " | ".join(f"{seconds[m] / count:.1f}" for m in ("once", "each")) + " |",
              "", f"Whole run {time.perf_counter() - started:.0f} s."]
    put_on_top(args.output, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
