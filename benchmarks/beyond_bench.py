"""Workloads larger than the bench's, side by side with TorchRec, and where the model is off there.

    python benchmarks/beyond_bench.py [--sizes 8x64,16x128] [--seeds 1,2] [--rounds 5] [--alone 16x128-1]

The bench's tasks are 4 ranks of 12-40 tables at a global batch of 1024. A user's are larger: here
`shardopt synth` CPU workloads (a per-rank batch of 512, 8 ranks per host, rows scaled to fit this
machine's memory) are planned by `shardopt plan`'s default and by TorchRec's planner and replayed
side by side (`shardopt compare --replay`, the user's own command). ``--alone W`` then measures each
table of workload W alone (one rank each, FBGEMM's kernels) beside the packaged model's price of
that same one-table kernel: the per-table error the search leans on at this size. Set
``SHARDOPT_CPU_ID`` to plan as on a CPU the model never saw. Results go on top of
benchmarks/results/beyond_bench.md.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from on_top import machine, put_on_top

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "shardopt" / "data" / "profiles" / "cpu-full"


def _synth(folder: Path, ranks: int, tables: int, seed: int) -> Path:
    path = folder / f"{ranks}x{tables}-{seed}.yaml"
    subprocess.run([sys.executable, "-m", "shardopt", "synth", "--name", path.stem, "--tables", str(tables),
                    "--world-size", str(ranks), "--local-world-size", str(min(ranks, 8)), "--batch-size", "512",
                    "--hbm-cap", "4GB", "--rows-scale", str(round(0.5 / ranks, 4)), "--seed", str(seed),
                    "-o", str(path)], check=True, capture_output=True)
    return path


def _compare(path: Path, rounds: int) -> str:
    done = subprocess.run([sys.executable, "-m", "shardopt", "compare", str(path), "--replay", "--rounds", str(rounds)],
                          capture_output=True, text=True, check=True)
    found = re.search(r"predicted ([0-9.]+) per step.*replayed ([0-9.]+) per step", done.stdout)
    return f"| {path.stem} | {found.group(1)} | {found.group(2)} |"


def _largest_profiled_table() -> float:
    """Bytes of the largest single table the packaged CPU profile measured."""
    from shardopt.core.layout import DATA_TYPE_BYTES
    from shardopt.profile.dataset import ProfileDataset

    return max(p["tables"][0]["rows"] * p["tables"][0]["dim"] * DATA_TYPE_BYTES[p["precision"]]
               for p in ProfileDataset(PROFILE).records("tbe") if len(p["tables"]) == 1)


def _alone(path: Path) -> list[str]:
    """Each table alone, measured over the packaged model's price of its one-table kernel."""
    from shardopt.core.workload import read_workload
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.alone import alone_plan
    from shardopt.measure.replay import replay_plan

    alone, plan = alone_plan(read_workload(path)[0])
    model, _ = resolve_cost_model("analytic", alone)
    predicted = model.breakdown(alone, plan.tables)
    measured = replay_plan(alone, plan, builds=3).ranks
    largest = _largest_profiled_table()
    rows = []
    for table, m, p in list(zip(alone.tables, measured, predicted))[:-1]:  # the last is the empty kernel
        fwd, bwd = (math.log(a / b) for a, b in ((m.measured.fwd_compute_ms, p.fwd_compute_ms),
                                                   (m.measured.bwd_compute_ms, p.bwd_compute_ms)))
        size = table.num_embeddings * table.embedding_dim * table.element_bytes
        rows.append((fwd, bwd, table, size))
    # the machine's speed since the profile, per pass, taken out
    centre, back = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    lines = [f"Each table of `{path.name}` alone, measured over the packaged model (log, the medians"
             f" {centre:+.3f} forward and {back:+.3f} backward taken out): forward sd {statistics.pstdev(r[0] for r in rows):.3f},"
             f" backward sd {statistics.pstdev(r[1] for r in rows):.3f}, {len(rows)} tables; the"
             f" profile's largest table {largest / 1e6:.0f} MB.", "",
             "| table | rows x dim | pooling | access | MB | forward, measured / model (over the median) | backward |",
             "|---|---|---|---|---|---|---|"]
    for fwd, bwd, t, size in sorted(rows, key=lambda r: -r[0])[:8]:
        access = t.access.distribution if t.access else "-"
        lines.append(f"| {t.name} | {t.num_embeddings} x {t.embedding_dim} | {t.pooling_factor:g} | {access} |"
                     f" {size / 1e6:.0f} | {math.exp(fwd - centre):.2f} | {math.exp(bwd - back):.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="8x64,16x128", help="ranks x tables, comma-separated")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--alone", default="", help="a workload's stem (e.g. 16x128-1): its tables measured alone")
    args = parser.parse_args()
    started = time.time()
    lines = ["# Beyond the bench: larger workloads replayed beside TorchRec", "",
             f"Command: `python benchmarks/beyond_bench.py --sizes {args.sizes} --seeds {args.seeds} --rounds"
             f" {args.rounds}" + (f" --alone {args.alone}" if args.alone else "") + f"`, {time.strftime('%Y-%m-%d')},"
             f" {machine()}. Ratios of shardopt's default plan to TorchRec's, step (each phase's slowest rank"
             " summed), as `shardopt compare --replay` prints them.", "",
             "| workload (ranks x tables - seed) | predicted | replayed |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for size in args.sizes.split(","):
            ranks, tables = (int(n) for n in size.split("x"))
            for seed in (int(s) for s in args.seeds.split(",")):
                path = paths[f"{size}-{seed}"] = _synth(Path(folder), ranks, tables, seed)
                lines.append(_compare(path, args.rounds))
                print(lines[-1], flush=True)
        if args.alone:
            lines += ["", *_alone(paths[args.alone])]
    lines.append(f"\n({time.time() - started:.0f} s)")
    put_on_top(ROOT / "benchmarks" / "results" / "beyond_bench.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
