"""Between shardopt's workload/plan and TorchRec's modules, constraints and ShardingPlan.

`torchrec_plan` runs TorchRec's own EmbeddingShardingPlanner (its estimator, greedy partitioner)
on a meta-device EmbeddingBagCollection built from the workload, and returns its choice as a
shardopt Plan, so every shardopt tool (validate, evaluate, replay) can judge the incumbent.
"""

from __future__ import annotations

from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.plan import Plan
from shardopt.search.candidates import TORCHREC_TYPES
from shardopt.torchrec.from_model import torchrec_topology
from shardopt.torchrec.sharding_plan import from_sharding_plan
from shardopt.core.workload import Workload

DATA_TYPES = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16", "int8": "INT8"}


def build_module(workload: Workload):
    """An EmbeddingBagCollection on the meta device: what the planner needs, no memory."""
    import torch
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    sequence = [t.name for t in workload.tables if not t.pooled]
    if sequence:
        raise ShardoptError(f"table {sequence[0]!r}: a sequence (unpooled) table; this converter builds an"
                            " EmbeddingBagCollection (plan TorchRec models with sequence tables with ShardoptPlanner)")
    tables = [
        EmbeddingBagConfig(
            name=t.name,
            embedding_dim=t.embedding_dim,
            num_embeddings=t.num_embeddings,
            feature_names=list(t.features),
            data_type=getattr(DataType, DATA_TYPES[t.data_type]),
        )
        for t in workload.tables
    ]
    return EmbeddingBagCollection(tables=tables, device=torch.device("meta"))


def torchrec_constraints(workload: Workload) -> dict:
    from torchrec.distributed.planner.types import ParameterConstraints

    supported = TORCHREC_TYPES[workload.topology.compute_device]
    out = {}
    for t in workload.tables:
        kinds = [k for k in t.allowed_sharding_types if k in supported]
        out[t.name] = ParameterConstraints(
            # Every kind its sharder runs is no constraint: TorchRec then takes the sharder's own
            # order, where a list it is given goes through a set (its plan then changed with
            # PYTHONHASHSEED, on two-host tasks by up to 11% of the step).
            sharding_types=kinds if set(kinds) < set(supported) else None,
            # The workload's pooling factor is a sample's ids over all the table's features.
            pooling_factors=[t.pooling_factor / len(t.features)] * len(t.features),
            compute_kernels=list(t.compute_kernels) if t.compute_kernels else None,
            batch_sizes=[workload.batch_size] * len(t.features),
        )
    return out


def torchrec_plan(workload: Workload, sha256: str | None = None, timeout_s: int | None = None) -> Plan:
    """Plan the workload with TorchRec's EmbeddingShardingPlanner (defaults, as users run it;
    ``timeout_s``: its ``timeout_seconds``, after which it keeps the best proposal found)."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.types import PlannerError

    planner = EmbeddingShardingPlanner(
        topology=torchrec_topology(workload),
        batch_size=workload.batch_size,
        constraints=torchrec_constraints(workload),
        timeout_seconds=timeout_s,
    )
    try:
        sharding_plan = planner.plan(build_module(workload), [EmbeddingBagCollectionSharder()])
    except PlannerError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ShardoptError(f"TorchRec's planner found no plan: {first}", kind=ErrorKind.INFEASIBLE) from None
    return from_sharding_plan(workload, sharding_plan, sha256)


def module_from_workload(workload: Workload, device: str = "meta"):
    """The workload as TorchRec objects: (EmbeddingBagCollection, constraints, Topology)."""
    import torch

    ebc = build_module(workload)
    if device != "meta":
        ebc = ebc.to_empty(device=torch.device(device))
    return ebc, torchrec_constraints(workload), torchrec_topology(workload)
