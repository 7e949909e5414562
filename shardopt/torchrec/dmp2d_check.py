"""End-to-end check of a 2D plan: the model of :mod:`shardopt.torchrec.dmp_check` sharded by
``ShardoptPlanner(sharding_group_size=G)`` in groups of G ranks, trained, its replicas synced, and
compared with unsharded references.

    python -m shardopt.torchrec.dmp2d_check --world-size 4 --group-size 2

TorchRec's ``DMPCollection`` refuses a CPU device (``assert device.type == "cuda" or ... "mtia"``),
so on CPU this runs what it runs, with TorchRec's own parts where they work on CPU: its process
groups (``DMPCollection._create_process_groups``: a DeviceMesh of replicate x shard), its plan
remapping onto each group's ranks (``DMPCollection._remap_sharding_plan``; the remapped placements'
device index, ``cpu:3``, made ``cpu``), its 2D sharding
environment (``ShardingEnv2D``) under ``DistributedModelParallel``, and its sync: every TBE's
weights and optimizer state averaged over the replica group (gloo has no AVG: a sum divided by
the replicas). Each group of G ranks trains on its own batches; the reference of group g is the
unsharded model stepped on g's ranks' batches (data-parallel tables, under DDP over the whole
world, by every rank's); after the steps the references are averaged as the sync averages, and
every rank's shards must equal the average.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass
from types import SimpleNamespace

from shardopt.torchrec.dmp_check import (
    LR, MIN_PARTITION, TABLES, _local_pieces, batch_for, build_model, load_full_weights, loss_weights, run_rank,
    spawn_ranks,
)

STEPS = 2


@dataclass(frozen=True)
class Check2DResult:
    rank: int
    group: int
    sharding: dict  # table -> (sharding type, the group plan's ranks)
    remapped: dict  # table -> the global ranks DMPCollection remapped them to on this rank
    mesh: list  # DMPCollection's device mesh (replicate x shard)
    collection_error: str  # what DMPCollection said when given a CPU device ("" where it ran)
    max_pooled_error: float
    max_weight_error: float
    unsynced_weight_error: float  # the shards against their own group's reference, before the sync
    divergence: float  # how far the groups' references had drifted apart: what the sync undid


def _worker(rank: int, world: int, port: int, group: int, queue) -> None:
    run_rank(lambda: _check_rank(rank, world, group), rank, world, port, queue)


def _check_rank(rank: int, world: int, group_size: int) -> Check2DResult:
    import torch
    import torch.distributed as dist
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel, DMPCollection
    from torchrec.distributed.planner.types import ParameterConstraints, Topology
    from torchrec.distributed.types import ShardingEnv2D
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from shardopt.core.parallelism import GroupLayout
    from shardopt.torchrec import ShardoptPlanner

    torch.set_num_threads(1)
    layout = GroupLayout(world, world, group_size)
    constraints = {n: ParameterConstraints(sharding_types=[kind], min_partition=MIN_PARTITION.get(n))
                   for n, _, _, kind in TABLES}
    planner = ShardoptPlanner(topology=Topology(world_size=world, local_world_size=world, compute_device="cpu"),
                              batch_size=4, constraints=constraints, time_limit_s=2,
                              sharding_group_size=group_size, sync_every=STEPS)
    model = build_model("meta")
    apply_optimizer_in_backward(torch.optim.SGD, model.sparse.ebc.parameters(), {"lr": LR})
    sharders = [EmbeddingBagCollectionSharder()]
    plan = planner.collective_plan(model, sharders, dist.group.WORLD)
    sharding = {name: (ps.sharding_type, list(ps.ranks or [])) for mp in plan.plan.values() for name, ps in mp.items()}
    try:
        DMPCollection(module=build_model("meta"), device=torch.device("cpu"), plan=copy.deepcopy(plan),
                      world_size=world, sharding_group_size=group_size, global_pg=dist.group.WORLD)
        collection_error = ""
    except AssertionError as exc:
        collection_error = f"AssertionError: {exc}"
    # DMPCollection's own layout and remapping, run as its methods run them.
    this = SimpleNamespace(_device=torch.device("cpu"))
    mesh, sharding_pg, replica_pg = DMPCollection._create_process_groups(
        this, global_rank=rank, world_size=world, local_size=group_size)
    DMPCollection._remap_sharding_plan(this, plan=plan, rank=rank, step=world // group_size,
                                       sharding_group_size=group_size)
    remapped = {name: list(ps.ranks or []) for mp in plan.plan.values() for name, ps in mp.items()}
    _on_cpu(plan)
    env = ShardingEnv2D(global_pg=dist.group.WORLD, sharding_pg=sharding_pg, replica_pg=replica_pg, device_mesh=mesh)
    dmp = DistributedModelParallel(model, env=env, device=torch.device("cpu"), plan=plan, sharders=sharders)
    my_group = next(g for g in range(layout.replicas) if rank in layout.group_ranks(g))
    references = [build_model("cpu") for _ in range(layout.replicas)]
    load_full_weights(dmp, references[0].state_dict())
    dense = [p for n, p in dmp.named_parameters() if "dp" in n and p.requires_grad]
    dense_opt = torch.optim.SGD(dense or [torch.nn.Parameter(torch.zeros(1))], lr=LR)
    pooled_error = 0.0
    for step in range(STEPS):
        out = dmp(batch_for(step, rank, world))
        got = (out.wait() if hasattr(out, "wait") else out).to_dict()
        with torch.no_grad():
            expected = references[my_group](batch_for(step, rank, world)).to_dict()
        pooled_error = max(pooled_error, max(float((got[k].detach() - expected[k]).abs().max()) for k in got))
        weights = loss_weights(step)
        dense_opt.zero_grad()
        sum((got[k] * weights[k]).sum() for k in got).backward()
        dense_opt.step()
        _reference_step(references, layout, step)
    unsynced = _weight_error(dmp, references[my_group].state_dict())
    _sync(dmp, replica_pg, layout.replicas)
    states = [r.state_dict() for r in references]
    averaged = {k: sum(s[k] for s in states) / layout.replicas for k in states[0]}
    divergence = max(float((s[k] - states[0][k]).abs().max()) for s in states for k in s)
    return Check2DResult(rank, my_group, sharding, remapped, mesh.mesh.tolist(), collection_error,
                         pooled_error, _weight_error(dmp, averaged), unsynced, divergence)


def _on_cpu(plan) -> None:
    """The remapped placements name a CUDA-style device index (``cpu:3``); a CPU shard's is ``cpu``."""
    from torch.distributed.remote_device import _remote_device
    from torchrec.distributed.types import EnumerableShardingSpec

    for module_plan in plan.plan.values():
        for ps in module_plan.values():
            if isinstance(ps.sharding_spec, EnumerableShardingSpec):
                for shard in ps.sharding_spec.shards:
                    shard.placement = _remote_device(f"rank:{shard.placement.rank()}/cpu")


def _reference_step(references, layout, step: int) -> None:
    """One SGD step of each group's reference: sharded tables by the mean gradient of the group's
    ranks, data-parallel ones by the mean over the world (DDP runs over every rank)."""
    import torch

    weights = loss_weights(step)
    grads = []
    for g, reference in enumerate(references):
        reference.zero_grad()
        for r in layout.group_ranks(g):
            out = reference(batch_for(step, r, layout.world)).to_dict()
            sum((out[k] * weights[k]).sum() for k in out).backward()
        grads.append({n: (p.grad if p.grad is not None else torch.zeros_like(p)).clone()
                      for n, p in reference.named_parameters()})
    with torch.no_grad():
        for g, reference in enumerate(references):
            for name, param in reference.named_parameters():
                if ".dp." in name:
                    grad = sum(gr[name] for gr in grads) / layout.world
                else:
                    grad = grads[g][name] / layout.group
                param -= LR * grad


def _sync(dmp, replica_pg, replicas: int) -> None:
    """DMPCollection.sync(): every TBE's weights and optimizer state averaged over the replicas."""
    import torch
    import torch.distributed as dist
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen

    kernels = []

    def find(module) -> None:  # as DMPCollection._group_sharded_modules walks: children and lookups
        if isinstance(module, SplitTableBatchedEmbeddingBagsCodegen):
            kernels.append(module)
        for lookup in getattr(module, "_lookups", ()):
            find(lookup)
        for child in module.children():
            find(child)

    find(dmp)
    tensors = []
    for kernel in dict.fromkeys(kernels):
        tensors += list(kernel.split_embedding_weights())
        tensors += [t for state in kernel.get_optimizer_state() for t in state.values()]
    with torch.no_grad():
        for tensor in tensors:
            dist.all_reduce(tensor, group=replica_pg)
            tensor /= replicas


def _weight_error(dmp, state) -> float:
    return max((float((local - full).abs().max()) for local, full in _local_pieces(dmp, state)), default=0.0)


def run_check(world: int, group: int) -> list[Check2DResult]:
    return sorted(spawn_ranks(_worker, world, (group,)), key=lambda r: r.rank)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=2)
    args = parser.parse_args(argv)
    results = run_check(args.world_size, args.group_size)
    first = results[0]
    if first.collection_error:
        print(f"DMPCollection on CPU: {first.collection_error}")
    print(f"device mesh (replicate x shard): {first.mesh}")
    for r in results:
        print(f"rank {r.rank} (group {r.group}): " + ", ".join(f"{n} -> {ranks}" for n, ranks in sorted(r.remapped.items())))
    pooled = max(r.max_pooled_error for r in results)
    weights = max(r.max_weight_error for r in results)
    unsynced = max(r.unsynced_weight_error for r in results)
    print(f"max |pooled - reference| = {pooled:.2e}; after the sync max |weight - averaged references|"
          f" = {weights:.2e} (before it, against the group's own reference: {unsynced:.2e}; the groups'"
          f" references had drifted {first.divergence:.2e} apart)")
    return 0 if pooled < 1e-4 and weights < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
