"""The cost-model contract every model (analytic, learned) fulfils."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Sequence

from shardopt.core.plan import RankBreakdown, TablePlan
from shardopt.core.workload import Table, Workload


@dataclass(frozen=True)
class ShardCost:
    """One shard's contribution to its rank, in milliseconds and bytes."""

    fwd_compute_ms: float
    bwd_compute_ms: float
    fwd_comm_ms: float
    bwd_comm_ms: float
    hbm_bytes: int
    ddr_bytes: int = 0  # host memory of UVM tiers, counted against the host's ddr_cap

    @property
    def total_ms(self) -> float:
        return self.fwd_compute_ms + self.bwd_compute_ms + self.fwd_comm_ms + self.bwd_comm_ms


class CostModel(abc.ABC):
    """Predicts the per-rank breakdown of a plan; lower is better, the max over ranks is the cost."""

    name: str

    @abc.abstractmethod
    def shard_cost(
        self,
        workload: Workload,
        table: Table,
        sharding_type: str,
        rows: int,
        cols: int,
        compute_kernel: str = "fused",
        cache_load_factor: float | None = None,
    ) -> ShardCost:
        """Cost of one shard on its own: what a search adds to a rank when it places the shard."""

    def shard_floor(
        self,
        workload: Workload,
        table: Table,
        sharding_type: str,
        rows: int,
        cols: int,
        compute_kernel: str = "fused",
        cache_load_factor: float | None = None,
    ) -> ShardCost:
        """No more than the shard costs on any rank, whatever shares it: what lower bounds add up.

        Models whose shard cost depends on the rank's other shards (a shared cache) override it.
        """
        return self.shard_cost(workload, table, sharding_type, rows, cols, compute_kernel, cache_load_factor)

    @abc.abstractmethod
    def rank_overhead_ms(self, workload: Workload, sharding_types: set[str]) -> float:
        """Fixed cost of a rank that holds shards of these sharding types (kernel calls, latency)."""

    @abc.abstractmethod
    def breakdown(self, workload: Workload, tables: Sequence[TablePlan]) -> list[RankBreakdown]:
        """The per-rank breakdown of a whole plan, one entry per rank in order."""
