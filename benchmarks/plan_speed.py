"""Planning time and predicted bottleneck at scale: shardopt beside TorchRec's planner.

    python benchmarks/plan_speed.py [--torchrec-cap 60] [--time-limit 5]

Synthetic DLRM-like workloads (`shardopt synth` statistics, production-sized rows, h200 profile) of
100/400/1000 tables on 8/32/128 ranks (8 per host). shardopt runs `--search ilp` (which keeps the
greedy plan where the model is too large); TorchRec's EmbeddingShardingPlanner runs in a separate
process stopped at the cap ("> cap" when it does not finish). Both plans are scored by the same
cost model. Writes benchmarks/results/plan_speed.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

SIZES = ((100, 8), (400, 32), (1000, 128))


def main() -> None:
    from vs_torchrec import torchrec_capped

    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.arithmetic.checks import check_plan
    from shardopt.planner import plan_workload
    from shardopt.contracts import PlanConfig
    from shardopt.planner import build_search
    from shardopt.contracts import Breakdown
    from shardopt.traces.synth import SynthSpec, synth_workload
    from shardopt.core.workload import read_workload, workload_yaml

    parser = argparse.ArgumentParser()
    parser.add_argument("--torchrec-cap", type=float, default=60.0)
    parser.add_argument("--time-limit", type=float, default=5.0)
    args = parser.parse_args()
    lines = [
        "# Planning speed at scale",
        "",
        f"Command: `python benchmarks/plan_speed.py --torchrec-cap {args.torchrec_cap:g} --time-limit"
        f" {args.time_limit:g}`, one run on this machine (2 cores).",
        "",
        "Step: the critical path of a synchronous step (each phase's slowest rank, summed), what"
        " shardopt minimises; the bottleneck rank's total in brackets; the gap is the bottleneck's.",
        "",
        "| tables x ranks | shardopt s | search | shardopt step ms | gap to bound | TorchRec s | TorchRec step ms"
        " | cost model |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for tables, ranks in SIZES:
            spec = SynthSpec(name=f"speed-{tables}x{ranks}", num_tables=tables, world_size=ranks,
                             local_world_size=8, compute_device="cuda", hardware="h200",
                             hbm_cap="80GB", seed=tables)
            path = Path(tmp) / f"{spec.name}.yaml"
            path.write_text(workload_yaml(synth_workload(spec)))
            workload, sha = read_workload(path)
            model, _ = resolve_cost_model("analytic", workload)
            search = build_search(PlanConfig(time_limit_s=args.time_limit))
            started = time.perf_counter()
            ours = plan_workload(workload, sha256=sha, cost_model=model, search=search)
            ours_s = time.perf_counter() - started
            assert check_plan(workload, ours).valid
            theirs, theirs_s, reason = torchrec_capped(path, args.torchrec_cap)
            if theirs is not None:
                per_rank = model.breakdown(workload, theirs.tables)
                theirs_ms = f"{Breakdown.of(per_rank).step_ms:.2f} ({Breakdown.of(per_rank).bottleneck_ms:.2f})"
            else:
                theirs_ms = f"no plan ({reason})"
            theirs_time = f"{theirs_s:.1f}" if theirs is not None else f"> {args.torchrec_cap:g}" if "cap" in (reason or "") else f"{theirs_s:.1f}"
            info = ours.predicted.search
            lines.append(
                f"| {tables} x {ranks} | {ours_s:.1f} | {info.algorithm}: {info.status} |"
                f" {Breakdown.of(ours.predicted.per_rank).step_ms:.2f} ({ours.predicted.max_ms:.2f}) | {ours.predicted.gap:.1%}"
                f" | {theirs_time} | {theirs_ms}"
                f" | {model.name} |"
            )
            print(lines[-1], file=sys.stderr)
    out = ROOT / "benchmarks" / "results" / "plan_speed.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
