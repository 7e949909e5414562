"""shardopt plans as TorchRec ShardingPlans and back.

A table's shards become a ParameterSharding: ``ranks`` and an EnumerableShardingSpec of
ShardMetadata (offsets, sizes, "rank:R/device" placements), as TorchRec's own planner writes them;
a data-parallel table has no spec (every rank holds it) and TorchRec's dense kernel; a
``fused_uvm_caching`` table carries its load factor in CacheParams. Cuts TorchRec cannot run
(FlexShard hot rows, row-wise over a subset of ranks) are refused with the table's name.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

from shardopt.core.errors import ShardoptError
from shardopt.core.plan import PLAN_FORMAT, PLAN_VERSION, Plan, Shard, TablePlan, WorkloadRef
from shardopt.torchrec.from_model import Origin
from shardopt.core.workload import Workload


def _origins(workload: Workload, origins: Optional[Mapping[str, Origin]]) -> dict[str, Origin]:
    return dict(origins) if origins else {t.name: Origin("", t.name) for t in workload.tables}


def to_sharding_plan(plan: Plan, workload: Workload, origins: Optional[Mapping[str, Origin]] = None):
    """The plan as a TorchRec ShardingPlan (module path -> table -> ParameterSharding)."""
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.sharding_plan import placement
    from torchrec.distributed.types import (
        CacheParams, EmbeddingModuleShardingPlan, ParameterSharding, ShardingPlan,
    )

    origins = _origins(workload, origins)
    topo = workload.topology
    modules: dict[str, EmbeddingModuleShardingPlan] = {}
    for tp in plan.tables:
        where = f"table {tp.name!r}"
        if tp.replicated_rows:
            raise ShardoptError(
                f"{where}: hot-row replication (replicated_rows) has no TorchRec sharding;"
                " plan with --candidates torchrec"
            )
        if tp.sharding_type == "row_wise" and sorted(s.rank for s in tp.shards) != list(range(topo.world_size)):
            raise ShardoptError(
                f"{where}: TorchRec runs row_wise over every rank in order, this plan uses ranks"
                f" {[s.rank for s in tp.shards]}; plan with --candidates torchrec"
            )
        origin = origins[tp.name]
        ranks = [s.rank for s in tp.shards]
        spec = None
        if tp.sharding_type != "data_parallel":
            spec = EnumerableShardingSpec([
                ShardMetadata(
                    shard_offsets=list(s.offsets), shard_sizes=list(s.sizes),
                    placement=placement(topo.compute_device, s.rank, topo.ranks_per_host),
                )
                for s in tp.shards
            ])
        runtime = dict(origin.runtime)
        cache = runtime.pop("cache_params", None)
        if tp.cache_load_factor is not None:  # the user's cache settings, with the share shardopt chose
            cache = dataclasses.replace(cache, load_factor=tp.cache_load_factor) if cache else CacheParams(
                load_factor=tp.cache_load_factor)
        modules.setdefault(origin.module_path, EmbeddingModuleShardingPlan())[origin.table] = ParameterSharding(
            sharding_type=tp.sharding_type, compute_kernel=tp.compute_kernel, ranks=ranks,
            sharding_spec=spec, cache_params=cache, **runtime,
        )
    return ShardingPlan(modules)


def from_sharding_plan(
    workload: Workload,
    sharding_plan,
    sha256: Optional[str] = None,
    origins: Optional[Mapping[str, Origin]] = None,
) -> Plan:
    """A TorchRec ShardingPlan for the workload's model as a shardopt Plan."""
    origins = _origins(workload, origins)
    tables = []
    for table in workload.tables:
        origin = origins[table.name]
        module_plan = sharding_plan.plan.get(origin.module_path)
        if module_plan is None or origin.table not in module_plan:
            raise ShardoptError(f"table {table.name!r}: the ShardingPlan has no entry for it")
        ps = module_plan[origin.table]
        if ps.sharding_type == "data_parallel":
            ranks = ps.ranks or list(range(workload.topology.world_size))
            shards = tuple(
                Shard(rank=r, offsets=(0, 0), sizes=(table.num_embeddings, table.embedding_dim))
                for r in ranks
            )
        else:
            shards = tuple(
                Shard(rank=int(m.placement.rank()), offsets=tuple(int(x) for x in m.shard_offsets),
                      sizes=tuple(int(x) for x in m.shard_sizes))
                for m in ps.sharding_spec.shards
            )
        load_factor = ps.cache_params.load_factor if ps.cache_params is not None else None
        tables.append(TablePlan(
            name=table.name, sharding_type=ps.sharding_type, shards=shards,
            compute_kernel=ps.compute_kernel,
            cache_load_factor=load_factor if ps.compute_kernel == "fused_uvm_caching" else None,
        ))
    return Plan(
        format=PLAN_FORMAT, version=PLAN_VERSION,
        workload=WorkloadRef(name=workload.name, sha256=sha256),
        world_size=workload.topology.world_size, tables=tuple(tables),
    )
