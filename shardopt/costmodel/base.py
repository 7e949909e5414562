"""The cost-model contract every model (analytic, learned) fulfils: everything a search, a bound
or replay asks of a model is declared here, with the default an additive model would give."""

from __future__ import annotations

import dataclasses

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

from shardopt.arithmetic.hotrows import expand
from shardopt.contracts import ShardSpec
from shardopt.core.plan import RankBreakdown, TablePlan
from shardopt.core.workload import Workload

if TYPE_CHECKING:
    from shardopt.arithmetic.traffic import CommBytes
    from shardopt.costmodel.comm_curve import CommCurves
    from shardopt.costmodel.comm_source import CommChoice
    from shardopt.costmodel.provenance import Provenance


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
    """Predicts the per-rank breakdown of a plan; lower is better."""

    name: str
    # True when a shard's cost depends on the rank's other shards (a shared cache), so that
    # :meth:`shard_floor` differs from :meth:`shard_cost` and a lower bound must add up floors.
    floor_below_cost: ClassVar[bool] = False
    # Relative error on the held-out kernels of the profile it was fitted on (its file's report).
    held_out: float | None = None

    @abc.abstractmethod
    def shard_cost(self, workload: Workload, spec: ShardSpec) -> ShardCost:
        """Cost of one shard on its own: what a search adds to a rank when it places the shard."""

    def shard_floor(self, workload: Workload, spec: ShardSpec) -> ShardCost:
        """No more than the shard costs on any rank, whatever shares it: what lower bounds add up."""
        return self.shard_cost(workload, spec)

    def provenance(self, workload: Workload) -> "Provenance":
        """Where the model's figures come from, for this workload's target (the robust search's
        doubt, :mod:`shardopt.costmodel.uncertainty`); a model that says nothing: unknown."""
        from shardopt.costmodel.provenance import Provenance

        return Provenance(False, f"{self.name}: provenance unknown", self.held_out)

    @abc.abstractmethod
    def rank_overhead_ms(self, workload: Workload, sharding_types: set[str]) -> float:
        """Fixed cost of a rank that holds shards of these sharding types (kernel calls, latency)."""

    def compute_overhead_ms(self, workload: Workload, sharding_types: set[str]) -> float:
        """Kernel-call time alone; models whose comm comes from measured curves separate it."""
        return self.rank_overhead_ms(workload, sharding_types)

    def additive(self, workload: Workload) -> bool:
        """Whether a plan's cost is its shards' costs summed per rank (plus kind overheads)."""
        return True

    def comm_curves(self, workload: Workload) -> "CommCurves | None":
        """The measured all-to-all curves the model reads a rank's comm from, if any."""
        return self.comm_choice(workload).curves

    def comm_choice(self, workload: Workload) -> "CommChoice":
        """Where the model prices this workload's comm from (the one rule of
        :mod:`shardopt.costmodel.comm_source`); a model with no measurements: the links."""
        from shardopt.costmodel.comm_source import choose_comm

        return choose_comm(workload)

    def comm_floor_ms(self, workload: Workload, average: "CommBytes", every_rank_sends: bool = False) -> float | None:
        """A floor under the busiest rank's comm when ranks average ``average`` bytes; None when
        the model's comm is additive per shard (the bound then adds shard costs)."""
        return None

    def breakdown(self, workload: Workload, tables: Sequence[TablePlan]) -> list[RankBreakdown]:
        """The per-rank breakdown of a whole plan, one entry per rank in order. Hot-row tables
        are expanded here, once, into their replicated head and sharded tail."""
        rows = self.placed_breakdown(*expand(workload, tables))
        return [slowed(workload, row) for row in rows] if workload.topology.ranks else rows

    def rank_breakdown(self, workload: Workload, tables: Sequence[TablePlan], rank: int) -> RankBreakdown:
        """One rank's entry of :meth:`breakdown` (a repair re-scores one rank at a time); a model
        that prices a rank from its own shards alone answers without pricing the others (and
        passes its answer through :func:`slowed`)."""
        return self.breakdown(workload, tables)[rank]

    @abc.abstractmethod
    def placed_breakdown(self, workload: Workload, tables: Sequence[TablePlan]) -> list[RankBreakdown]:
        """:meth:`breakdown` of a plan whose tables are all plain (hot rows already expanded)."""


def slowed(workload: Workload, row: RankBreakdown) -> RankBreakdown:
    """A rank's breakdown on a rank slower than the profile (``topology.ranks[].speed``): its
    lookups take 1/speed as long; its all-to-all is the links', unchanged."""
    speed = workload.topology.rank_speeds[row.rank] if row.rank < workload.topology.world_size else 1.0
    if speed == 1.0:
        return row
    fwd, bwd = row.fwd_compute_ms / speed, row.bwd_compute_ms / speed
    return dataclasses.replace(row, fwd_compute_ms=fwd, bwd_compute_ms=bwd,
                               total_ms=fwd + bwd + row.fwd_comm_ms + row.bwd_comm_ms)


def whole_costs(workload: Workload, model: CostModel) -> dict[str, ShardCost]:
    """Each table priced whole on one rank (table-wise): what a balanced rank's share is reckoned
    from (the robust objective's reference, a replica's company)."""
    return {t.name: model.shard_cost(workload, ShardSpec(t, "table_wise", t.num_embeddings, t.embedding_dim))
            for t in workload.tables}
