"""TorchRec's planner and ShardoptPlanner on random models and ParameterConstraints: where
TorchRec plans and shardopt refuses, or shardopt's plan breaks a constraint, a TorchRec user is
surprised.

    python benchmarks/parity_fuzz.py [--first-seed 0] [--count 100] [--device cuda|cpu]

Each seed: 1-6 EmbeddingBagConfig tables (10 to 5M rows, dims 4-252), about half of them
constrained (sharding_types, compute_kernels, min_partition, pooling_factors), 1-8 ranks, HBM from
64 MB to 80 GB, host memory or none; both planners on the same meta-device module. Puts the counts
and every surprise on top of ``benchmarks/results/parity_fuzz.md``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from on_top import machine, put_on_top  # noqa: E402

TYPES = ["table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise", "data_parallel"]
KERNELS = ["fused", "dense", "fused_uvm", "fused_uvm_caching"]
MB = 1 << 20


def _case(rng: np.random.Generator):
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    world = int(rng.choice([1, 2, 4, 8]))
    local = int(rng.choice([w for w in (1, 2, 4, 8) if world % w == 0]))
    tables = [EmbeddingBagConfig(num_embeddings=int(np.exp(rng.uniform(np.log(10), np.log(5e6)))),
                                 embedding_dim=int(4 * rng.integers(1, 64)), name=f"table_{i}",
                                 feature_names=[f"feature_{i}"]) for i in range(int(rng.integers(1, 7)))]
    constraints = {}
    for t in tables:
        if rng.random() < 0.5:
            kw = {}
            if rng.random() < 0.6:
                kw["sharding_types"] = sorted(set(rng.choice(TYPES, size=int(rng.integers(1, 3))).tolist()))
            if rng.random() < 0.5:
                kw["compute_kernels"] = sorted(set(rng.choice(KERNELS, size=int(rng.integers(1, 3))).tolist()))
            if rng.random() < 0.2:
                kw["min_partition"] = int(4 * rng.integers(1, 16))
            if rng.random() < 0.3:
                kw["pooling_factors"] = [float(rng.uniform(1, 100))]
            constraints[t.name] = ParameterConstraints(**kw)
    hbm = int(rng.choice([64, 512, 4096, 80 * 1024])) * MB
    ddr = int(rng.choice([0, 8 * 1024])) * MB
    return world, local, tables, constraints, hbm, ddr


def _plan(planner_cls, world, local, device, hbm, ddr, constraints, tables, **kw):
    import torch
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import Topology
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    topology = Topology(world_size=world, local_world_size=local, compute_device=device, hbm_cap=hbm,
                        **({"ddr_cap": ddr} if device == "cuda" else {}))
    module = torch.nn.Module()
    module.ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    try:
        plan = planner_cls(topology=topology, constraints=constraints, batch_size=512, **kw).plan(
            module, [EmbeddingBagCollectionSharder()])
    except Exception as exc:  # noqa: BLE001 - a refusal is an outcome here
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:240]}"
    return {k: (v.sharding_type, v.compute_kernel) for k, v in plan.plan["ebc"].items()}, ""


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    from shardopt.torchrec import ShardoptPlanner

    parser = argparse.ArgumentParser()
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "parity_fuzz.md")
    args = parser.parse_args()
    started, counts, surprises = time.perf_counter(), {}, []
    for seed in range(args.first_seed, args.first_seed + args.count):
        world, local, tables, constraints, hbm, ddr = _case(np.random.default_rng(seed))
        theirs, why_not = _plan(EmbeddingShardingPlanner, world, local, args.device, hbm, ddr, constraints, tables)
        ours, refused = _plan(ShardoptPlanner, world, local, args.device, hbm, ddr, constraints, tables,
                              time_limit_s=1)
        key = f"TorchRec {'plans' if theirs else 'refuses'}, shardopt {'plans' if ours else 'refuses'}"
        counts[key] = counts.get(key, 0) + 1
        if theirs and not ours:
            surprises.append(f"seed {seed}: TorchRec planned, shardopt refused: {refused}")
        for name, (kind, kernel) in (ours or {}).items():
            c = constraints.get(name)
            if c and ((c.sharding_types and kind not in c.sharding_types)
                      or (c.compute_kernels and kernel not in c.compute_kernels)):
                surprises.append(f"seed {seed}: {name} planned {kind}/{kernel} against {c.sharding_types}"
                                 f"/{c.compute_kernels}")
        print(f"seed {seed}: {key}", flush=True)
    lines = ["# TorchRec's planner beside ShardoptPlanner on random constraints", "",
             f"Command: `python benchmarks/parity_fuzz.py --first-seed {args.first_seed} --count {args.count}"
             f" --device {args.device}`, {time.strftime('%Y-%m-%d')} on {machine()},"
             f" {time.perf_counter() - started:.0f} s: "
             + "; ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f". Surprises: {len(surprises)}.",
             *([""] + [f"- {s}" for s in surprises] if surprises else [])]
    put_on_top(args.output, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
