"""shardopt against TorchRec's EmbeddingShardingPlanner, side by side in one run.

    python benchmarks/vs_torchrec.py [--rounds 3] [--time-limit 5] [--torchrec-cap 300]

1. Predicted: for every config, shardopt's plan (CP-SAT, default cost model) and TorchRec's plan
   (its planner with its defaults, time-capped) are both scored by shardopt's default cost model.
2. Measured: on the default config both plans are replayed on this machine side by side (every
   rank of both plans in a shuffled order each round); the max over ranks of per-rank medians is
   each plan's bottleneck.
Writes benchmarks/results/vs_torchrec.md.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "configs" / "dlrm-medium.yaml"


def _torchrec_worker(path: str, queue) -> None:
    import logging

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    from shardopt.core.errors import ShardoptError
    from shardopt.core.plan import plan_to_json
    from shardopt.torchrec.to_model import torchrec_plan
    from shardopt.core.workload import read_workload

    workload, sha = read_workload(path)
    started = time.perf_counter()
    try:
        plan = torchrec_plan(workload, sha)
        queue.put((plan_to_json(plan), time.perf_counter() - started, None))
    except ShardoptError as exc:
        queue.put((None, time.perf_counter() - started, str(exc)))


def torchrec_capped(path: Path, cap_s: float):
    """(plan or None, seconds, reason) with TorchRec's planner stopped after ``cap_s``."""
    import json

    from shardopt.core.plan import plan_from_dict

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_torchrec_worker, args=(str(path), queue))
    proc.start()
    proc.join(cap_s)
    if proc.is_alive():
        proc.terminate()
        proc.join()
        return None, cap_s, f"> {cap_s:.0f} s cap"
    text, seconds, reason = queue.get()
    return (plan_from_dict(json.loads(text)) if text else None), seconds, reason


def main() -> None:
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="fbgemm_gpu")
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.arithmetic.checks import check_plan
    from shardopt.compare import predicted, timed
    from shardopt.contracts import PlanConfig
    from shardopt.planner import plan_with
    from shardopt.profile.dataset import ProfileDataset
    from shardopt.measure.replay import ProfiledComm, replay_side_by_side
    from shardopt.core.workload import read_workload

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--torchrec-cap", type=float, default=300.0)
    args = parser.parse_args()

    lines = [
        "# shardopt vs TorchRec's EmbeddingShardingPlanner",
        "",
        f"Command: `python benchmarks/vs_torchrec.py --rounds {args.rounds} --time-limit"
        f" {args.time_limit:g} --torchrec-cap {args.torchrec_cap:g}`, one run on this machine (2 cores).",
        "",
        "## Predicted, both plans scored by shardopt's default cost model",
        "",
        "Step: the critical path of a synchronous step (each phase's slowest rank, summed), what"
        " shardopt minimises; the bottleneck rank's total in brackets.",
        "",
        "| config | cost model | shardopt step ms | TorchRec step ms | ratio | shardopt plan s | TorchRec plan s |",
        "|---|---|---|---|---|---|---|",
    ]
    plans = {}
    for config in sorted((ROOT / "configs").glob("*.yaml")):
        workload, sha = read_workload(config)
        model, _ = resolve_cost_model("analytic", workload)
        # the CLI's and the plugin's configuration, through the same factory
        ours, ours_s = timed(lambda: plan_with(workload, PlanConfig(time_limit_s=args.time_limit),
                                               cost_model=model, sha256=sha))
        theirs, theirs_s, reason = torchrec_capped(config, args.torchrec_cap)
        def scored(plan) -> tuple[float, float]:
            score = predicted(model, workload, plan)
            return score.step_ms, score.bottleneck_ms

        ours_ms, ours_b = scored(ours)
        if theirs is None:
            lines.append(f"| {config.stem} | {model.name} | {ours_ms:.2f} ({ours_b:.2f}) | no plan ({reason}) | - |"
                         f" {ours_s:.1f} | {theirs_s:.1f} |")
        else:
            assert check_plan(workload, theirs).valid and check_plan(workload, ours).valid
            theirs_ms, theirs_b = scored(theirs)
            lines.append(f"| {config.stem} | {model.name} | {ours_ms:.2f} ({ours_b:.2f}) | {theirs_ms:.2f}"
                         f" ({theirs_b:.2f}) | {ours_ms / theirs_ms:.3f} ({ours_b / theirs_b:.3f}) |"
                         f" {ours_s:.1f} | {theirs_s:.1f} |")
        plans[config] = (workload, ours, theirs)
        print(lines[-1], file=sys.stderr)

    workload, ours, theirs = plans[DEFAULT]
    from shardopt.costmodel.registry import embedded_model_path, workload_hardware
    from shardopt.costmodel.store import load_model
    from shardopt.profile.dataset import cpu_fingerprint

    model_cpu = load_model(embedded_model_path(workload_hardware(workload)))[1]["trained_on"].get("cpu_id")
    comm_dir = ROOT / "shardopt/data/profiles/cpu-full"
    comm = ProfiledComm(list(ProfileDataset(comm_dir).records("a2a")), str(comm_dir.relative_to(ROOT)))
    side = replay_side_by_side(workload, {"shardopt": ours, "torchrec": theirs}, args.rounds, comm=comm)
    rounds = [(a, b, a / b) for a, b in zip(side.runs["shardopt"], side.runs["torchrec"])]
    mine, other = side.bottleneck_ms("shardopt"), side.bottleneck_ms("torchrec")

    def compute_max(name: str) -> float:
        return max(r.fwd_compute_ms + r.bwd_compute_ms for r in side.per_rank[name])

    lines += [
        "",
        f"## Measured on the default config ({DEFAULT.stem}), replayed side by side",
        "",
        "Replay: FBGEMM kernels on this machine; every rank of both plans built once and timed in"
        " turns (warm-up 2, median of 5 iterations per turn, each on a new batch), all turns in a"
        " shuffled order each round (`shardopt.measure.replay.replay_side_by_side`, as the bench does);"
        " communication from the committed CPU all-to-all profile (gloo, 8 processes on this 2-core host: a latency floor"
        " of ~5 ms per collective and super-linear growth past 4 MB, which punishes a rank that"
        f" sends much more than the others). Machine: {cpu_fingerprint()}; the cost model was"
        f" profiled on {model_cpu or 'an unrecorded CPU'}.",
        "",
        "| round | shardopt bottleneck ms | TorchRec bottleneck ms | ratio |",
        "|---|---|---|---|",
    ]
    lines += [f"| {i + 1} | {a:.1f} | {b:.1f} | {r:.3f} |" for i, (a, b, r) in enumerate(rounds)]
    lines += [
        "",
        f"Step (critical path of per-rank medians): shardopt {side.step_ms('shardopt'):.1f} ms, TorchRec"
        f" {side.step_ms('torchrec'):.1f} ms, ratio **{side.step_ms('shardopt') / side.step_ms('torchrec'):.3f}**.",
        "",
        f"Bottleneck (max over ranks of per-rank medians): shardopt {mine:.1f} ms, TorchRec"
        f" {other:.1f} ms, ratio {mine / other:.3f}; median of the per-round bottleneck ratios"
        f" {statistics.median(r for _, _, r in rounds):.3f}.",
        "",
        "Compute alone (the busiest rank's median forward + backward kernel time, without"
        f" communication), ratio: {compute_max('shardopt') / compute_max('torchrec'):.3f}.",
    ]
    out = ROOT / "benchmarks" / "results" / "vs_torchrec.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
