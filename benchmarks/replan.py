"""Re-sharding on the bench workloads: the step at half the bytes a fresh plan moves.

    python benchmarks/replan.py [--time-limit 5] [--tasks 8]

Per workload (the ci suite's tasks and configs/dlrm-medium.yaml, their tables on 8, 12 or 16 CPU
ranks, 4 per host, each rank's cap twice a balanced share at 8 ranks) and per change (8 -> 12,
8 -> 16, 16 -> 8): the old plan is shardopt's for the old world; the fresh plan is shardopt's for
the new one, its ranks matched to the old ones to keep the most bytes; the replan gets half the
bytes the fresh plan moves. Reported: both predicted steps and their ratio, the bytes, and the
forced bytes (what only dropped ranks held). The frontier of dlrm-medium is plotted per change.
Writes benchmarks/results/replan.md and replan-<change>.png. Predictions only: the step is the
cost model's, as a plan's is; moving bytes is not timed here.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CHANGES = ((8, 12), (8, 16), (16, 8))
LOCAL = 4


def resized(workload, world: int, cap: int):
    import dataclasses

    topo = dataclasses.replace(workload.topology, world_size=world, local_world_size=LOCAL, hbm_cap=cap)
    return dataclasses.replace(workload, topology=topo)


def workloads(count: int):
    from shardopt.bench.suites import suite_tasks
    from shardopt.core.layout import shard_bytes
    from shardopt.core.workload import read_workload

    out = [(t.name, t.workload) for t in suite_tasks("ci")[:count]]
    out.append(("dlrm-medium", read_workload(ROOT / "configs" / "dlrm-medium.yaml")[0]))
    for name, wl in out:
        total = sum(shard_bytes(wl.optimizer, t, t.num_embeddings, t.embedding_dim) for t in wl.tables)
        biggest = max(shard_bytes(wl.optimizer, t, t.num_embeddings, t.embedding_dim) for t in wl.tables)
        yield name, wl, int(max(2 * total / 8, 1.2 * biggest))


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.contracts import PlanConfig
    from shardopt.core.units import format_bytes
    from shardopt.planner import plan_with, resolve_model
    from shardopt.planner.replan import move_frontier, replan_start, replan_with
    from shardopt.planner.replan_report import frontier_png, frontier_table

    parser = argparse.ArgumentParser()
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--tasks", type=int, default=8)
    args = parser.parse_args()
    config = PlanConfig(time_limit_s=args.time_limit)
    rows, ratios, frontiers = [], {c: [] for c in CHANGES}, []
    started = time.perf_counter()
    for name, base, cap in workloads(args.tasks):
        for old_world, new_world in CHANGES:
            old_wl, new_wl = resized(base, old_world, cap), resized(base, new_world, cap)
            model = resolve_model(config, new_wl)[0]
            old = plan_with(old_wl, config)
            start = replan_start(old, new_wl, config, cost_model=model)  # the fresh plan and its bytes
            result = replan_with(old, new_wl, config, cost_model=model, start=start,
                                 max_move=max(start.forced, start.fresh_moved // 2))
            ratio = result.step_ms() / result.step_ms(result.fresh)
            ratios[old_world, new_world].append(ratio)
            rows.append(f"| {name} | {old_world} -> {new_world} | {len(base.tables)} |"
                        f" {result.step_ms(result.fresh):.3f} | {format_bytes(result.fresh_moved_bytes)} |"
                        f" {result.step_ms():.3f} | {format_bytes(result.moved_bytes)} |"
                        f" {format_bytes(result.forced_bytes)} | {ratio:.3f} |")
            print(rows[-1], flush=True)
            if name == "dlrm-medium":
                points = move_frontier(old, new_wl, config, cost_model=model, start=start)
                change = f"{old_world}to{new_world}"
                frontier_png(points, f"dlrm-medium: {old_world} -> {new_world} ranks",
                             RESULTS / f"replan-{change}.png")
                frontiers.append(f"### dlrm-medium, {old_world} -> {new_world}\n\n![](replan-{change}.png)\n\n"
                                 + frontier_table(points))
    lines = [
        "# Re-sharding: the step at half the bytes a fresh plan moves", "",
        f"Command: `python benchmarks/replan.py --time-limit {args.time_limit:g} --tasks {args.tasks}`"
        f" ({time.perf_counter() - started:.0f} s on this machine). Predicted steps (the default cost model);"
        " each workload's tables on 8, 12 or 16 CPU ranks (4 per host), each rank's cap twice a balanced"
        " share at 8. Fresh: shardopt's plan for the new world, its ranks matched to the old ones to keep the"
        " most bytes. Replan: `--max-move` half of what the fresh plan moves (or the forced bytes, if more).",
        "", "| change | median replan / fresh | worst | within 5% |", "|---|---|---|---|",
    ]
    for change, values in ratios.items():
        lines.append(f"| {change[0]} -> {change[1]} | {statistics.median(values):.3f} | {max(values):.3f} |"
                     f" {sum(v <= 1.05 for v in values)} of {len(values)} |")
    lines += ["", "| workload | change | tables | fresh step (ms) | fresh moves | replan step (ms) | replan moves |"
              " forced | replan / fresh |", "|---|---|---|---|---|---|---|---|---|", *rows, "", "## Frontiers", "",
              *frontiers]
    (RESULTS / "replan.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'replan.md'}")


if __name__ == "__main__":
    main()
