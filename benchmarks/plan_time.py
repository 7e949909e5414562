"""Planning time on the default path, and the same bytes twice (issue 32's plan-time criterion).

    python benchmarks/plan_time.py [--runs 2] [--sizes 100x8,1000x128,5000x1024] [--seeds 1]

Synthetic H200 workloads (`shardopt synth` statistics, 8 ranks per host, 80 GB HBM; the 5000-table
one at half the rows, as `benchmarks/results/plan_speed_prod.md`) planned by `shardopt plan W -o P`
with no options, in a fresh process per run: "planned in" is what the command prints (reading the
workload, resolving the model, the search, writing the plan), "wall" the whole process with
Python's and torch's imports. The plan files of the runs are compared byte for byte. Puts its
table on top of benchmarks/results/plan_time.md (earlier runs kept below), with how long a
pure-Python loop took just before each run: the machine's speed at the time. ``--seeds N`` plans
N workloads of each size (``synth`` seeds tables, tables + 1, ...): one seed's workload can land
on the fast side (at 100 x 8 the seed-100 workload keeps its warm start and planned in 0.7-0.8 s
where others, whose solver plan is kept and finished after the solver, took 0.9-1.1 s).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from on_top import put_on_top

ROOT = Path(__file__).resolve().parent.parent
LIMITS_S = {(100, 8): 1.0, (1000, 128): 5.0, (5000, 1024): 60.0}


def _workload(folder: Path, tables: int, ranks: int, seed: int) -> Path:
    path = folder / f"time-{tables}x{ranks}-{seed}.yaml"
    subprocess.run(
        [sys.executable, "-m", "shardopt", "synth", "--name", path.stem, "--tables", str(tables),
         "--world-size", str(ranks), "--local-world-size", "8", "--device", "cuda", "--hardware", "h200",
         "--hbm-cap", "80GB", "--seed", str(seed), *(["--rows-scale", "0.5"] if tables >= 5000 else []),
         "-o", str(path)],
        check=True, capture_output=True,
    )
    return path


def _loop_s() -> float:
    """Seconds for a pure-Python loop of 10^7 iterations: how fast this machine runs Python right
    now (a shared VM's speed drifts: 0.27-0.69 s within minutes on the machine of 2026-12-05)."""
    started = time.perf_counter()
    for _ in range(10**7):
        pass
    return time.perf_counter() - started


def _plan(workload: Path, output: Path) -> tuple[float, float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "shardopt", "plan", str(workload), "-o", str(output)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"shardopt plan {workload.name} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    planned = float(re.search(r"planned in ([0-9.]+) s", done.stdout).group(1))
    return planned, wall, hashlib.sha256(output.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--sizes", default="100x8,1000x128,5000x1024")
    parser.add_argument("--seeds", type=int, default=1, help="workloads per size")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "plan_time.md")
    args = parser.parse_args()
    sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",")]
    lines = [
        "# Planning time on the default path",
        "",
        f"Command: `python benchmarks/plan_time.py --runs {args.runs} --sizes {args.sizes}"
        + (f" --seeds {args.seeds}" if args.seeds > 1 else "") + "`, one run on this"
        f" machine ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}. `shardopt plan W -o P` with no options,"
        " a fresh process per run; \"planned in\" as the command prints it, \"wall\" the whole process"
        " (imports included). Limits: issue 32's.",
        "",
        "| tables x ranks (seed) | planned in, s (each run) | wall, s (each run) | 10^7-loop s before each run"
        " | limit s | within | plan bytes identical | sha256 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for (tables, ranks), seed in ((size, size[0] + k) for size in sizes for k in range(args.seeds)):
            workload = _workload(Path(tmp), tables, ranks, seed)
            loops, runs = [], []
            for i in range(args.runs):
                loops.append(_loop_s())
                runs.append(_plan(workload, Path(tmp) / f"plan-{tables}x{ranks}-{seed}-{i}.json"))
            planned, walls, shas = [r[0] for r in runs], [r[1] for r in runs], {r[2] for r in runs}
            limit = LIMITS_S.get((tables, ranks))
            lines.append(
                f"| {tables} x {ranks} ({seed}) | {', '.join(f'{p:.2f}' for p in planned)} | {', '.join(f'{w:.1f}' for w in walls)}"
                f" | {', '.join(f'{x:.2f}' for x in loops)} | {limit:g} | {'yes' if limit and max(planned) <= limit else 'no'} | {'yes' if len(shas) == 1 else 'no'}"
                f" | `{sorted(shas)[0][:16]}` |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    put_on_top(args.output, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
