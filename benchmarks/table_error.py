"""How far off the packaged model is per table on this machine, and what a hedge without measuring
could buy back: each table of each task measured alone, then whole-table plans compared on those
measured figures.

    python benchmarks/table_error.py [--seed 2000] [--per-regime 4] [--rounds 5] [--json FILE]

1. Every table of every task (seeds 2000.. of each regime: not the held-out tasks) is replayed
   alone, as the only table of its own rank (its fused kernel's forward and backward, this
   machine's FBGEMM kernels), beside the packaged model's price of it.
2. The log of measured over predicted, per pass: its spread over tables (what unbalances ranks) and
   how much of it the table's shape (log rows, dimension, pooling) explains; a per-kernel overhead
   fitted by least squares (measured = k x predicted + c) is taken out first.
3. Whole-table plans of four ranks, each searched by the same local search (moves and swaps from
   a longest-first start) on other figures, then scored on the measured ones (forward's slowest
   rank plus backward's): ``oracle`` (the measured figures themselves), ``nominal`` (the model's),
   ``mix`` (from the nominal plan, the mean step over the nominal model and its variants, each table's
   price scaled along one shape axis (standardised over the task's tables) by exp(+-0.28): ranks alike in make-up, the
   hedge ``search/makeup.py`` makes, which needs no measurement). Ratios to ``oracle``'s step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import warnings
from pathlib import Path

import numpy as np

WORLD = 4
MIX = 0.28  # the doubt's typical table error for the packaged model on the CPU this was measured on


def measure(seed: int, per_regime: int, rounds: int) -> list[dict]:
    from shardopt.bench.regimes import REGIMES, regime_task
    from shardopt.contracts import PlanConfig, ShardSpec
    from shardopt.core.plan import Shard, TablePlan
    from shardopt.core.workload import workload_from_dict, workload_to_dict
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import replay_side_by_side
    from shardopt.planner.factory import plan_with

    out = []
    for regime in REGIMES:
        for s in range(seed, seed + per_regime):
            w = regime_task(regime, s).workload
            model, _ = resolve_cost_model("analytic", w)
            data = workload_to_dict(w)
            n = len(w.tables)
            data["topology"] = {"world_size": n, "compute_device": "cpu", "hbm_cap": 10**12, "local_world_size": n}
            alone = workload_from_dict(data)
            tables = tuple(TablePlan(name=t.name, sharding_type="table_wise", shards=(
                Shard(rank=i, offsets=(0, 0), sizes=(t.num_embeddings, t.embedding_dim)),))
                for i, t in enumerate(alone.tables))
            plan = dataclasses.replace(plan_with(w, PlanConfig(robust="off"), cost_model=model), tables=tables)
            ranks = replay_side_by_side(alone, {"alone": plan}, rounds).per_rank["alone"]
            for t, r in zip(w.tables, ranks):
                c = model.shard_cost(w, ShardSpec(t, "table_wise", t.num_embeddings, t.embedding_dim))
                out.append({"task": f"{regime}-{s}", "table": t.name, "rows": t.num_embeddings,
                            "dim": t.embedding_dim, "pooling": t.pooling_factor,
                            "predicted": [c.fwd_compute_ms, c.bwd_compute_ms],
                            "measured": [r.fwd_compute_ms, r.bwd_compute_ms]})
            print(f"{regime}-{s}: {n} tables measured", flush=True)
    return out


def _step(assign: np.ndarray, fwd: np.ndarray, bwd: np.ndarray) -> float:
    return float(np.bincount(assign, fwd, WORLD).max() + np.bincount(assign, bwd, WORLD).max())


def _search(fwd: np.ndarray, bwd: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Whole tables on WORLD ranks minimising the mean step over the variants (rows of fwd, bwd),
    from ``start`` or a longest-first placement."""
    n = fwd.shape[1]
    assign, load = np.zeros(n, dtype=int), np.zeros(WORLD)
    for i in np.argsort(-(fwd[0] + bwd[0]), kind="stable"):
        assign[i] = int(np.argmin(load))
        load[assign[i]] += fwd[0, i] + bwd[0, i]
    if start is not None:
        assign = start.copy()

    def score(a: np.ndarray) -> float:
        return float(np.mean([_step(a, f, b) for f, b in zip(fwd, bwd)]))

    best, better = score(assign), True
    while better:
        better = False
        trials = [(i, r) for i in range(n) for r in range(WORLD)] + [(i, -j - 1) for i in range(n) for j in range(i + 1, n)]
        for i, r in trials:
            trial = assign.copy()
            if r >= 0:
                trial[i] = r
            else:
                j = -r - 1
                trial[i], trial[j] = assign[j], assign[i]
            if (trial != assign).any() and (value := score(trial)) < best - 1e-12:
                assign, best, better = trial, value, True
    return assign


def analyse(rows: list[dict]) -> list[str]:
    pred = np.array([r["predicted"] for r in rows])
    meas = np.array([r["measured"] for r in rows])
    shape = np.log(np.array([[r["rows"], r["dim"], r["pooling"]] for r in rows], dtype=float))
    lines = [f"{len(rows)} tables of {len({r['task'] for r in rows})} tasks.", "",
             "| pass | overhead c (ms) | k | log(measured/predicted) sd | after c | shape explains | left |",
             "|---|---|---|---|---|---|---|"]
    for p, name in enumerate(("forward", "backward")):
        (k, c), *_ = np.linalg.lstsq(np.column_stack([pred[:, p], np.ones(len(rows))]) / meas[:, p:p + 1],
                                     np.ones(len(rows)), rcond=None)
        raw = np.log(meas[:, p] / pred[:, p])
        net = np.log(np.maximum(meas[:, p] - c, 0.1 * meas[:, p]) / (k * pred[:, p]))
        x = np.column_stack([np.ones(len(rows)), shape])
        left = net - x @ np.linalg.lstsq(x, net, rcond=None)[0]
        lines.append(f"| {name} | {c:.3f} | {k:.2f} | {raw.std():.3f} | {net.std():.3f} |"
                     f" {1 - left.var() / net.var():.0%} | {left.std():.3f} |")
        meas[:, p] = np.maximum(meas[:, p] - c, 0.1 * meas[:, p])  # the tables' own time, for the plans
    lines += ["", "| task | tables | nominal | mix | oracle |", "|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {"nominal": [], "mix": []}
    for task in dict.fromkeys(r["task"] for r in rows):
        s = np.array([r["task"] == task for r in rows])
        oracle = _step(_search(meas[s, 0][None], meas[s, 1][None]), meas[s, 0], meas[s, 1])
        spread = shape[s].std(axis=0)  # standardised over the task's tables, as makeup_variants does
        z = (shape[s][:, spread > 0] - shape[s][:, spread > 0].mean(axis=0)) / spread[spread > 0]
        axes = z.shape[1]
        variants = [np.zeros(axes)] + [sign * MIX * np.eye(axes)[axis] for axis in range(axes) for sign in (1, -1)]
        scale = np.array([np.exp(z @ v) for v in variants])
        nominal = _search(pred[s, 0][None], pred[s, 1][None])
        plans = {"nominal": nominal, "mix": _search(pred[s, 0][None] * scale, pred[s, 1][None] * scale, nominal)}
        cells = []
        for name, assign in plans.items():
            ratios[name].append(_step(assign, meas[s, 0], meas[s, 1]) / oracle)
            cells.append(f"{ratios[name][-1]:.3f}")
        lines.append(f"| {task} | {int(s.sum())} | " + " | ".join(cells) + " | 1 |")
    lines.append("| **geomean** | | " + " | ".join(f"**{math.exp(np.mean(np.log(v))):.3f}**" for v in ratios.values())
                 + " | 1 |")
    return lines


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=2000)
    parser.add_argument("--per-regime", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="measured tables: read if it exists, else written")
    args = parser.parse_args()
    if args.json and args.json.exists():
        rows = json.loads(args.json.read_text())
    else:
        rows = measure(args.seed, args.per_regime, args.rounds)
        if args.json:
            args.json.write_text(json.dumps(rows))
    print("\n".join(analyse(rows)))


if __name__ == "__main__":
    main()
