"""Valid but extreme workloads through the commands a user runs, to find what no test thought of.

    python benchmarks/stress.py [--first-seed 0] [--count 40] [--downstream]

Each seed draws a workload inside the schema's limits: 1-600 tables, 1 to 2e9 rows, dims up to
4096, pooling 0.01-3000, every data type, skewed and bucketed access, sequence tables, a few
allow-lists, CPU or GPU topologies of 1-1024 ranks with caps from tight to ample. ``shardopt plan``
must plan it (then ``validate`` accepts the plan) or refuse it in one line with exit 3; with
``--downstream``, ``evaluate``, ``report``, ``replan`` to twice the ranks and after losing a rank,
and ``compare`` (up to 64 ranks) run on each plan. A finding is printed as BAD: an exit outside
0/3 (2 for compare's sequence tables), a traceback, more than one error line, or over 90 s.
Puts its summary on top of ``benchmarks/results/stress.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from on_top import machine, put_on_top  # noqa: E402

TYPES = ["table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise", "data_parallel"]
KERNELS = ["fused", "fused_uvm", "fused_uvm_caching", "dense"]
SLOW_S = 90.0


def draw(rng: np.random.Generator) -> dict:
    """One workload inside the schema's limits (see the module's docstring)."""
    world = int(rng.choice([1, 2, 3, 4, 6, 8, 16, 32, 64, 128, 512, 1024]))
    local = rng.choice([None, 1, 2, 4, 8])
    local = None if local is None or world % local else int(local)
    device = str(rng.choice(["cpu", "cuda"]))
    tables = [_table(rng, i, device) for i in range(int(rng.choice([1, 2, 5, 20, 60, 200, 600])))]
    per = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
    total = sum(t["num_embeddings"] * t["embedding_dim"] * per[t.get("data_type", "fp32")] * 2 for t in tables)
    cap = int(max(1 << 20, total / world * float(np.exp(rng.uniform(np.log(2), np.log(30))))))
    topo = {"world_size": world, "compute_device": device, "hbm_cap": min(cap, 1 << 50)}
    if local is not None:
        topo["local_world_size"] = local
    if device == "cuda" and rng.random() < 0.5:
        topo["hardware"] = str(rng.choice(["h100", "h200", "a100"]))
    if device == "cuda" and rng.random() < 0.3:
        topo["ddr_cap"] = min(cap * 8, 1 << 50)
    if rng.random() < 0.2:
        topo["inter_host_bw"] = float(rng.choice([1.0, 12.5, 50.0]))
    return {"version": 1, "name": "stress", "batch_size": int(rng.choice([1, 7, 64, 512, 4096, 65536])),
            "topology": topo, "tables": tables}


def _table(rng: np.random.Generator, i: int, device: str) -> dict:
    t = {"name": f"t{i}", "num_embeddings": int(np.exp(rng.uniform(0, np.log(2e9)))) + 1,
         "embedding_dim": int(4 * rng.integers(1, 256 if rng.random() < 0.9 else 1024)),
         "pooling_factor": float(round(np.exp(rng.uniform(np.log(0.01), np.log(3000))), 3))}
    if rng.random() < 0.2:
        t["data_type"] = str(rng.choice(["fp16", "bf16", "int8"]))
    r = rng.random()
    if r < 0.3:
        t["access"] = {"distribution": "zipf", "alpha": float(round(rng.uniform(0.05, 4), 3))}
    elif r < 0.4:
        t["access"] = {"distribution": "buckets", "rows": [1.0, 100.0, 1e6], "weights": [0.5, 0.3, 0.2]}
    if rng.random() < 0.1:
        t["pooled"] = False
    if rng.random() < 0.1:
        t["feature_names"] = [f"t{i}_f{k}" for k in range(int(rng.integers(1, 5)))]
    if rng.random() < 0.03:
        t["sharding_types"] = sorted(set(rng.choice(TYPES, size=int(rng.integers(1, 4))).tolist()))
    if rng.random() < 0.05:
        t["min_partition"] = int(4 * rng.integers(1, 64))
    if device == "cuda" and rng.random() < 0.02:
        t["compute_kernels"] = sorted(set(rng.choice(KERNELS, size=2).tolist()))
    return t


def run(args: list, ok=(0, 3)) -> tuple[bool, str]:
    """(a finding?, what to print) of one command line."""
    started = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "shardopt", *map(str, args)], capture_output=True, text=True,
                           timeout=400)
    except subprocess.TimeoutExpired:
        return True, f"{args[0]}: over 400 s"
    took = time.perf_counter() - started
    errors = [line for line in p.stderr.splitlines() if line.startswith("error")]
    bad = p.returncode not in ok or "Traceback" in p.stderr or len(errors) > 1 or took > SLOW_S
    last = p.stderr.strip().splitlines()[-1][:240] if p.stderr.strip() else ""
    return bad, f"{args[0]} rc {p.returncode} {took:.1f} s" + (f" | {last}" if p.returncode or bad else "")


def _downstream(folder: Path, data: dict) -> list[tuple[bool, str]]:
    w, p = folder / "w.yaml", folder / "plan.json"
    world = data["topology"]["world_size"]
    out = [run(["evaluate", w, p]), run(["report", p, "--workload", w, "-o", folder / "r.png"])]
    for name, size, lost in (("grown", min(world * 2, 1024), ()), ("lost", world - 1, (world - 1,))):
        if size < 1:
            continue
        changed = {**data, "name": name, "topology": {**data["topology"], "world_size": size}}
        if size % (changed["topology"].get("local_world_size") or size):
            changed["topology"].pop("local_world_size")
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(changed))
        out.append(run(["replan", p, folder / f"{name}.yaml", "--old-workload", w, "-o", folder / f"{name}.json",
                        *(["--lost-ranks", ",".join(map(str, lost))] if lost else [])]))
    if world <= 64 and len(data["tables"]) <= 60:
        out.append(run(["compare", w], ok=(0, 2, 3)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--downstream", action="store_true")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "stress.md")
    args = parser.parse_args()
    started, outcomes, findings = time.perf_counter(), {"planned": 0, "refused": 0}, []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first_seed, args.first_seed + args.count):
            folder = Path(tmp) / str(seed)
            folder.mkdir()
            data = draw(np.random.default_rng(seed))
            (folder / "w.yaml").write_text(yaml.safe_dump(data))
            results = [run(["plan", folder / "w.yaml", "-o", folder / "plan.json"])]
            planned = (folder / "plan.json").exists()
            outcomes["planned" if planned else "refused"] += 1
            if planned:
                results.append(run(["validate", folder / "w.yaml", folder / "plan.json"], ok=(0,)))
                if args.downstream:
                    results += _downstream(folder, data)
            shape = (f"seed {seed}: {len(data['tables'])} tables, {data['topology']['world_size']} ranks,"
                     f" {data['topology']['compute_device']}")
            for bad, text in results:
                if bad:
                    findings.append(f"{shape}: {text}")
            print(("BAD " if any(b for b, _ in results) else "ok  ") + shape + " | "
                  + "; ".join(t for _, t in results)[:400], flush=True)
    lines = ["# Valid, extreme workloads through the user's commands", "",
             f"Command: `python benchmarks/stress.py --first-seed {args.first_seed} --count {args.count}"
             + (" --downstream" if args.downstream else "") + f"`, {time.strftime('%Y-%m-%d')} on {machine()},"
             f" {time.perf_counter() - started:.0f} s: {outcomes['planned']} planned (and validated),"
             f" {outcomes['refused']} refused in one line; {len(findings)} findings.",
             *([""] + [f"- {f}" for f in findings] if findings else [])]
    put_on_top(args.output, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
