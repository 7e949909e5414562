"""A TorchRec ShardEstimator with shardopt's costs: Perf per shard from shardopt's cost model and
Storage as TorchRec's storage estimator reports it (HBM for fused and dense kernels, host DDR for
fused_uvm, both for fused_uvm_caching: its HBM cache and the whole table in host memory)."""

from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torchrec.distributed.planner.types import (
    ParameterConstraints, Perf, ShardEstimator, ShardingOption, Storage, Topology,
)

from shardopt.contracts import ShardSpec
from shardopt.core.workload import Workload

TENSOR_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "int8"}
KERNELS = ("fused", "fused_uvm", "fused_uvm_caching", "dense")


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
            kernel = option.compute_kernel if option.compute_kernel in KERNELS else "fused"
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
