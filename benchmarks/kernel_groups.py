"""One fused kernel of a rank's tables against the same tables in two kernels, timed as a step.

    python benchmarks/kernel_groups.py [--tables 8] [--seeds 1,2,3] [--rounds 11] [--batch 1024]

TorchRec runs each sharding type as a sharding of its own: a rank holding whole tables and a
column piece runs two kernels. Per seed, ``--tables`` random tables (rows 2k-60k, dims 16-128,
pooling 2-40, fp32) are built as one kernel and split two ways: the last table apart (a rank's
whole tables beside one piece), and in halves. Each variant is timed the way a step runs a rank's
kernels (every forward in turn, then every backward: ``profile.tbe.time_kernels``) and, for the
split ones, also each kernel in a loop of its own, as replay did until 2026-12-07 (a kernel then
keeps its rows in cache from one iteration to the next). Rounds interleave the variants in a new
order each round; each is built afresh per round. Cells: median forward / backward over the one
kernel's, in the same round. Puts its table on top of ``benchmarks/results/kernel_groups.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from on_top import machine, put_on_top  # noqa: E402


def _tables(n: int, seed: int, batch: int):
    from shardopt.core.workload import workload_from_dict

    rng = np.random.default_rng(seed)
    tables = [dict(name=f"t{i}", num_embeddings=int(rng.integers(2000, 60000)),
                   embedding_dim=int(rng.choice([16, 32, 64, 128])),
                   pooling_factor=float(np.round(rng.uniform(2, 40), 1))) for i in range(n)]
    return list(workload_from_dict({"version": 1, "name": "groups", "batch_size": batch, "topology": {
        "world_size": 1, "compute_device": "cpu", "hbm_cap": 10**12}, "tables": tables}).tables)


def _build(groups, batch: int, seed: int):
    from shardopt.profile.bags import sample_bags
    from shardopt.profile.kernels import KernelSpec
    from shardopt.profile.tbe import DISTINCT_BATCHES, PreparedKernel

    rng = np.random.default_rng(seed)
    return [PreparedKernel([KernelSpec(t.num_embeddings, t.embedding_dim) for t in group],
                           [[sample_bags(t, batch, rng) for t in group] for _ in range(DISTINCT_BATCHES)],
                           backend="auto", device="cpu", precision="fp32") for group in groups]


def _time(kernels, apart: bool) -> np.ndarray:
    from shardopt.profile.tbe import time_kernels

    parts = [time_kernels([k], 2, 5) for k in kernels] if apart else [time_kernels(kernels, 2, 5)]
    return np.array([sum(f.median_us for f, _ in parts), sum(b.median_us for _, b in parts)])


def measure(n: int, seed: int, rounds: int, batch: int) -> dict[str, np.ndarray]:
    """Per variant, each round's (forward, backward) over the one kernel's of that round."""
    tables = _tables(n, seed, batch)
    variants = {"one": ([tables], False), "last apart": ([tables[:-1], tables[-1:]], False),
                "halves": ([tables[0::2], tables[1::2]], False),
                "last apart, each in its own loop": ([tables[:-1], tables[-1:]], True),
                "halves, each in its own loop": ([tables[0::2], tables[1::2]], True)}
    order = np.random.default_rng(seed)
    out: dict[str, list[np.ndarray]] = {name: [] for name in variants}
    for r in range(rounds):
        timed = {}
        for name in order.permutation(list(variants)):
            groups, apart = variants[name]
            timed[name] = _time(_build(groups, batch, 1000 * seed + r), apart)
        for name in variants:
            out[name].append(timed[name] / timed["one"])
    return {name: np.array(v) for name, v in out.items()}


def main() -> None:
    import torch

    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/kernel_groups.md")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one CPU rank is one intra-op thread, as replay runs it
    start = time.time()
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {seed: measure(args.tables, seed, args.rounds, args.batch) for seed in seeds}
    names = list(next(iter(results.values())))[1:]
    lines = ["# A rank's tables in one kernel or two, timed as a step", "",
             f"Command: `python benchmarks/kernel_groups.py --tables {args.tables} --seeds {args.seeds}"
             f" --rounds {args.rounds} --batch {args.batch}`, one run, {time.time() - start:.0f} s,"
             f" {time.strftime('%Y-%m-%d')} on {machine()}, one thread. Cells: median forward / backward of"
             " the variant over one fused kernel of the same tables, round by round (see the script's"
             " docstring).", "",
             "| seed | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for seed, res in results.items():
        lines.append(f"| {seed} | " + " | ".join(
            f"{np.median(res[n][:, 0]):.3f} / {np.median(res[n][:, 1]):.3f}" for n in names) + " |")
    print("\n".join(lines), flush=True)
    put_on_top(args.output, lines)


if __name__ == "__main__":
    main()
