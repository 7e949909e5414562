"""Train a workload's embeddings under DistributedModelParallel with a plan, traced by torch.profiler.

    python -m shardopt.torchrec.trace_run WORKLOAD.yaml PLAN.json -o traces/ [--steps 20]

What a user's training job gives `shardopt trace ingest`, made on this machine: one Chrome trace
per rank (`rank0.json`, ...), gloo on CPU in spawned processes (one intra-op thread each, as the
profile and replay assume), each step a new local batch drawn from the workload's access
distributions, TorchRec's fused TBE with row-wise Adagrad, the plan as `to_sharding_plan` writes it.
The traces hold the steps as `ProfilerStep#N` spans, as `torch.profiler.profile.step()` marks them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

LR = 0.01
EPS = 1e-8


def local_batch(workload, rank: int, step: int, seed: int = 0):
    """One rank's KeyedJaggedTensor for one step, every feature of every table (key-major)."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from shardopt.profile.bags import sample_bags

    keys, lengths, values = [], [], []
    for i, table in enumerate(workload.tables):
        bags = sample_bags(table, workload.batch_size, np.random.default_rng([seed, step, rank, i]))
        per = len(table.features)
        offsets = bags.offsets
        for f, feature in enumerate(table.features):
            picked = np.arange(f, len(bags.lengths), per)  # bags are sample-major, a bag per feature
            keys.append(feature)
            lengths.append(bags.lengths[picked])
            values.extend(bags.ids[offsets[b]:offsets[b + 1]] for b in picked)
    flat = np.concatenate(values) if values else np.zeros(0, dtype=np.int64)
    return KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=torch.from_numpy(flat.astype(np.int64)),
        lengths=torch.from_numpy(np.concatenate(lengths).astype(np.int64)),
    )


def _trace_rank(rank: int, world: int, workload_json: str, plan_json: str, folder: str, steps: int) -> Path:
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torch.profiler import ProfilerActivity, profile, schedule
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel

    from shardopt.core.plan import plan_from_dict
    from shardopt.core.workload import workload_from_dict
    from shardopt.torchrec.sharding_plan import to_sharding_plan
    from shardopt.torchrec.to_model import build_module

    torch.set_num_threads(1)
    workload = workload_from_dict(json.loads(workload_json))
    plan = plan_from_dict(json.loads(plan_json))
    sharder = EmbeddingBagCollectionSharder(fused_params={
        "optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": LR, "eps": EPS})
    dmp = DistributedModelParallel(build_module(workload), plan=to_sharding_plan(plan, workload),
                                   sharders=[sharder], device=torch.device("cpu"))
    dense = [p for p in dmp.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(dense, lr=LR) if dense else None
    batches = [local_batch(workload, rank, s) for s in range(steps)]
    path = Path(folder) / f"rank{rank}.json"
    # One untraced step warms the profiler up (Kineto's schedule wants one); the traced steps
    # still start cold, and ingest drops its warm-up steps.
    batches.insert(0, batches[0])
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=steps), record_shapes=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for kjt in batches:
            out = dmp(kjt)
            out = out.wait() if hasattr(out, "wait") else out
            loss = sum(v.sum() for v in out.to_dict().values())
            loss.backward()
            if optimizer:
                optimizer.step()
                optimizer.zero_grad()
            prof.step()
    return path


def _worker(rank: int, world: int, port: int, workload_json: str, plan_json: str, folder: str, steps: int,
            queue) -> None:
    from shardopt.torchrec.dmp_check import run_rank

    run_rank(lambda: _trace_rank(rank, world, workload_json, plan_json, folder, steps), rank, world, port, queue)


def traced_training(workload, plan, folder: str | Path, steps: int = 20) -> list[Path]:
    """Train ``steps`` steps of ``plan`` on ``workload`` in ``world`` gloo ranks; the traces' paths."""
    from shardopt.core.plan import plan_to_json
    from shardopt.core.workload import workload_to_dict
    from shardopt.torchrec.dmp_check import spawn_ranks

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    world = workload.topology.world_size
    paths = spawn_ranks(_worker, world, (json.dumps(workload_to_dict(workload)), plan_to_json(plan),
                                         str(folder), steps))
    return sorted(Path(p) for p in paths)


def main(argv=None) -> int:
    from shardopt.core.plan import read_plan
    from shardopt.core.workload import read_workload

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("plan")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    for path in traced_training(read_workload(args.workload)[0], read_plan(args.plan), args.output, args.steps):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
