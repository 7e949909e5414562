"""The contracts between stages, in one place: what a shard is, what a plan costs, what a search
promises, and how a caller configures planning.

A synchronous training step has four phases: the input all-to-all (ids out, pooled embeddings
back), the lookups, the gradients' all-to-all (and replicas' all-reduce), and the backward lookups
with the fused update. Every all-to-all is a collective: no rank gets its inputs until the slowest
rank has sent them, so a step takes about the sum over phases of the slowest rank in each (the
"critical path", as TorchRec's planner estimates it in its stats), not the slowest rank's sum. The
two differ when a plan trades compute on one rank against traffic on another.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated, Literal, Optional, Protocol, Sequence

from pydantic import Field, Strict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from shardopt.core.plan import RankBreakdown, Shard, TablePlan
from shardopt.core.validation import STRICT
from shardopt.core.workload import Table

if TYPE_CHECKING:
    from shardopt.core.workload import Workload
    from shardopt.costmodel.base import CostModel

# -- objective -------------------------------------------------------------------------------------

# One rank's milliseconds per phase, in this order.
PHASES = ("fwd_compute_ms", "fwd_comm_ms", "bwd_compute_ms", "bwd_comm_ms")
Phases = tuple[float, float, float, float]
ObjectiveName = Literal["critical-path", "bottleneck"]


def rank_phases(r) -> Phases:
    """A RankBreakdown (or ShardCost) as its four phases."""
    return (r.fwd_compute_ms, r.fwd_comm_ms, r.bwd_compute_ms, r.bwd_comm_ms)


@dataclass(frozen=True)
class Objective:
    """What a search minimises: the critical path of a step, or the bottleneck rank's total."""

    name: ObjectiveName

    def score(self, ranks: Sequence[Phases]) -> float:
        if not ranks:
            return 0.0
        if self.name == "bottleneck":
            return max(sum(p) for p in ranks)
        return sum(max(p[i] for p in ranks) for i in range(len(PHASES)))

    def sources(self, ranks: Sequence[Phases]) -> list[tuple[int, Phases]]:
        """Ranks to move shards off, each with the weight of every phase in weighing its shards:
        the bottleneck rank, all phases alike; or each phase's slowest rank, its phases that are
        slowest. Heaviest first, each rank once."""
        world = range(len(ranks))
        if self.name == "bottleneck":
            worst = max(world, key=lambda r: (sum(ranks[r]), -r))
            return [(worst, (1.0,) * len(PHASES))]
        weights: dict[int, list[float]] = {}
        for i in range(len(PHASES)):
            slowest = max(world, key=lambda r: (ranks[r][i], -r))
            weights.setdefault(slowest, [0.0] * len(PHASES))[i] = 1.0
        order = sorted(weights, key=lambda r: (-sum(w * x for w, x in zip(weights[r], ranks[r])), r))
        return [(r, tuple(weights[r])) for r in order]


CRITICAL_PATH = Objective("critical-path")
BOTTLENECK = Objective("bottleneck")
OBJECTIVES = {o.name: o for o in (CRITICAL_PATH, BOTTLENECK)}


@dataclass(frozen=True)
class Breakdown:
    """A plan's per-rank breakdown (predicted or measured) and the figures drawn from it."""

    ranks: tuple[RankBreakdown, ...]

    @classmethod
    def of(cls, ranks: Sequence[RankBreakdown]) -> "Breakdown":
        return cls(tuple(ranks))

    @property
    def bottleneck_ms(self) -> float:
        """The slowest rank's total."""
        return max((r.total_ms for r in self.ranks), default=0.0)

    @property
    def step_ms(self) -> float:
        """The critical path: each phase's slowest rank, summed."""
        return self.score(CRITICAL_PATH)

    @property
    def mean_ms(self) -> float:
        return sum(r.total_ms for r in self.ranks) / len(self.ranks) if self.ranks else 0.0

    def score(self, objective: Objective) -> float:
        return objective.score([rank_phases(r) for r in self.ranks])


# -- shards ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardSpec:
    """One shard to price or size: a ``rows`` x ``cols`` piece of ``table`` cut as
    ``sharding_type``, run by ``compute_kernel`` (with its HBM cache share for UVM caching)."""

    table: Table
    sharding_type: str
    rows: int
    cols: int
    compute_kernel: str = "fused"
    cache_load_factor: Optional[float] = None

    @classmethod
    def placed(cls, table: Table, tp: TablePlan, shard: Shard) -> "ShardSpec":
        """The spec of ``shard``, one piece of ``table`` as the plan's ``tp`` cuts it."""
        return cls(table, tp.sharding_type, shard.sizes[0], shard.sizes[1], tp.compute_kernel, tp.cache_load_factor)


# -- search ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchResult:
    """A search's plan, the bound it proved, and how it got there (for the plan's search block)."""

    tables: tuple[TablePlan, ...]
    lower_bound_ms: float
    algorithm: str = "greedy"
    status: str = "HEURISTIC"
    solver_bound_ms: Optional[float] = None
    variables: Optional[int] = None
    repair_moves: Optional[int] = None


class Search(Protocol):
    """Places every table of a workload under a cost model. ``objective`` is what it minimises
    (None for baselines that minimise nothing named)."""

    name: str
    objective: Optional[Objective]

    def search(self, workload: "Workload", cost_model: "CostModel") -> SearchResult: ...


# -- configuration ---------------------------------------------------------------------------------

MAX_TIME_LIMIT_S = 3600.0
# The defaults of every way in (CLI, plugin, bench, and the search classes themselves).
DEFAULT_TIME_LIMIT_S = 5.0
DEFAULT_CANDIDATES = "torchrec"
SearchName = Literal["ilp", "greedy"]
CandidateSet = Literal["torchrec", "all"]


@pydantic_dataclass(frozen=True, config=STRICT)
class PlanConfig:
    """How to plan, in one value shared by the CLI, the TorchRec plugin and the bench.

    ``search``: CP-SAT warm-started by greedy, or the greedy alone; ``time_limit_s`` sizes the
    search's deterministic work; ``candidates``: the cuts TorchRec can run, or also hot-row
    replicas and uneven row splits; ``cost_model``: a registry spec (``analytic``, ``learned``, a
    model file); ``comm_source``: where communication costs come from: ``auto`` (the workload's
    declared links, else the hardware profile's, or all-to-all times the model measured on that
    very target; :mod:`shardopt.costmodel.comm_source`), or a profile folder whose measured
    all-to-all times are to be used (``--comm-profile``).
    """

    search: SearchName = "ilp"
    time_limit_s: Annotated[float, Strict(), Field(gt=0, le=MAX_TIME_LIMIT_S, allow_inf_nan=False)] = DEFAULT_TIME_LIMIT_S
    candidates: CandidateSet = DEFAULT_CANDIDATES
    objective: ObjectiveName = "critical-path"
    cost_model: str = "analytic"
    comm_source: Annotated[str, Strict(), Field(min_length=1)] = "auto"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "<config>") -> "PlanConfig":
        from shardopt.core.loaders import parse_json
        from shardopt.core.validation import validate_as

        return validate_as(cls, parse_json(text, source), source)
