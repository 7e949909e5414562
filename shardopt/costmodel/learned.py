"""The learned model behind the CostModel contract, so search and evaluate can use it."""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from shardopt.contracts import ShardSpec
from shardopt.arithmetic.traffic import rank_comm_from_all_to_all
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import CostModel, ShardCost
from shardopt.costmodel.comm_source import CommProfile
from shardopt.costmodel.kernel_net import KernelPredictor, LearnedParts
from shardopt.costmodel.plan_kernels import PlacedShard, joined, kernel_kinds, kernel_shard, rank_kernels
from shardopt.core.hardware import hardware_for
from shardopt.arithmetic.memory import plan_memory
from shardopt.core.plan import RankBreakdown, TablePlan
from shardopt.profile.precision import measured_precision
from shardopt.core.workload import Workload


class LearnedCostModel(CostModel):
    """Set-pooled kernel costs and an all-to-all head; see :mod:`shardopt.costmodel.kernel_net`."""

    def __init__(self, parts: LearnedParts, device: str = "cpu", comm_profile: CommProfile | None = None) -> None:
        self.parts = parts
        self.device = device
        self.name = f"learned-{parts.calibration.hardware}"
        self._analytic = AnalyticCostModel(calibration=parts.calibration, comm_profile=comm_profile)
        self._predictors: dict = {}

    def provenance(self, workload: Workload):
        self._analytic.held_out = self.held_out
        return self._analytic.provenance(workload)

    def _predictor(self, workload: Workload) -> KernelPredictor:
        hw = hardware_for(workload.topology)
        if hw not in self._predictors:
            self._predictors[hw] = KernelPredictor(hw, self.parts)
        return self._predictors[hw]

    @lru_cache(maxsize=1 << 16)
    def _single(self, workload: Workload, placed: PlacedShard) -> tuple[float, float]:
        shard = kernel_shard(workload, placed, measured_precision(placed.table.data_type, self.device))
        alone, empty = self._predictor(workload).kernel_seconds([[shard], []])
        return tuple(np.maximum(alone - empty, 0.0))  # type: ignore[return-value]

    def shard_cost(self, workload: Workload, spec: ShardSpec) -> ShardCost:
        """The shard's marginal kernel time (alone minus an empty kernel); comm as calibrated."""
        fwd_s, bwd_s = self._single(workload, PlacedShard(
            spec.table, spec.sharding_type, 0, spec.rows, spec.cols, spec.compute_kernel,
            spec.cache_load_factor))
        comm = self._analytic.shard_cost(workload, spec)
        return ShardCost(
            fwd_compute_ms=fwd_s * 1e3, bwd_compute_ms=bwd_s * 1e3,
            fwd_comm_ms=comm.fwd_comm_ms, bwd_comm_ms=comm.bwd_comm_ms,
            hbm_bytes=comm.hbm_bytes,
            ddr_bytes=comm.ddr_bytes,
        )

    def comm_floor_ms(self, workload: Workload, average, every_rank_sends: bool = False) -> float | None:
        return self._analytic.comm_floor_ms(workload, average, every_rank_sends)

    def comm_choice(self, workload: Workload):
        return self._analytic.comm_choice(workload)

    def additive(self, workload: Workload) -> bool:
        return False  # a rank's shards are priced together

    def compute_overhead_ms(self, workload: Workload, sharding_types: set[str]) -> float:
        if not sharding_types:
            return 0.0
        empty = self._predictor(workload).kernel_seconds([[]])[0].sum() * 1e3
        return empty * len(kernel_kinds(sharding_types))  # a kernel per kind, as TorchRec groups

    def rank_overhead_ms(self, workload: Workload, sharding_types: set[str]) -> float:
        if not sharding_types:
            return 0.0
        _, _, fwd_latency, bwd_latency = self._analytic.overheads(workload, sharding_types)
        return self.compute_overhead_ms(workload, sharding_types) + (fwd_latency + bwd_latency) * 1e3

    def placed_breakdown(self, workload: Workload, tables: Sequence[TablePlan]) -> list[RankBreakdown]:
        predictor = self._predictor(workload)
        per_rank = rank_kernels(workload, tables, self.device)
        kernels, owner = [], []
        for rank, groups in enumerate(per_rank):
            for (precision, _), members in joined(groups).items():
                kernels.append([kernel_shard(workload, p, precision) for p in members])
                owner.append(rank)
        seconds = predictor.kernel_seconds(kernels) if kernels else np.zeros((0, 2))
        compute = np.zeros((workload.topology.world_size, 2))
        for rank, (f, b) in zip(owner, seconds):
            compute[rank] += (f, b)
        curves = self._analytic.comm_curves(workload)
        if curves is not None:
            # Measured curves beat a net fitted to their few points, and replay reads the same.
            comm = rank_comm_from_all_to_all(workload, tables, lambda w, p, n: curves.seconds(w, p, n) * 1e3)
        else:
            # Links (declared or the hardware profile's) price comm as the analytic model does:
            # the net's all-to-all head learned the profiled machine's links, not the target's.
            comm = [(r.fwd_comm_ms, r.bwd_comm_ms) for r in self._analytic.placed_breakdown(workload, tables)]
        hbm, _ = plan_memory(workload, tables)
        out = []
        for rank in range(workload.topology.world_size):
            fwd, bwd = compute[rank] * 1e3
            fcomm, bcomm = comm[rank] if len(comm) > rank else (0.0, 0.0)
            out.append(RankBreakdown(
                rank=rank, fwd_compute_ms=float(fwd), bwd_compute_ms=float(bwd),
                fwd_comm_ms=fcomm, bwd_comm_ms=bcomm, total_ms=float(fwd + bwd) + fcomm + bcomm,
                hbm_bytes=hbm[rank],
            ))
        return out
