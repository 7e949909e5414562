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


COMPUTE = (0, 2)  # the lookups' phases in PHASES; the others are all-to-alls
ROBUST_TIE = 1e-3  # the nominal step's weight beside the robust one: it breaks ties


@dataclass(frozen=True)
class Objective:
    """What a search minimises: the critical path of a step, or the bottleneck rank's total."""

    name: ObjectiveName

    @property
    def robust(self) -> bool:
        return False

    def score(self, ranks: Sequence[Phases], penalty: float = 0.0) -> float:
        """The plan's score from its ranks' phases; ``penalty``: milliseconds of lookups its cuts
        are expected to add to the step (a robust objective's, :class:`RobustObjective`)."""
        if not ranks:
            return 0.0
        if self.name == "bottleneck":
            return max(sum(p[:len(PHASES)]) for p in ranks)
        return self.score_peaks([max(p[i] for p in ranks) for i in range(len(PHASES))], penalty)

    def score_peaks(self, peaks: Sequence[float], penalty: float = 0.0) -> float:
        """The critical path's score from each phase's slowest rank."""
        return float(sum(peaks[:len(PHASES)]))

    def score_rows(self, peaks, penalty: float = 0.0):
        """:meth:`score_peaks` of every row of an array of peaks (a vectorised search's trials)."""
        import numpy as np

        return np.asarray(peaks)[:, :len(PHASES)].sum(axis=1)

    def phase_weights(self, peaks: Sequence[float], penalty: float = 0.0) -> Phases:
        """How much the score grows per millisecond of each phase's slowest rank."""
        return (1.0, 1.0, 1.0, 1.0)

    def sources(self, ranks: Sequence[Phases], penalty: float = 0.0) -> list[tuple[int, Phases]]:
        """Ranks to move shards off, each with the weight of every phase in weighing its shards:
        the bottleneck rank, all phases alike; or each phase's slowest rank, its phases that are
        slowest (weighed as the score weighs them). Heaviest first, each rank once."""
        world = range(len(ranks))
        if self.name == "bottleneck":
            worst = max(world, key=lambda r: (sum(ranks[r]), -r))
            return [(worst, (1.0,) * len(PHASES))]
        peaks = [max(p[i] for p in ranks) for i in range(len(PHASES))]
        scale = self.phase_weights(peaks, penalty)
        weights: dict[int, list[float]] = {}
        for i in range(len(PHASES)):
            slowest = max(world, key=lambda r: (ranks[r][i], -r))
            weights.setdefault(slowest, [0.0] * len(PHASES))[i] = scale[i]
        order = sorted(weights, key=lambda r: (-sum(w * x for w, x in zip(weights[r], ranks[r])), r))
        return [(r, tuple(weights[r])) for r in order]


@dataclass(frozen=True)
class RobustObjective(Objective):
    """The step as it may turn out when the cost model is wrong (``--robust``).

    Two doubts (:mod:`shardopt.costmodel.uncertainty` sizes them from the model's provenance):
    - compute against communication: the step is scored at each of ``scales`` (the lookups'
      phases times the scale), as its ratio to a ``balanced`` plan's step at that scale (its
      regret), the worst of them kept, in milliseconds of the step at scale 1;
    - each table's lookups off by its own error: a cut's pieces add, in expectation, what their
      variance adds to the slowest rank (``variance``: each table's weight on its pieces'
      squared milliseconds, forward and backward), passed in as the plan's ``penalty``;
    - that error leaning with the tables' shapes: ``makeup`` gives each table its lookups'
      factor under each of a few variants of the model (``search/makeup.py`` evens the ranks'
      make-up under them).
    The nominal step breaks ties (``ROBUST_TIE``).
    """

    scales: tuple[float, ...] = (1.0,)
    balanced: tuple[float, float] = (1.0, 0.0)  # (lookups, all-to-alls) of a balanced plan's step
    variance: tuple[tuple[str, float, float], ...] = ()
    makeup: tuple[tuple[str, tuple[float, ...]], ...] = ()  # table -> its factor in each variant

    @property
    def robust(self) -> bool:
        return True

    def factors(self) -> list[tuple[float, float]]:
        """Per scale, the score's weight on (lookups, all-to-alls): scale and 1 over the regret's base."""
        compute, comm = self.balanced
        unit = compute + comm
        return [(s * unit / (s * compute + comm), unit / (s * compute + comm)) for s in self.scales]

    def _worst(self, compute: float, comm: float) -> tuple[float, int]:
        values = [a * compute + b * comm for a, b in self.factors()]
        worst = max(range(len(values)), key=lambda i: (values[i], -i))
        return values[worst], worst

    def score_peaks(self, peaks: Sequence[float], penalty: float = 0.0) -> float:
        compute = peaks[COMPUTE[0]] + peaks[COMPUTE[1]]
        comm = sum(peaks[:len(PHASES)]) - compute
        return self._worst(compute + penalty, comm)[0] + ROBUST_TIE * (compute + comm)

    def score_rows(self, peaks, penalty: float = 0.0):
        import numpy as np

        peaks = np.asarray(peaks)
        compute = peaks[:, COMPUTE[0]] + peaks[:, COMPUTE[1]]
        comm = peaks[:, :len(PHASES)].sum(axis=1) - compute
        worst = np.max([a * (compute + penalty) + b * comm for a, b in self.factors()], axis=0)
        return worst + ROBUST_TIE * (compute + comm)

    def phase_weights(self, peaks: Sequence[float], penalty: float = 0.0) -> Phases:
        compute = peaks[COMPUTE[0]] + peaks[COMPUTE[1]]
        _, worst = self._worst(compute + penalty, sum(peaks[:len(PHASES)]) - compute)
        a, b = self.factors()[worst]
        return (a + ROBUST_TIE, b + ROBUST_TIE, a + ROBUST_TIE, b + ROBUST_TIE)

    def penalty_of(self, table: str, pieces: Sequence) -> float:
        """What a cut's pieces (each a ShardCost) add to the slowest rank's lookups in
        expectation, at scale 1."""
        weight = self._variance().get(table)
        if weight is None:
            return 0.0
        return sum(weight[0] * p.fwd_compute_ms ** 2 + weight[1] * p.bwd_compute_ms ** 2 for p in pieces)

    def _variance(self) -> dict[str, tuple[float, float]]:
        cached = self.__dict__.get("_variance_map")
        if cached is None:
            cached = {name: (f, b) for name, f, b in self.variance}
            object.__setattr__(self, "_variance_map", cached)
        return cached


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
# The defaults of every way in (CLI, plugin, bench, and the search classes themselves). It sizes
# deterministic work, so its wall time follows the machine: 1 s of it planned the bench's regime
# tasks 0.5% (worst 1.7%) longer by the model than 5 s did, in a quarter of the time, far inside
# the model's own error; a slow 2-core machine plans 100 tables x 8 ranks in about a second.
DEFAULT_TIME_LIMIT_S = 1.0
DEFAULT_CANDIDATES = "torchrec"
# The logger the search says its stages on (INFO); `shardopt plan` shows them on a terminal.
STAGE_LOGGER = "shardopt.search"
SearchName = Literal["ilp", "greedy"]
CandidateSet = Literal["torchrec", "all"]
RobustMode = Literal["auto", "on", "off"]


@pydantic_dataclass(frozen=True, config=STRICT)
class PlanConfig:
    """How to plan, in one value shared by the CLI, the TorchRec plugin and the bench.

    ``search``: CP-SAT warm-started by greedy, or the greedy alone; ``time_limit_s`` sizes the
    search's deterministic work; ``candidates``: the cuts TorchRec can run, or also hot-row
    replicas and uneven row splits; ``cost_model``: a registry spec (``analytic``, ``learned``, a
    model file); ``comm_source``: where communication costs come from: ``auto`` (the workload's
    declared links, else the hardware profile's, or all-to-all times the model measured on that
    very target; :mod:`shardopt.costmodel.comm_source`), or a profile folder whose measured
    all-to-all times are to be used (``--comm-profile``); ``robust``: minimise the step under the
    model's doubt (``on``), the nominal step (``off``), or ``auto``: robust where the model was
    not measured on the workload's target (:mod:`shardopt.costmodel.uncertainty`).
    """

    search: SearchName = "ilp"
    time_limit_s: Annotated[float, Strict(), Field(gt=0, le=MAX_TIME_LIMIT_S, allow_inf_nan=False)] = DEFAULT_TIME_LIMIT_S
    candidates: CandidateSet = DEFAULT_CANDIDATES
    objective: ObjectiveName = "critical-path"
    cost_model: str = "analytic"
    comm_source: Annotated[str, Strict(), Field(min_length=1)] = "auto"
    robust: RobustMode = "auto"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "<config>") -> "PlanConfig":
        from shardopt.core.loaders import parse_json
        from shardopt.core.validation import validate_as

        return validate_as(cls, parse_json(text, source), source)
