"""The plan: which shards of which table live on which rank, as a versioned JSON file.

``offsets`` and ``sizes`` are ``[row, col]`` as in TorchRec's ShardMetadata; a data_parallel table
has one full-size shard per rank that holds it. Later format changes add fields and bump
``version``, keeping a reader for the old one.

Version 2 adds a table's ``cache_load_factor`` (the share of its rows a ``fused_uvm_caching``
kernel keeps in HBM: RecShard's hot tier), its ``replicated_rows`` (FlexShard's hot rows kept on
every rank) and the ``search`` block of ``predicted`` (which search,
its solver status and bound; the gap is max_ms over lower_bound_ms). A version 1 file is read as version 2 without them.

Version 3 adds ``predicted.sensitivity`` (the step with compute scaled against communication,
and its spread under each table's own error, with what that doubt rests on) and
``predicted.search.robust`` (whether the search minimised the step under that doubt). A version 2
file is read as version 3 without them.

Version 4 adds ``parallelism``: the plan is for one sharding group of a 2D world (TorchRec's
DMPCollection), with the world, the group's size, how its replicas sync and what that costs. Only
such plans are written as version 4; a plan without it is still version 3, as every reader since
reads it.
"""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import Field, Strict
from pydantic.dataclasses import dataclass

from shardopt.core.errors import ShardoptError
from shardopt.core.files import write_atomic
from shardopt.core.validation import STRICT, validate_as
from shardopt.core.workload import MAX_WORLD, ShardingType

PLAN_FORMAT = "shardopt-plan"
PLAN_VERSION = 3
GROUP_PLAN_VERSION = 4  # a plan with a parallelism block
READABLE_VERSIONS = (1, 2, 3, 4)

ComputeKernel = Literal["fused", "fused_uvm", "fused_uvm_caching", "dense"]
# Numbers are strict (a "3" in the file is an error, not a 3) and bounded as the workload's are.
NonNegInt = Annotated[int, Strict(), Field(ge=0, le=2**62)]
PositiveInt = Annotated[int, Strict(), Field(gt=0, le=2**62)]
Milliseconds = Annotated[float, Strict(), Field(ge=0, le=1e12, allow_inf_nan=False)]
LoadFactor = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]


@dataclass(frozen=True, config=STRICT)
class Shard:
    """A rectangle of a table on one rank: rows [offsets[0], +sizes[0]), cols likewise."""

    rank: NonNegInt
    offsets: tuple[NonNegInt, NonNegInt]
    sizes: tuple[PositiveInt, PositiveInt]


@dataclass(frozen=True, config=STRICT)
class TablePlan:
    """How one table is cut (its sharding type) and where each piece goes."""

    name: Annotated[str, Strict(), Field(min_length=1)]
    sharding_type: ShardingType
    shards: Annotated[tuple[Shard, ...], Field(min_length=1)]
    compute_kernel: ComputeKernel = "fused"
    # HBM cache share of a fused_uvm_caching table; None means TorchRec's default (0.2).
    cache_load_factor: Optional[LoadFactor] = None
    # FlexShard: the table's ids are remapped hottest first and rows [0, replicated_rows) live on
    # every rank; the shards cover rows [replicated_rows, N). See shardopt/arithmetic/hotrows.py.
    replicated_rows: Optional[PositiveInt] = None

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(shard.rank for shard in self.shards)


@dataclass(frozen=True, config=STRICT)
class RankBreakdown:
    """One rank's predicted (or replayed) cost per iteration and its memory."""

    rank: NonNegInt
    fwd_compute_ms: Milliseconds
    bwd_compute_ms: Milliseconds
    fwd_comm_ms: Milliseconds
    bwd_comm_ms: Milliseconds
    total_ms: Milliseconds
    hbm_bytes: NonNegInt


@dataclass(frozen=True, config=STRICT)
class SearchInfo:
    """How the plan was found: the search and the solver's verdict (no timings: the same input
    must give the same file)."""

    algorithm: Annotated[str, Strict()]  # "ilp", "greedy", "greedy+repair", ...
    status: Annotated[str, Strict()]  # OPTIMAL, FEASIBLE, or why the solver was skipped
    solver_bound_ms: Optional[Milliseconds] = None  # CP-SAT's best bound, when it ran
    variables: Optional[NonNegInt] = None  # placement literals in the solver's model
    repair_moves: Optional[NonNegInt] = None  # moves the re-scoring repair made
    objective: Optional[Literal["critical-path", "bottleneck"]] = None  # what the search minimised
    robust: Optional[bool] = None  # whether under the model's doubt (predicted.sensitivity)


@dataclass(frozen=True, config=STRICT)
class Sensitivity:
    """How far the plan's step leans on uncertain constants: the step with the lookups' phases
    times each of ``compute_scales`` (``steps_ms``), and its 10th, 50th and 90th percentile when
    each table's lookups are off by its own error (``expected_ms``; ``table_error``: their median
    log-sd); ``basis``: what that doubt rests on; ``extrapolated``: tables outside the shapes the
    model was fitted on."""

    compute_scales: Annotated[tuple[Annotated[float, Strict(), Field(gt=0, le=1e3)], ...], Field(min_length=1)]
    steps_ms: Annotated[tuple[Milliseconds, ...], Field(min_length=1)]
    expected_ms: tuple[Milliseconds, Milliseconds, Milliseconds]
    table_error: Annotated[float, Strict(), Field(ge=0, le=10)]
    basis: Annotated[str, Strict()]
    extrapolated: tuple[Annotated[str, Strict()], ...] = ()

    def __post_init__(self) -> None:
        if len(self.steps_ms) != len(self.compute_scales):
            raise ValueError("steps_ms: one step per compute scale")
        if list(self.expected_ms) != sorted(self.expected_ms):
            raise ValueError("expected_ms: the 10th, 50th and 90th percentile, in that order")


@dataclass(frozen=True, config=STRICT)
class Predicted:
    """What the cost model expects of the plan, and the bound no plan can beat under it."""

    cost_model: Annotated[str, Strict()]
    max_ms: Milliseconds
    lower_bound_ms: Milliseconds
    per_rank: Annotated[tuple[RankBreakdown, ...], Field(min_length=1)]
    search: Optional[SearchInfo] = None
    comm_source: Optional[Annotated[str, Strict()]] = None  # what priced communication, for people
    sensitivity: Optional[Sensitivity] = None

    @property
    def bottleneck(self) -> RankBreakdown:
        return max(self.per_rank, key=lambda r: (r.total_ms, -r.rank))

    @property
    def gap(self) -> float:
        """Relative distance of the plan's bottleneck above the lower bound."""
        if self.lower_bound_ms <= 0:
            return 0.0
        return self.max_ms / self.lower_bound_ms - 1.0


@dataclass(frozen=True, config=STRICT)
class GroupChoice:
    """One sharding group size ``auto`` weighed: its predicted step with the sync, or why not."""

    sharding_group_size: PositiveInt
    step_ms: Optional[Milliseconds] = None
    sync_ms: Optional[Milliseconds] = None
    refused: Optional[Annotated[str, Strict()]] = None


@dataclass(frozen=True, config=STRICT)
class PlanParallelism:
    """A group plan's place in its 2D world: every one of ``replicas`` groups of
    ``sharding_group_size`` ranks runs this plan; ``sync_ms`` is the replicas' sync per step
    (amortised over ``sync_every``; the slowest replica group), ``step_ms`` the group's critical
    path plus it."""

    world_size: Annotated[int, Strict(), Field(gt=0, le=MAX_WORLD)]
    sharding_group_size: Annotated[int, Strict(), Field(gt=0, le=MAX_WORLD)]
    sync_every: PositiveInt
    strategy: Literal["default", "fully_sharded"]
    inter_host_allreduce: bool
    sync_ms: Milliseconds
    sync_bytes: NonNegInt  # the most one rank syncs
    step_ms: Milliseconds
    chosen_by: Literal["workload", "auto"] = "workload"
    choices: tuple[GroupChoice, ...] = ()

    def __post_init__(self) -> None:
        if self.world_size % self.sharding_group_size:
            raise ValueError(f"sharding_group_size: must divide world_size {self.world_size}")

    @property
    def replicas(self) -> int:
        return self.world_size // self.sharding_group_size


@dataclass(frozen=True, config=STRICT)
class WorkloadRef:
    name: Annotated[str, Strict()]
    sha256: Optional[Annotated[str, Strict()]] = None


@dataclass(frozen=True, config=STRICT)
class Plan:
    """A full sharding plan for one workload."""

    format: Literal["shardopt-plan"]
    version: Literal[3, 4]
    workload: WorkloadRef
    world_size: Annotated[int, Strict(), Field(gt=0, le=MAX_WORLD)]
    tables: tuple[TablePlan, ...]
    predicted: Optional[Predicted] = None
    parallelism: Optional[PlanParallelism] = None

    def __post_init__(self) -> None:
        if self.parallelism is not None:
            if self.version < GROUP_PLAN_VERSION:
                raise ValueError(f"parallelism: not a version {self.version} field (use version {GROUP_PLAN_VERSION})")
            if self.parallelism.sharding_group_size != self.world_size:
                raise ValueError(
                    f"parallelism.sharding_group_size: a group plan's world_size is its group's,"
                    f" {self.world_size}, got {self.parallelism.sharding_group_size}"
                )


def _render(value: object, indent: int = 0, width: int = 100) -> str:
    """JSON with each value on one line when it fits in ``width``: a shard per line, readable diffs."""
    flat = json.dumps(value)
    if len(flat) + indent <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {_render(v, indent + 1, width)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _render(v, indent + 1, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def _plain(obj: object) -> object:
    """Plain JSON data with floats at 6 decimals (so equal plans serialise to equal bytes) and no None
    fields, read off the dataclasses in one pass, with no deep copies: a 5000-table plan's
    dataclasses were copied field by field (0.1-0.2 s) only to be read once."""
    if isinstance(obj, float):
        return round(obj, 6)
    if isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items() if v is not None}
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return obj
    return {name: _plain(v) for name in _field_names(type(obj)) if (v := getattr(obj, name)) is not None}


@lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def plan_to_json(plan: Plan) -> str:
    return _render(_plain(plan)) + "\n"


def write_plan(plan: Plan, path: str | Path) -> None:
    write_atomic(path, plan_to_json(plan))


def plan_from_dict(data: object, source: str = "<plan>") -> Plan:
    if isinstance(data, dict):
        if data.get("format") != PLAN_FORMAT:
            raise ShardoptError(
                f"{source}: format: must be {PLAN_FORMAT!r}, got {data.get('format')!r}"
            )
        version = data.get("version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise ShardoptError(
                f"{source}: version: this shardopt reads plan versions"
                f" {', '.join(map(str, READABLE_VERSIONS))}, got {version!r}"
            )
        if version == 1:
            data = _upgrade_v1(data, source)
        if data.get("version") == 2:
            data = _upgrade_v2(data, source)
    return validate_as(Plan, data, source)


def _upgrade_v1(data: dict, source: str) -> dict:
    """A version 1 plan is a version 2 plan without the fields version 2 added."""
    tables = data.get("tables")
    for i, table in enumerate(tables if isinstance(tables, list) else []):
        for new in ("cache_load_factor", "replicated_rows"):
            if isinstance(table, dict) and new in table:
                raise ShardoptError(f"{source}: tables[{i}].{new}: not a version 1 field (use version 2)")
    predicted = data.get("predicted")
    if isinstance(predicted, dict) and "search" in predicted:
        raise ShardoptError(f"{source}: predicted.search: not a version 1 field (use version 2)")
    return {**data, "version": 2}


def _upgrade_v2(data: dict, source: str) -> dict:
    """A version 2 plan is a version 3 plan without the fields version 3 added."""
    predicted = data.get("predicted")
    if isinstance(predicted, dict):
        if "sensitivity" in predicted:
            raise ShardoptError(f"{source}: predicted.sensitivity: not a version 2 field (use version 3)")
        if isinstance(predicted.get("search"), dict) and "robust" in predicted["search"]:
            raise ShardoptError(f"{source}: predicted.search.robust: not a version 2 field (use version 3)")
    return {**data, "version": 3}


def read_plan(path: str | Path) -> Plan:
    from shardopt.core.loaders import load_json

    return plan_from_dict(load_json(path, "plan file"), str(path))
