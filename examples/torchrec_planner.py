"""Use shardopt as TorchRec's planner: plan, wrap in DistributedModelParallel, train.

    python examples/torchrec_planner.py                  # one gloo rank on this CPU
    torchrun --nproc-per-node 2 examples/torchrec_planner.py
    shardopt from-torchrec examples.torchrec_planner:model --world-size 8 --device cpu \
        --batch-size 512 -o my-model.yaml              # the same model as a workload file

`python -m shardopt.torchrec.dmp_check --world-size 4` checks pooled embeddings and updated weights of
such a run against an unsharded model.
"""

import logging
import os

import torch
import torch.distributed as dist
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation
from torchrec.distributed.planner.types import ParameterConstraints, PlannerError, Topology
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from shardopt.torchrec import ShardoptPlanner


def model():
    """A small DLRM-style sparse arch and its constraints (the from-torchrec FACTORY form)."""
    tables = [
        EmbeddingBagConfig(name="user", embedding_dim=64, num_embeddings=10_000, feature_names=["user"]),
        EmbeddingBagConfig(name="item", embedding_dim=128, num_embeddings=50_000, feature_names=["item"]),
        EmbeddingBagConfig(name="country", embedding_dim=16, num_embeddings=200, feature_names=["country"]),
    ]
    constraints = {
        "user": ParameterConstraints(pooling_factors=[4.0]),
        "item": ParameterConstraints(pooling_factors=[20.0], sharding_types=["column_wise", "table_wise"]),
        "country": ParameterConstraints(sharding_types=["data_parallel"]),
    }
    return EmbeddingBagCollection(tables=tables, device=torch.device("meta")), constraints


def main() -> None:
    if "RANK" not in os.environ:  # run as one process
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    dist.init_process_group("gloo")
    logging.getLogger("shardopt").setLevel(logging.INFO)  # shows the planner's stats table
    ebc, constraints = model()
    apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": 0.1})
    planner = ShardoptPlanner(
        topology=Topology(world_size=dist.get_world_size(), compute_device="cpu"),
        batch_size=32, constraints=constraints, time_limit_s=2,
        # memory kept for dense parameters, activations and inputs, as TorchRec reserves it (its
        # HeuristicalStorageReservation(percentage=0.15) is the default; GPUs lose the percentage too)
        storage_reservation=HeuristicalStorageReservation(percentage=0.3),
    )
    sharders = [EmbeddingBagCollectionSharder()]
    plan = planner.collective_plan(ebc, sharders, dist.group.WORLD)
    if dist.get_rank() == 0:
        print(plan)
        print(f"shardopt predicts a bottleneck of {planner.last_plan.predicted.max_ms:.3f} ms per iteration")
    sharded = DistributedModelParallel(ebc, plan=plan, sharders=sharders, device=torch.device("cpu"))
    for step in range(2):
        g = torch.Generator().manual_seed(step * 100 + dist.get_rank())
        lengths = torch.randint(0, 5, (3 * 32,), generator=g)
        values = torch.cat([torch.randint(0, rows, (int(n),), generator=g)
                            for rows, n in zip([10_000] * 32 + [50_000] * 32 + [200] * 32, lengths)])
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=["user", "item", "country"], values=values, lengths=lengths)
        out = sharded(kjt)
        out = out.wait() if hasattr(out, "wait") else out
        loss = out.values().sum()
        loss.backward()
        if dist.get_rank() == 0:
            print(f"step {step}: loss {float(loss):.3f}")
    if dist.get_rank() == 0:
        show_planner_error()
    dist.destroy_process_group()


def show_planner_error() -> None:
    """No plan is TorchRec's PlannerError, with its error type and possible solutions."""
    ebc, constraints = model()
    small = ShardoptPlanner(topology=Topology(world_size=2, compute_device="cpu", ddr_cap=2 * 1024 * 1024),
                            batch_size=32, constraints=constraints, debug=False)
    try:
        small.plan(ebc, [EmbeddingBagCollectionSharder()])
    except PlannerError as exc:
        print(f"PlannerError {exc.error_type.name}: {exc}")


if __name__ == "__main__":
    main()
