"""End-to-end check of a re-shard: train under one plan, checkpoint, replan for another world
size, load, train on, and compare with the same model trained unsharded.

    python -m shardopt.torchrec.reshard_check --from 2 --to 4     # gloo on CPU, spawned processes

Plan A is shardopt's for the first world; plan B is ``replan`` of plan A for the second (the
path a user takes). Tables are table-wise (TorchRec's CPU sharders run no row-wise cut, and
row-wise Adagrad keeps one state per row *per column shard*, so a column cut would differ from
the unsharded model by construction). The fused optimizer is FBGEMM's exact row-wise Adagrad;
the reference applies it by hand to the summed gradient of every rank's batch, divided by the
world size (as TorchRec's all-to-all does). Weights and optimizer state must match the
reference element for element after the steps before the checkpoint and after the step after.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass

from shardopt.torchrec.dmp_check import load_full_weights, max_weight_error, run_rank, spawn_ranks

TABLES = (("a", 300, 16), ("b", 200, 32), ("c", 120, 8), ("d", 500, 16), ("e", 80, 32), ("f", 240, 8))
LR, EPS = 0.05, 1e-8
BATCH = 6
STEPS_BEFORE, STEPS_AFTER = 3, 1


@dataclass(frozen=True)
class Errors:
    rank: int
    world: int
    weight: float  # max |sharded - reference| over this rank's shards
    momentum: float
    tables: int  # tables this rank holds a shard of


def workload(world: int):
    from shardopt.core.workload import workload_from_dict

    return workload_from_dict({
        "version": 1, "name": "reshard-check", "batch_size": BATCH, "optimizer": "rowwise_adagrad",
        "topology": {"world_size": world, "local_world_size": world, "compute_device": "cpu", "hbm_cap": "64MB"},
        "tables": [{"name": n, "num_embeddings": r, "embedding_dim": d, "pooling_factor": 2.0,
                    "feature_names": [f"f_{n}"], "sharding_types": ["table_wise"]} for n, r, d in TABLES],
    })


def plans(world_a: int, world_b: int, lost: tuple[int, ...] = ()):
    """(plan A for world_a, plan B replanned from it for world_b, new rank -> old rank), as shardopt
    plans; ``lost``: ranks of world_a that died (``replan --lost-ranks``)."""
    from shardopt.contracts import PlanConfig
    from shardopt.planner import plan_with
    from shardopt.planner.replan import replan_with

    config = PlanConfig(time_limit_s=1.0, candidates="torchrec", cost_model="analytic-v0")
    plan_a = plan_with(workload(world_a), config)
    replanned = replan_with(plan_a, workload(world_b), config, lost_ranks=lost)
    return plan_a, replanned.plan, replanned.old_of


def build_model(device: str):
    import torch
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    torch.manual_seed(0)
    configs = [EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[f"f_{n}"])
               for n, r, d in TABLES]

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection(tables=configs, device=torch.device(device))

        def forward(self, kjt):
            return self.ebc(kjt)

    return Model()


def batch_for(step: int, rank: int):
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    g = torch.Generator().manual_seed(1000 * step + rank)
    lengths, values = [], []
    for _, rows, _ in TABLES:
        n = torch.randint(0, 4, (BATCH,), generator=g)
        lengths.append(n)
        values.append(torch.randint(0, rows, (int(n.sum()),), generator=g))
    return KeyedJaggedTensor.from_lengths_sync(keys=[f"f_{n}" for n, _, _ in TABLES], values=torch.cat(values),
                                               lengths=torch.cat(lengths))


def loss_weights(step: int):
    import torch

    g = torch.Generator().manual_seed(7 + step)
    return {f"f_{n}": torch.randn(d, generator=g) for n, _, d in TABLES}


def reference(worlds: list[int]):
    """The unsharded model after one step per entry of ``worlds`` (the world size of that step):
    (weights, row-wise Adagrad momentum) per table."""
    import torch

    model = build_model("cpu")
    weights = {n: model.ebc.embedding_bags[n].weight.detach().clone() for n, _, _ in TABLES}
    momentum = {n: torch.zeros(r) for n, r, _ in TABLES}
    for step, world in enumerate(worlds):
        for n in weights:
            model.ebc.embedding_bags[n].weight.data.copy_(weights[n])
        model.zero_grad()
        for rank in range(world):
            out = model(batch_for(step, rank)).to_dict()
            sum((out[k] * w).sum() for k, w in loss_weights(step).items()).backward()
        with torch.no_grad():
            for n in weights:
                g = model.ebc.embedding_bags[n].weight.grad / world
                momentum[n] += (g * g).mean(dim=1)
                weights[n] -= LR * g / (momentum[n].sqrt() + EPS).unsqueeze(1)
    return weights, momentum


def _dmp(plan, world: int):
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel

    from shardopt.torchrec.from_model import Origin
    from shardopt.torchrec.sharding_plan import to_sharding_plan

    wl = workload(world)
    sharding = to_sharding_plan(plan, wl, {n: Origin("ebc", n) for n, _, _ in TABLES})
    sharder = EmbeddingBagCollectionSharder(fused_params={
        "optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": LR, "eps": EPS})
    return DistributedModelParallel(build_model("meta"), plan=sharding, sharders=[sharder],
                                    device=torch.device("cpu"))


def _train(dmp, steps: range, rank: int) -> None:
    for step in steps:
        out = dmp(batch_for(step, rank))
        out = out.wait() if hasattr(out, "wait") else out
        got = out.to_dict()
        sum((got[k] * w).sum() for k, w in loss_weights(step).items()).backward()


def _errors(dmp, weights, momentum, rank: int, world: int) -> Errors:
    """This rank's largest differences from the reference, in weights (``dmp_check``'s
    comparison) and in row-wise Adagrad momentum, and how many tables it holds a shard of."""
    held = sum(1 for value in dmp.state_dict().values() if value.local_shards())
    w_err = max_weight_error(dmp, {f"ebc.embedding_bags.{name}.weight": w for name, w in weights.items()})
    m_err = 0.0
    for key, per_param in dmp.fused_optimizer.state_dict()["state"].items():
        name = key.split("embedding_bags.")[-1].split(".")[0]
        for state_key, value in per_param.items():
            if "momentum1" not in state_key:
                continue
            for shard in value.local_shards():
                start, rows = shard.metadata.shard_offsets[0], shard.tensor.numel()
                m_err = max(m_err, float((shard.tensor.reshape(-1) - momentum[name][start:start + rows]).abs().max()))
    return Errors(rank, world, w_err, m_err, held)


def _worker(rank: int, world: int, port: int, phase: str, plan_json: str, folder: str, worlds, queue) -> None:
    run_rank(lambda: _phase(rank, world, phase, plan_json, folder, worlds), rank, world, port, queue)


def _phase(rank: int, world: int, phase: str, plan_json: str, folder: str, worlds) -> list[Errors]:
    import json

    import torch

    from shardopt.core.plan import plan_from_dict
    from shardopt.torchrec.reshard import load_checkpoint, save_checkpoint

    torch.set_num_threads(1)
    dmp = _dmp(plan_from_dict(json.loads(plan_json)), world)
    if phase == "before":
        load_full_weights(dmp, build_model("cpu").state_dict())
        _train(dmp, range(STEPS_BEFORE), rank)
        save_checkpoint(dmp, folder)
        return [_errors(dmp, *reference(worlds[:STEPS_BEFORE]), rank, world)]
    load_checkpoint(dmp, folder)
    result = [_errors(dmp, *reference(worlds[:STEPS_BEFORE]), rank, world)]
    _train(dmp, range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER), rank)
    result.append(_errors(dmp, *reference(worlds), rank, world))
    return result


def _spawn(world: int, phase: str, plan, folder: str, worlds) -> list[list[Errors]]:
    from shardopt.core.plan import plan_to_json

    return spawn_ranks(_worker, world, (phase, plan_to_json(plan), folder, worlds))


def run_check(world_a: int, world_b: int, lost: tuple[int, ...] = ()) -> dict:
    """Errors before the checkpoint (world_a), after loading it and after one more step (world_b);
    with ``lost``, the ranks that died after the checkpoint: world_b loads it without them."""
    plan_a, plan_b, old_of = plans(world_a, world_b, lost)
    worlds = [world_a] * STEPS_BEFORE + [world_b] * STEPS_AFTER
    with tempfile.TemporaryDirectory(prefix="shardopt-reshard-") as folder:
        before = _spawn(world_a, "before", plan_a, folder, worlds)
        after = _spawn(world_b, "after", plan_b, folder, worlds)
    return {
        "before": [r[0] for r in before], "loaded": [r[0] for r in after], "stepped": [r[1] for r in after],
        "plan_a": plan_a, "plan_b": plan_b, "old_of": old_of,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="world_a", type=int, default=2)
    parser.add_argument("--to", dest="world_b", type=int, default=4)
    parser.add_argument("--lost", type=lambda text: tuple(int(r) for r in text.split(",")), default=(),
                        help="ranks of the first world that died after the checkpoint, e.g. 2")
    args = parser.parse_args(argv)
    result = run_check(args.world_a, args.world_b, args.lost)
    for label in ("plan_a", "plan_b"):
        where = {tp.name: tp.shards[0].rank for tp in result[label].tables}
        print(f"{label}: world {result[label].world_size}, table -> rank {where}")
    worst = 0.0
    for stage in ("before", "loaded", "stepped"):
        w = max(e.weight for e in result[stage])
        m = max(e.momentum for e in result[stage])
        worst = max(worst, w, m)
        held = sum(e.tables for e in result[stage])
        print(f"{stage:8} max |weight - reference| = {w:.2e}, max |momentum - reference| = {m:.2e}"
              f" ({held} table shards compared)")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
