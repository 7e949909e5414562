"""Between shardopt's workload/plan and TorchRec's modules, constraints and ShardingPlan.

`torchrec_plan` runs TorchRec's own EmbeddingShardingPlanner (its estimator, greedy partitioner)
on a meta-device EmbeddingBagCollection built from the workload, and returns its choice as a
shardopt Plan, so every shardopt tool (validate, evaluate, replay) can judge the incumbent.
"""

from __future__ import annotations

from shardopt.errors import ErrorKind, ShardoptError
from shardopt.plan import PLAN_FORMAT, PLAN_VERSION, Plan, Shard, TablePlan, WorkloadRef
from shardopt.workload import Workload

# What TorchRec's EmbeddingBagCollectionSharder accepts on each device.
TORCHREC_TYPES = {
    "cpu": ("data_parallel", "table_wise", "column_wise", "table_column_wise"),
    "cuda": ("data_parallel", "table_wise", "column_wise", "table_column_wise", "row_wise",
             "table_row_wise"),
}
DATA_TYPES = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16", "int8": "INT8"}


def build_module(workload: Workload):
    """An EmbeddingBagCollection on the meta device: what the planner needs, no memory."""
    import torch
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

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


def torchrec_topology(workload: Workload):
    from torchrec.distributed.planner.types import Topology

    topo = workload.topology
    # On CPU, TorchRec keeps embeddings in DDR; the workload's per-rank cap is that memory.
    caps = {"hbm_cap": topo.hbm_cap} if topo.compute_device == "cuda" else {"ddr_cap": topo.hbm_cap}
    return Topology(
        world_size=topo.world_size,
        compute_device=topo.compute_device,
        local_world_size=topo.ranks_per_host,
        **caps,
    )


def torchrec_constraints(workload: Workload) -> dict:
    from torchrec.distributed.planner.types import ParameterConstraints

    supported = TORCHREC_TYPES[workload.topology.compute_device]
    out = {}
    for t in workload.tables:
        kinds = [k for k in t.allowed_sharding_types if k in supported]
        out[t.name] = ParameterConstraints(
            sharding_types=kinds or None,
            pooling_factors=[t.pooling_factor] * len(t.features),
            batch_sizes=[workload.batch_size] * len(t.features),
        )
    return out


def from_sharding_plan(workload: Workload, sharding_plan, sha256: str | None = None) -> Plan:
    """A TorchRec ShardingPlan for the workload's module as a shardopt Plan."""
    module_plan = next(iter(sharding_plan.plan.values()))
    tables = []
    for table in workload.tables:
        ps = module_plan[table.name]
        kind = ps.sharding_type
        if kind == "data_parallel":
            ranks = ps.ranks or list(range(workload.topology.world_size))
            shards = tuple(
                Shard(rank=r, offsets=(0, 0), sizes=(table.num_embeddings, table.embedding_dim))
                for r in ranks
            )
        else:
            shards = tuple(
                Shard(rank=int(m.placement.rank()), offsets=tuple(m.shard_offsets), sizes=tuple(m.shard_sizes))
                for m in ps.sharding_spec.shards
            )
        tables.append(TablePlan(name=table.name, sharding_type=kind, shards=shards,
                                compute_kernel=ps.compute_kernel))
    return Plan(
        format=PLAN_FORMAT, version=PLAN_VERSION,
        workload=WorkloadRef(name=workload.name, sha256=sha256),
        world_size=workload.topology.world_size, tables=tuple(tables),
    )


def torchrec_plan(workload: Workload, sha256: str | None = None) -> Plan:
    """Plan the workload with TorchRec's EmbeddingShardingPlanner (defaults, as users run it)."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.types import PlannerError

    planner = EmbeddingShardingPlanner(
        topology=torchrec_topology(workload),
        batch_size=workload.batch_size,
        constraints=torchrec_constraints(workload),
    )
    try:
        sharding_plan = planner.plan(build_module(workload), [EmbeddingBagCollectionSharder()])
    except PlannerError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ShardoptError(f"TorchRec's planner found no plan: {first}", kind=ErrorKind.INFEASIBLE) from None
    return from_sharding_plan(workload, sharding_plan, sha256)
