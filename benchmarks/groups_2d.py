"""2D sparse parallelism on dlrm-large over many H200 ranks: does ``auto`` choose the group size a
full sweep finds best, how fast, and does the 2D plan beat the best 1D plan over the whole world?

    python benchmarks/groups_2d.py --worlds 256,1024 --sync-every 1,10,100

For each world and sync interval: ``shardopt plan`` on the workload with ``sharding_group_size:
auto`` (timed as a user runs it, process start included), then ``shardopt sweep --group-sizes
all`` (every size the world allows planned; its table and plot kept under
``benchmarks/results/groups_2d/``). The 1D plans are the sweep's point at the world's own size and
the same workload planned with the search's other settings (greedy, every candidate cut, a 10 s
limit): the best of them is the 1D figure. Predicted figures only (no GPU cluster here).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "groups_2d"
SHARDOPT = [sys.executable, "-m", "shardopt"]
ONE_D = (("default", []), ("greedy", ["--search", "greedy"]), ("all cuts", ["--candidates", "all"]),
         ("10 s", ["--time-limit", "10"]))


def workload(world: int, every: int, folder: Path) -> Path:
    data = yaml.safe_load((ROOT / "configs" / "dlrm-large.yaml").read_text())
    data["name"] = f"dlrm-large-{world}-k{every}"
    data["topology"].update(world_size=world, local_world_size=8, hardware="h200")
    data["parallelism"] = {"sharding_group_size": "auto", "sync_every": every}
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(SHARDOPT + args, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"shardopt {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return time.perf_counter() - started, done


def one_d(path: Path, folder: Path) -> dict[str, float]:
    """The workload planned 1D over the whole world, with each of the search's settings."""
    data = yaml.safe_load(path.read_text())
    del data["parallelism"]
    flat = folder / f"{data['name']}-1d.yaml"
    flat.write_text(yaml.safe_dump(data, sort_keys=False))
    steps = {}
    for label, extra in ONE_D:
        out = folder / f"{flat.stem}-{label.replace(' ', '')}.json"
        run(["plan", str(flat), "-o", str(out), "-q", *extra])
        per_rank = json.loads(out.read_text())["predicted"]["per_rank"]
        steps[label] = sum(max(r[k] for r in per_rank) for k in
                           ("fwd_compute_ms", "fwd_comm_ms", "bwd_compute_ms", "bwd_comm_ms"))
    return steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", default="256,1024")
    parser.add_argument("--sync-every", default="1,10,100")
    args = parser.parse_args(argv)
    scratch = OUT / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    rows = []
    for world in map(int, args.worlds.split(",")):
        for every in map(int, args.sync_every.split(",")):
            path = workload(world, every, scratch)
            plan_out = scratch / f"{path.stem}.json"
            seconds, _ = run(["plan", str(path), "-o", str(plan_out), "-q"])
            block = json.loads(plan_out.read_text())["parallelism"]
            sweep_dir = OUT / path.stem
            run(["sweep", str(path), "--group-sizes", "all", "--jobs", "2", "-o", str(sweep_dir)])
            shutil.rmtree(sweep_dir / "points", ignore_errors=True)
            points = [p for p in json.loads((sweep_dir / "sweep.json").read_text())["points"] if p["feasible"]]
            best = min(points, key=lambda p: p["step_ms"])
            flat = one_d(path, scratch)
            rows.append({"world": world, "sync_every": every, "auto_group": block["sharding_group_size"],
                         "auto_step_ms": block["step_ms"], "auto_s": seconds, "best_group": best["group_size"],
                         "best_step_ms": best["step_ms"], "one_d_ms": min(flat.values()), "one_d": flat})
            r = rows[-1]
            print(f"{world} ranks, sync every {every}: auto G={r['auto_group']} {r['auto_step_ms']:.3f} ms in"
                  f" {seconds:.1f} s; sweep best G={r['best_group']} {r['best_step_ms']:.3f} ms; best 1D"
                  f" {r['one_d_ms']:.3f} ms ({', '.join(f'{k} {v:.3f}' for k, v in flat.items())})", flush=True)
    shutil.rmtree(scratch)
    (OUT / "summary.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


def table(rows: list[dict]) -> str:
    """The summary as markdown: auto against the sweep's best, and the best 1D plan."""
    lines = ["| ranks | sync every | auto: G | auto: step (ms) | planned in (s) | sweep's best G | its step (ms)"
             " | auto / best | best 1D step (ms) | 2D / 1D |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['world']} | {r['sync_every']} | {r['auto_group']} | {r['auto_step_ms']:.3f}"
                     f" | {r['auto_s']:.1f} | {r['best_group']} | {r['best_step_ms']:.3f}"
                     f" | {r['auto_step_ms'] / r['best_step_ms']:.3f} | {r['one_d_ms']:.3f}"
                     f" | {r['auto_step_ms'] / r['one_d_ms']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
