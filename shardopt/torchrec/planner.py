"""shardopt inside TorchRec: a drop-in ShardingPlanner and a ShardEstimator with shardopt's costs.

    planner = ShardoptPlanner(topology=topology, batch_size=512, constraints=constraints)
    plan = planner.collective_plan(model, sharders, pg)          # as with EmbeddingShardingPlanner
    model = DistributedModelParallel(model, plan=plan, ...)

The planner reads the model's EmbeddingBagCollection tables, TorchRec's Topology, the
ParameterConstraints that shape a plan (sharding_types, compute_kernels, pooling_factors) and the
batch size into a shardopt workload, plans it with the CP-SAT search restricted to cuts TorchRec runs,
and returns the ShardingPlan. The estimator lets TorchRec's own planner use shardopt's cost model.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional

import torch

from torchrec.distributed.planner.types import (
    ParameterConstraints, Perf, ShardEstimator, ShardingOption, Storage, Topology,
)
from torchrec.distributed.types import ShardingPlan, ShardingPlanner

from shardopt.contracts import DEFAULT_TIME_LIMIT_S, PlanConfig, ShardSpec
from shardopt.core.plan import Plan
from shardopt.torchrec.from_model import Origin, workload_from_module
from shardopt.torchrec.sharding_plan import to_sharding_plan
from shardopt.core.workload import Workload

logger = logging.getLogger(__name__)
TENSOR_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "int8"}


class ShardoptPlanner(ShardingPlanner):
    """TorchRec's ShardingPlanner, planned by shardopt (``last_plan`` keeps shardopt's own Plan)."""

    def __init__(
        self,
        topology: Optional[Topology] = None,
        batch_size: Optional[int] = None,
        constraints: Optional[Dict[str, ParameterConstraints]] = None,
        *,
        cost_model: str = "analytic",
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        search: str = "ilp",
        objective: str = "critical-path",
        **torchrec_options,
    ) -> None:
        if torchrec_options:
            # EmbeddingShardingPlanner's enumerator/proposer/partitioner/... have no role here.
            logger.warning("ShardoptPlanner ignores %s", ", ".join(sorted(torchrec_options)))
        _check_options(batch_size, time_limit_s, search, objective, cost_model)
        self.topology = topology
        self.batch_size = batch_size
        self.constraints = constraints
        self.cost_model = cost_model
        self.time_limit_s = time_limit_s
        self.search = search
        self.objective = objective  # "critical-path" or "bottleneck" (shardopt.contracts)
        # TorchRec runs only the cuts its sharders know: the plugin plans with TorchRec's candidates.
        self.config = PlanConfig(search=search, time_limit_s=float(time_limit_s), candidates="torchrec",
                                 objective=objective, cost_model=cost_model)
        self.last_plan: Optional[Plan] = None
        self.last_workload: Optional[Workload] = None
        self.last_origins: Optional[dict[str, Origin]] = None

    def _topology(self) -> Topology:
        if self.topology is not None:
            return self.topology
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError("ShardoptPlanner needs a topology, or an initialised process group to build one")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return Topology(world_size=dist.get_world_size(), compute_device=device)

    def plan(self, module, sharders) -> ShardingPlan:
        """Plan on this process alone."""
        from shardopt.planner import plan_with, resolve_model

        from torchrec.distributed.planner.constants import BATCH_SIZE

        workload, origins = workload_from_module(
            module, self._topology(), self.batch_size or BATCH_SIZE, self.constraints, sharders
        )
        model, warnings = resolve_model(self.config, workload)
        for warning in warnings:
            logger.warning(warning)
        plan = plan_with(workload, self.config, cost_model=model, source="model")
        self.last_plan, self.last_workload, self.last_origins = plan, workload, origins
        return to_sharding_plan(plan, workload, origins)

    def collective_plan(self, module, sharders, pg=None) -> ShardingPlan:
        """Plan on rank 0 of ``pg`` and broadcast, so every rank shards the same way."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return self.plan(module, sharders)
        pg = pg if pg is not None else dist.group.WORLD
        box: List[Optional[ShardingPlan]] = [None]
        if dist.get_rank(pg) == 0:
            box[0] = self.plan(module, sharders)
        dist.broadcast_object_list(box, src=dist.get_global_rank(pg, 0), group=pg)
        return box[0]


def _check_options(batch_size, time_limit_s, search, objective, cost_model) -> None:
    """Refuse options the CLI would refuse, with the same words (a ShardoptError is a ValueError)."""
    import math

    from shardopt.core.errors import ShardoptError
    from shardopt.contracts import OBJECTIVES

    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or not 0 < batch_size <= 2**24):
        raise ShardoptError(f"ShardoptPlanner batch_size: must be a positive integer, got {batch_size!r}")
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not (
            math.isfinite(time_limit_s) and 0 < time_limit_s <= 3600):
        raise ShardoptError(f"ShardoptPlanner time_limit_s: must be a finite number in (0, 3600], got {time_limit_s!r}")
    if search not in ("ilp", "greedy"):
        raise ShardoptError(f"ShardoptPlanner search: must be 'ilp' or 'greedy', got {search!r}")
    if objective not in OBJECTIVES:
        raise ShardoptError(f"ShardoptPlanner objective: must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if not isinstance(cost_model, str):
        raise ShardoptError(f"ShardoptPlanner cost_model: must be a name or a path, got {cost_model!r}")


class ShardoptEstimator(ShardEstimator):
    """Fills each TorchRec ShardingOption's shards with shardopt's Perf and Storage.

    Pass it to TorchRec's enumerator to keep TorchRec's search with shardopt's costs (milliseconds
    and bytes, as TorchRec counts): ``EmbeddingShardingPlanner(topology=t, batch_size=b,
    enumerator=EmbeddingEnumerator(topology=t, batch_size=b, estimator=ShardoptEstimator(t)))``.
    """

    def __init__(
        self,
        topology: Topology,
        constraints: Optional[Dict[str, ParameterConstraints]] = None,
        *,
        batch_size: Optional[int] = None,
        cost_model: str = "analytic",
    ) -> None:
        self.topology = topology
        self.constraints = constraints or {}
        self.batch_size = batch_size
        self.cost_model = cost_model

    def estimate(self, sharding_options: List[ShardingOption], sharder_data_map=None) -> None:
        from shardopt.costmodel.registry import resolve_cost_model

        workload = self._workload(sharding_options)
        model, _ = resolve_cost_model(self.cost_model, workload)
        for option in sharding_options:
            table = workload.table(option.name)
            kernel = option.compute_kernel if option.compute_kernel in (
                "fused", "fused_uvm", "fused_uvm_caching", "dense") else "fused"
            for shard in option.shards:
                rows, cols = shard.size
                cost = model.shard_cost(workload, ShardSpec(
                    table, option.sharding_type, rows, cols, kernel, option.cache_load_factor))
                shard.perf = Perf(fwd_compute=cost.fwd_compute_ms, fwd_comms=cost.fwd_comm_ms,
                                  bwd_compute=cost.bwd_compute_ms, bwd_comms=cost.bwd_comm_ms)
                shard.storage = Storage(
                    hbm=cost.hbm_bytes if self.topology.compute_device == "cuda" else 0,
                    ddr=cost.ddr_bytes if self.topology.compute_device == "cuda" else cost.hbm_bytes,
                )

    def _workload(self, options: List[ShardingOption]) -> Workload:
        from shardopt.torchrec.from_model import _topology, workload_from_torchrec

        tables, seen = [], set()
        batch = self.batch_size
        for option in options:
            if option.name in seen:
                continue
            seen.add(option.name)
            rows, dim = option.tensor.shape
            dtype = TENSOR_DTYPES.get(option.tensor.dtype, "fp32")
            tables.append({
                "name": option.name, "num_embeddings": int(rows), "embedding_dim": int(dim),
                "pooling_factor": float(sum(option.input_lengths)) or 1.0, "data_type": dtype,
            })
            batch = batch or option.batch_size
        return workload_from_torchrec({
            "version": 1, "name": "torchrec-options", "batch_size": int(batch),
            "topology": _topology(self.topology), "tables": tables,
        }, [f"TorchRec table {t['name']!r}" for t in tables])
