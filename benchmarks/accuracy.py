"""Cost-model accuracy on plans no model has seen, judged by replay on this machine's kernels.

    python benchmarks/accuracy.py [--model FILE] [--workloads 6] [--plans 5]

Held-out set: DLRM-like workloads drawn with `shardopt synth` statistics under seeds the profile
never used (so their tables were not in training), each with plans of three kinds: shardopt's (its
default search), TorchRec's (EmbeddingShardingPlanner) and random ones. Every plan is replayed (compute measured per rank; communication from the committed CPU
all-to-all profile). Per model: MAPE of per-rank compute (each rank's fused kernels) and the
Spearman rank correlation of plan bottlenecks within each workload, averaged. Models: analytic-v0
(uncalibrated), the calibrated analytic model, the learned model, TorchRec's EmbeddingPerfEstimator.

Writes benchmarks/results/accuracy.md and accuracy.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def held_out_workloads(count: int, seed: int):
    from shardopt.traces.synth import SynthSpec, synth_workload
    from shardopt.core.workload import workload_from_dict

    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        world = int(rng.choice([2, 4]))
        spec = SynthSpec(
            name=f"heldout-{i}", num_tables=int(rng.integers(8, 21)), world_size=world,
            local_world_size=world, batch_size=int(rng.choice([256, 512])), hbm_cap="4GB",
            rows_scale=float(rng.uniform(0.005, 0.02)), seed=10_000 + seed * 100 + i,
        )
        out.append(workload_from_dict(synth_workload(spec), spec.name))
    return out


def _summary(rows: list[dict], plans: list[dict], name: str) -> dict:
    """One model's figures over every replayed rank and plan."""
    kind_of = lambda plan: "random" if plan.startswith("random") else plan  # noqa: E731
    ape = [abs(r[name] - r["measured_ms"]) / r["measured_ms"] for r in rows]
    by_kind = {k: [a for a, r in zip(ape, rows) if kind_of(r["plan"]) == k] for k in ("shardopt", "torchrec", "random")}
    per_workload = []
    for wl in sorted({p["workload"] for p in plans}):
        group = [p for p in plans if p["workload"] == wl]
        rho = spearmanr([p["measured_ms"] for p in group], [p[name] for p in group]).statistic
        per_workload.append(0.0 if np.isnan(rho) else float(rho))
    log_ratio = np.log([r["measured_ms"] / r[name] for r in rows])
    steady = np.array([r["steady_ms"] / r[name] for r in rows])
    uniform = float(np.median(steady))  # one speed factor: never changes which plan wins
    return {
        "rank_compute_mape": float(np.mean(ape)),
        "rank_compute_mape_steady": float(np.mean(np.abs(1 / steady - 1))),
        "rank_compute_mape_steady_uniform": float(np.mean(np.abs(uniform / steady - 1))),
        "uniform_factor": uniform,
        # Error once the run's overall speed is taken out: a uniform factor never changes
        # which plan wins, and on a shared VM it moves from run to run.
        "rank_compute_shape_error": float(np.std(log_ratio)),
        "rank_compute_median_ape": float(np.median(ape)),
        "bottleneck_spearman_mean": float(np.mean(per_workload)),
        "rank_compute_mape_by_kind": {k: float(np.mean(v)) if v else None for k, v in by_kind.items()},
        # Does the model name the plan's slowest rank (compute) as the slowest? Share of plans.
        "bottleneck_rank_hit": float(np.mean([
            _slowest(rows, p, "measured_ms") == _slowest(rows, p, name) for p in plans
        ])),
    }


def _replay_workload(workload, candidates, models, comm, probe, repeats, rows, plans) -> None:
    """Replay each plan ``repeats`` times, the plans in turns (so drift falls on all of them), and
    keep each rank's median: one replay of a few-ms rank moved by 10-20% on this VM."""
    from shardopt.measure.replay import replay_plan

    runs: dict[str, list] = {label: [] for label, _ in candidates}
    for _ in range(repeats):
        for label, plan in candidates:
            before = probe.time_us()
            measured = replay_plan(workload, plan, comm=comm).per_rank
            runs[label].append((measured, (before + probe.time_us()) / 2))  # the probe around it
    for label, plan in candidates:
        predicted = {name: fn(workload, plan.tables) for name, fn in models.items()}
        first = runs[label][0][0]
        for r in first:
            computes = [m[r.rank].fwd_compute_ms + m[r.rank].bwd_compute_ms for m, _ in runs[label]]
            if min(computes) <= 0:
                continue
            rows.append({
                "workload": workload.name, "plan": label, "rank": r.rank,
                "measured_ms": float(np.median(computes)), "runs_ms": computes,
                "probe_us": [speed for _, speed in runs[label]],
                **{name: p[r.rank].fwd_compute_ms + p[r.rank].bwd_compute_ms for name, p in predicted.items()},
            })
        plans.append({
            "workload": workload.name, "plan": label,
            "measured_ms": float(np.median([max(x.total_ms for x in m) for m, _ in runs[label]])),
            **{name: max(x.total_ms for x in p) for name, p in predicted.items()},
        })
        print(f"{workload.name} {label}: replayed {repeats}x", file=sys.stderr)


def _models(model: str, also: list[str]) -> tuple[dict, dict]:
    """The models scored, by name, and the main model file's metadata."""
    from shardopt.costmodel.analytic import AnalyticCostModel
    from shardopt.costmodel.learned import LearnedCostModel
    from shardopt.costmodel.store import load_model
    from shardopt.torchrec.torchrec_costs import torchrec_breakdown

    parts, meta = load_model(model)
    models = {
        "analytic-v0": AnalyticCostModel().breakdown,
        "analytic-calibrated": AnalyticCostModel(calibration=parts.calibration).breakdown,
        "learned": LearnedCostModel(parts).breakdown,
        "torchrec-estimator": torchrec_breakdown,
    }
    for other in also:  # on the same measurements: this VM's speed drifts between runs
        other_parts, _ = load_model(other)
        models[f"analytic-calibrated ({Path(other).name})"] = AnalyticCostModel(
            calibration=other_parts.calibration).breakdown
        models[f"learned ({Path(other).name})"] = LearnedCostModel(other_parts).breakdown
    return models, meta


class _Probe:
    """One fixed fused kernel, timed before and after every replay.

    This VM's speed moves within a minute: in one run, three workloads replayed back to back
    came out 20% faster than the rest under every model. Scaling each replay by the probe's time
    around it (over the probe's median for the run) takes that drift out; the raw figures stay.
    """

    def __init__(self) -> None:
        from shardopt.profile.bags import sample_bags
        from shardopt.profile.kernels import KernelSpec
        from shardopt.profile.tbe import DISTINCT_BATCHES, PreparedKernel

        tables = held_out_workloads(1, 999)[0].tables[:8]
        rng = np.random.default_rng(0)
        batches = [[sample_bags(t, 1024, rng) for t in tables] for _ in range(DISTINCT_BATCHES)]
        specs = [KernelSpec(t.num_embeddings, t.embedding_dim) for t in tables]
        self.kernel = PreparedKernel(specs, batches, backend="auto", device="cpu", precision="fp32")

    def time_us(self) -> float:
        m = self.kernel.time(warmup=1, iters=8)
        return m.fwd.median_us + m.bwd.median_us


def _slowest(rows: list[dict], plan: dict, column: str) -> int:
    """The rank of ``plan`` whose compute ``column`` says is largest."""
    ranks = [r for r in rows if r["workload"] == plan["workload"] and r["plan"] == plan["plan"]]
    return max(ranks, key=lambda r: (r[column], -r["rank"]))["rank"] if ranks else -1


def main() -> None:
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="fbgemm_gpu")
    from shardopt.costmodel.registry import embedded_model_path
    from shardopt.planner import plan_workload
    from shardopt.core.errors import ShardoptError
    from shardopt.search.ilp import IlpSearch
    from shardopt.torchrec.to_model import torchrec_plan
    from shardopt.profile.dataset import ProfileDataset
    from shardopt.measure.replay import ProfiledComm
    from shardopt.search.sampler import PlanSampler

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(embedded_model_path("cpu")))
    parser.add_argument("--workloads", type=int, default=6)
    parser.add_argument("--plans", type=int, default=5, help="random plans per workload (+ greedy)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1, help="replays of each plan, in turns; per-rank medians")
    parser.add_argument("--profile", default=str(ROOT / "shardopt/data/profiles/cpu-full"))
    parser.add_argument("--also", action="append", default=[], metavar="FILE",
                        help="another model file, scored on the same replays (repeatable)")
    args = parser.parse_args()

    models, meta = _models(args.model, args.also)
    comm = ProfiledComm(list(ProfileDataset(args.profile).records("a2a")), args.profile)
    probe = _Probe()
    started = time.perf_counter()
    rows = []  # one per rank: measured compute and each model's
    plans = []  # one per plan: measured bottleneck and each model's
    for w_index, workload in enumerate(held_out_workloads(args.workloads, args.seed)):
        candidates = [("shardopt", plan_workload(workload, search=IlpSearch(time_limit_s=2.0)))]
        try:
            candidates.append(("torchrec", torchrec_plan(workload)))
        except ShardoptError as exc:  # TorchRec finds no plan: say so, score the rest
            print(f"{workload.name}: no TorchRec plan ({exc})", file=sys.stderr)
        candidates += [
            (f"random{j}", plan_workload(workload, search=PlanSampler(seed=1000 * w_index + j)))
            for j in range(args.plans)
        ]
        _replay_workload(workload, candidates, models, comm, probe, args.repeats, rows, plans)
    reference = float(np.median([p for r in rows for p in r["probe_us"]]))
    for r in rows:  # measured as if the machine ran at its median speed over the run
        r["steady_ms"] = float(np.median([m * reference / p for m, p in zip(r["runs_ms"], r["probe_us"])]))
    summary = {name: _summary(rows, plans, name) for name in models}
    elapsed = time.perf_counter() - started
    command = (f"python benchmarks/accuracy.py --workloads {args.workloads} --plans {args.plans} --seed {args.seed}"
               f" --repeats {args.repeats}")
    command += "".join(f" --also {other}" for other in args.also)
    lines = [
        "# Cost-model accuracy on held-out plans, judged by replay",
        "",
        f"Command: `{command}` ({elapsed:.0f} s on this machine). Model file: "
        f"`{Path(args.model).relative_to(ROOT) if Path(args.model).is_relative_to(ROOT) else args.model}`"
        f" (trained on {meta['trained_on'].get('device_name')}; its own held-out kernel MAPE:"
        f" learned {meta['report'].get('held_out_mape', {}).get('learned', float('nan')):.1%}).",
        f"Held out: {args.workloads} synthetic DLRM-like workloads (2 or 4 CPU ranks, 8-20 tables drawn"
        " under seeds the profile never used), each with shardopt's plan (default search, 2 s), TorchRec's and"
        f" {args.plans} random plans: {len(plans)} plans, {len(rows)} ranks. Measured: replay ({args.repeats}x per"
        " plan, the plans in turns, per-rank medians), compute"
        " medians of 10 iterations (a new batch each) after 3 warm-up per rank (FBGEMM kernels,"
        " one thread);"
        " communication from the committed CPU all-to-all profile. Drift-corrected: each replay scaled"
        " by a fixed probe kernel timed around it (over the probe's median for the run); a uniform"
        " factor on top (the median measured/predicted) takes out the machine's speed since the model"
        " was fitted, which never changes which plan wins.",
        "",
        "| model | per-rank compute MAPE | shardopt's plans | TorchRec's | random | median APE |"
        " sd of log(measured/predicted) | drift-corrected MAPE | and one uniform factor (factor) |"
        " slowest rank named | bottleneck Spearman (mean over workloads) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    pct = lambda v: "-" if v is None else f"{v:.1%}"  # noqa: E731
    for name, s in summary.items():
        k = s["rank_compute_mape_by_kind"]
        lines.append(
            f"| {name} | {s['rank_compute_mape']:.1%} | {pct(k['shardopt'])} | {pct(k['torchrec'])}"
            f" | {pct(k['random'])} | {s['rank_compute_median_ape']:.1%}"
            f" | {s['rank_compute_shape_error']:.3f} | {s['rank_compute_mape_steady']:.1%}"
            f" | {s['rank_compute_mape_steady_uniform']:.1%} ({s['uniform_factor']:.2f})"
            f" | {s['bottleneck_rank_hit']:.0%}"
            f" | {s['bottleneck_spearman_mean']:.2f} |"
        )
    lines += [
        "",
        "TorchRec's estimator uses its default constants (A100-class HBM; DDR for CPU) and is not"
        " fitted to this machine, so its absolute error is large by construction; its Spearman"
        " column is the fair comparison. The learned and calibrated models' communication heads are"
        " fitted to the same all-to-all profile that replay's communication comes from, so the"
        " bottleneck ranking mostly tests the compute side.",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "accuracy.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "accuracy.json").write_text(
        json.dumps({"summary": summary, "ranks": rows, "plans": plans}, indent=1) + "\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
