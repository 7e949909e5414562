"""Plans from measured statistics against plans from TorchRec's default assumption, replayed side
by side with TorchRec's on the true data (issue 35).

    python benchmarks/measured_stats.py --tasks 6 --rounds 7 --batches 20

A TorchRec model carries no statistics: each feature pools once, ids uniform (what
``workload_from_module`` gives without ``pooling_factors``). For each held-out task of the ``hot``
regime (small tables carrying most lookups), with its true pooling and access as the truth:

- ``assumed``: shardopt's plan of the workload as the model carries it;
- ``measured``: shardopt's plan after ``--batches`` batches drawn from the true distributions were
  measured (``shardopt.traces.batches``, as ``stats --from-batches`` and
  ``ShardoptPlanner(batches=...)`` do);
- ``torchrec``: TorchRec's planner on the workload as the model carries it (its default);
- ``torchrec-measured``: TorchRec's planner given the measured pooling factors (what a TorchRec
  user could pass as ``ParameterConstraints.pooling_factors``);
- ``truth``: shardopt's plan of the true workload (what perfect statistics would give).

All four are replayed side by side on the true workload (distinct batches, interleaved ranks, comm
from the declared links); each cell is a plan's replayed step over ``torchrec``'s. Writes
``benchmarks/results/measured_stats.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def batches_of(workload, count: int, seed: int = 7):
    """``count`` KJTs of the workload's tables at their true pooling and access."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from shardopt.profile.bags import sample_bags

    rng = np.random.default_rng(seed)
    for _ in range(count):
        keys, lengths, values = [], [], []
        for table in workload.tables:
            for feature in table.features:  # each feature its share of the table's pooling
                one = dataclasses.replace(table, feature_names=(feature,),
                                          pooling_factor=table.pooling_factor / len(table.features))
                bags = sample_bags(one, workload.batch_size, rng)
                keys.append(feature)
                lengths.append(bags.lengths)
                values.append(bags.ids)
        yield KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.from_numpy(np.concatenate(values)),
                                                  lengths=torch.from_numpy(np.concatenate(lengths)))


def assumed(workload):
    """The workload as a TorchRec model carries it: one lookup per feature, uniform ids."""
    from shardopt.core.workload import UniformAccess

    return dataclasses.replace(workload, tables=tuple(
        dataclasses.replace(t, pooling_factor=float(len(t.features)), access=UniformAccess()) for t in workload.tables))


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.regimes import regime_task
    from shardopt.contracts import Breakdown, PlanConfig
    from shardopt.core.errors import ShardoptError
    from shardopt.core.workload import workload_from_dict
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.planner.factory import plan_with
    from shardopt.torchrec.to_model import torchrec_plan
    from shardopt.traces.batches import measure_batches
    from shardopt.traces.to_workload import workload_with_batch_stats

    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "measured_stats.md")
    args = parser.parse_args()
    started = time.perf_counter()
    names = ("assumed", "measured", "torchrec-measured", "truth")
    rows, ratios = [], {n: [] for n in names}
    for i in range(args.tasks):
        truth = regime_task("hot", 1000 + i).workload
        blind = assumed(truth)
        tables = {f: (t.name, t.num_embeddings) for t in truth.tables for f in t.features}
        stats = measure_batches(batches_of(truth, args.batches), tables, source=truth.name)
        seen = workload_from_dict(workload_with_batch_stats(blind, stats), truth.name)
        pooled = dataclasses.replace(blind, tables=tuple(
            dataclasses.replace(t, pooling_factor=s.pooling_factor) for t, s in zip(blind.tables, seen.tables)))
        makers = {"torchrec": lambda: torchrec_plan(blind), "assumed": lambda: plan_with(blind, PlanConfig()),
                  "measured": lambda: plan_with(seen, PlanConfig()), "torchrec-measured": lambda: torchrec_plan(pooled),
                  "truth": lambda: plan_with(truth, PlanConfig())}
        plans = {}
        for name, make in makers.items():
            try:
                plans[name] = make()
            except ShardoptError as exc:  # TorchRec's planner may find no plan (its storage estimate)
                print(f"{truth.name}: {name}: {exc}", flush=True)
        if "torchrec" not in plans:
            continue
        model, _ = resolve_cost_model("analytic", truth)
        result = replay_side_by_side(truth, plans, args.rounds, comm=comm_for(truth, model))
        base = Breakdown.of(result.per_rank["torchrec"]).step_ms
        cells = []
        for name in names:
            if name not in plans:
                cells.append("no plan")
                continue
            ratio = Breakdown.of(result.per_rank[name]).step_ms / base
            ratios[name].append(ratio)
            cells.append(f"{ratio:.3f}")
        error = max(abs(s.pooling_factor / t.pooling_factor - 1) for s, t in zip(seen.tables, truth.tables))
        rows.append(f"| {truth.name} | {len(truth.tables)} | {base:.1f} | " + " | ".join(cells) + f" | {error:.1%} |")
        print(rows[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
    gmean = {n: math.exp(float(np.mean(np.log(ratios[n])))) for n in names}
    lines = [
        "# Plans from measured statistics, replayed beside TorchRec's",
        "",
        f"Command: `python benchmarks/measured_stats.py --tasks {args.tasks} --rounds {args.rounds}"
        f" --batches {args.batches}`, one run, {time.perf_counter() - started:.0f} s on this machine."
        " Held-out tasks of the hot regime (seeds 1000..); each cell is the plan's replayed step on the"
        " true data over TorchRec's default plan in the same side-by-side replay (lower is better);"
        " variants: see the script's docstring.",
        "",
        "| task | tables | torchrec step (ms) | " + " | ".join(names) + " | measured pooling, worst error |",
        "|---|---|---|" + "---|" * len(names) + "---|",
        *rows,
        "| **geomean** | | | " + " | ".join(f"**{gmean[n]:.3f}**" for n in names) + " | |",
        "| tasks | | | " + " | ".join(str(len(ratios[n])) for n in names) + " | |",
        "| worst | | | " + " | ".join(f"{max(ratios[n]):.3f}" for n in names) + " | |",
        "",
        f"measured over assumed (geomean): {gmean['measured'] / gmean['assumed']:.3f}.",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
