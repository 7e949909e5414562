"""FBGEMM's CPU TBE beside the torch backends, timed on the same shards in one run.

    python benchmarks/tbe_backends.py [--rounds 7] [--iters 3]

Rank-shaped fused kernels (tables drawn by `shardopt synth`, a rank's share of a bench workload),
each built once per backend with the same 8 distinct batches; backends are timed in turns, round
after round, and each cell is the median over rounds of per-round medians. One intra-op thread,
as a CPU rank. The ratio column is torch-tbe / fbgemm: how far the torch twin's CPU time is from
FBGEMM's (the GPU is what it is for; on CPU this shows the algorithm, not the speed). Writes
benchmarks/results/tbe_backends.md.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("fbgemm", "torch-tbe", "torch")
# (tables, batch, seed): small to large kernels; tables come from synth's DLRM-like statistics.
SHAPES = ((2, 256, 1), (4, 512, 2), (8, 512, 3), (8, 2048, 4), (16, 1024, 5))


def _tables(count: int, seed: int):
    from shardopt.traces.synth import SynthSpec, synth_workload
    from shardopt.core.workload import workload_from_dict

    raw = synth_workload(SynthSpec(name="tbe", num_tables=count, world_size=1, local_world_size=1,
                                   seed=seed, rows_scale=0.02))
    return workload_from_dict(raw).tables


def main() -> None:
    from shardopt.profile.bags import sample_bags
    from shardopt.profile.kernels import KernelSpec, fbgemm_available
    from shardopt.profile.tbe import DISTINCT_BATCHES, PreparedKernel

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    if not fbgemm_available():
        raise SystemExit("needs fbgemm_gpu (the CPU wheel) to compare against")
    torch.set_num_threads(1)
    rows = []
    for count, batch, seed in SHAPES:
        tables = _tables(count, seed)
        rng = np.random.default_rng(seed)
        batches = [[sample_bags(t, batch, rng) for t in tables] for _ in range(DISTINCT_BATCHES)]
        specs = [KernelSpec(t.num_embeddings, t.embedding_dim) for t in tables]
        kernels = {b: PreparedKernel(specs, batches, backend=b, device="cpu", precision="fp32") for b in BACKENDS}
        times = {b: ([], []) for b in BACKENDS}
        for _ in range(args.rounds):
            for b, kernel in kernels.items():
                m = kernel.time(warmup=1, iters=args.iters)
                times[b][0].append(m.fwd.median_us)
                times[b][1].append(m.bwd.median_us)
        med = {b: (float(np.median(f)) / 1e3, float(np.median(w)) / 1e3) for b, (f, w) in times.items()}
        lookups = kernels["fbgemm"].lookups
        shape = (f"{count} tables, dims {'/'.join(str(d) for d in sorted({s.dim for s in specs}))},"
                 f" {sum(s.rows for s in specs):,} rows, batch {batch}, {lookups:,} lookups")
        rows.append((shape, med))
        print(shape, {b: f"{f:.3f}/{w:.3f}" for b, (f, w) in med.items()}, flush=True)

    lines = [
        "# FBGEMM's CPU TBE beside the torch backends",
        "",
        f"Command: `python benchmarks/tbe_backends.py --rounds {args.rounds} --iters {args.iters}`;"
        f" {platform.processor() or platform.machine()}, torch {torch.__version__}, one thread.",
        "Milliseconds, median over rounds (backends interleaved, 8 distinct batches, same shards and ids).",
        "Forward is the pooled lookup; backward includes the fused row-wise Adagrad step.",
        "",
        "| kernel | fbgemm fwd | torch-tbe fwd | torch fwd | fbgemm bwd | torch-tbe bwd | torch bwd |"
        " torch-tbe / fbgemm (fwd, bwd) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape, med in rows:
        f = {b: med[b][0] for b in BACKENDS}
        w = {b: med[b][1] for b in BACKENDS}
        lines.append(
            f"| {shape} | {f['fbgemm']:.3f} | {f['torch-tbe']:.3f} | {f['torch']:.3f} | {w['fbgemm']:.3f}"
            f" | {w['torch-tbe']:.3f} | {w['torch']:.3f} | {f['torch-tbe'] / f['fbgemm']:.2f}, "
            f"{w['torch-tbe'] / w['fbgemm']:.2f} |"
        )
    out = ROOT / "benchmarks" / "results" / "tbe_backends.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
