"""What a column-wise or row-wise piece costs beside its whole table, measured and as the model prices it.

    python benchmarks/cut_pieces.py [--cut column|row] [--per-regime 2] [--tables 2] [--rounds 5]

A column cut's pieces each go through all of the table's lookups; only the width is shared out.
A row cut's pieces each get their rows' share of the lookups, over every bag of the batch.
The cost model says how much of a table's time shrinks with the cut. Where it is wrong, a cut
it prices as cheap is not (or one it prices as dear is not). For the costliest tables (by the
packaged model) of held-out tasks of every regime (``shardopt.bench.regimes``), one replay holds
the table whole on a rank, its two halves on two more and its four quarters on four more (copies
of the table: each rank sees the same lookups at the task's global batch), timed side by side on
this machine's kernels. Each cell is the mean piece's time over the whole table's, forward and
backward: measured, then the packaged model's (a piece at its share would be 0.50 / 0.25).

Puts its table on top of ``benchmarks/results/cut_pieces.md`` (``--output``; earlier runs kept).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings
from pathlib import Path

import numpy as np

from on_top import put_on_top

ROOT = Path(__file__).resolve().parent.parent


def _pieces_workload(workload, table, cut="column"):
    """The table three times (whole, halves, quarters) on 1 + 2 + 4 ranks, at the task's global batch."""
    from shardopt.core.plan import Plan, Shard, TablePlan, WorkloadRef
    from shardopt.core.workload import workload_from_dict, workload_to_dict
    from shardopt.search.candidates import split_evenly

    data = workload_to_dict(workload)
    base = next(t for t in data["tables"] if t["name"] == table.name)
    data["tables"] = [dict(base, name=f"{table.name}/{k}") for k in (1, 2, 4)]
    world = 1 + 2 + 4
    data["batch_size"] = max(1, round(workload.batch_size * workload.topology.world_size / world))
    topology = {k: v for k, v in data["topology"].items() if k not in ("ranks", "ddr_cap")}
    data["topology"] = {**topology, "world_size": world, "local_world_size": world, "hbm_cap": 2**50}
    data.pop("parallelism", None)
    pieces = workload_from_dict(data, source=f"<{table.name} cut>")
    rows, dim, first, tables = table.num_embeddings, table.embedding_dim, 0, []
    for k in (1, 2, 4):
        if cut == "row":
            edges = np.cumsum([0, *split_evenly(rows, k)])
            shards = tuple(Shard(rank=first + i, offsets=(int(edges[i]), 0), sizes=(int(edges[i + 1] - edges[i]), dim))
                           for i in range(k))
        else:
            width = dim // k
            shards = tuple(Shard(rank=first + i, offsets=(0, i * width), sizes=(rows, width)) for i in range(k))
        kind = "table_wise" if k == 1 else f"{cut}_wise"
        tables.append(TablePlan(name=f"{table.name}/{k}", sharding_type=kind, shards=shards))
        first += k
    return pieces, Plan(format="shardopt-plan", version=3, workload=WorkloadRef(name=pieces.name),
                        world_size=world, tables=tuple(tables))


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.regimes import REGIMES, regime_task
    from shardopt.contracts import ShardSpec
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import replay_side_by_side
    from shardopt.profile.dataset import cpu_fingerprint

    parser = argparse.ArgumentParser()
    parser.add_argument("--per-regime", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--tables", type=int, default=2, help="the costliest tables of each task")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cut", choices=("column", "row"), default="column")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "cut_pieces.md")
    args = parser.parse_args()

    started = time.perf_counter()
    rows, ratios = [], {key: [] for key in ("m2f", "m2b", "p2f", "p2b", "m4f", "m4b", "p4f", "p4b")}
    for regime in REGIMES:
        for i in range(args.per_regime):
            task = regime_task(regime, args.first_seed + i)
            w = task.workload
            model, _ = resolve_cost_model("analytic", w)

            def whole_ms(t, model=model, w=w):
                c = model.shard_cost(w, ShardSpec(t, "table_wise", t.num_embeddings, t.embedding_dim))
                return c.fwd_compute_ms + c.bwd_compute_ms

            for table in sorted(w.tables, key=whole_ms, reverse=True)[:args.tables]:
                if table.embedding_dim // 4 < 4:
                    continue
                pieces, plan = _pieces_workload(w, table, args.cut)
                measured = replay_side_by_side(pieces, {"cut": plan}, args.rounds).per_rank["cut"]
                priced = model.breakdown(pieces, plan.tables)
                cells = {}
                for k, first in ((2, 1), (4, 3)):
                    for label, ranks in (("m", measured), ("p", priced)):
                        for p, attr in (("f", "fwd_compute_ms"), ("b", "bwd_compute_ms")):
                            mean = sum(getattr(ranks[r], attr) for r in range(first, first + k)) / k
                            value = mean / getattr(ranks[0], attr)
                            cells[f"{label}{k}{p}"] = value
                            ratios[f"{label}{k}{p}"].append(value)
                rows.append(
                    f"| {task.name} {table.name} | {table.num_embeddings} x {table.embedding_dim}, pooled"
                    f" {table.pooling_factor:g} | {measured[0].fwd_compute_ms:.2f} / {measured[0].bwd_compute_ms:.2f}"
                    f" | {cells['m2f']:.2f} / {cells['m2b']:.2f} | {cells['p2f']:.2f} / {cells['p2b']:.2f}"
                    f" | {cells['m4f']:.2f} / {cells['m4b']:.2f} | {cells['p4f']:.2f} / {cells['p4b']:.2f} |"
                )
                print(rows[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)

    def gmean(key: str) -> str:
        return f"{math.exp(float(np.mean(np.log(ratios[key])))):.2f}"

    lines = [
        f"# A {args.cut}-wise piece beside its whole table",
        "",
        f"Command: `python benchmarks/cut_pieces.py --cut {args.cut} --per-regime {args.per_regime} --tables {args.tables}"
        f" --rounds {args.rounds}`, one run, {time.perf_counter() - started:.0f} s, {time.strftime('%Y-%m-%d')}"
        f" on `{cpu_fingerprint()}`. The costliest tables (packaged model) of held-out tasks (seeds"
        f" {args.first_seed}..); each piece's forward / backward over the whole table's, measured side by"
        " side, and as the packaged model prices it (a piece at its share would be 0.50 / 0.25).",
        "",
        "| table | shape | whole, measured ms | half: measured | half: model | quarter: measured | quarter: model |",
        "|---|---|---|---|---|---|---|",
        *rows,
        f"| **geomean** | | | {gmean('m2f')} / {gmean('m2b')} | {gmean('p2f')} / {gmean('p2b')}"
        f" | {gmean('m4f')} / {gmean('m4b')} | {gmean('p4f')} / {gmean('p4b')} |",
    ]
    put_on_top(args.output, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
