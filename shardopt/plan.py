"""The plan: which shards of which table live on which rank, as a versioned JSON file.

``offsets`` and ``sizes`` are ``[row, col]`` as in TorchRec's ShardMetadata; a data_parallel table
has one full-size shard per rank that holds it. Later format changes add fields and bump
``version``, keeping a reader for the old one.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import Field, Strict
from pydantic.dataclasses import dataclass

from shardopt.errors import ShardoptError
from shardopt.fileio import write_atomic
from shardopt.schema import STRICT, validate_as
from shardopt.workload import ShardingType

PLAN_FORMAT = "shardopt-plan"
PLAN_VERSION = 1

ComputeKernel = Literal["fused", "fused_uvm", "fused_uvm_caching", "dense"]
NonNegInt = Annotated[int, Strict(), Field(ge=0)]
PositiveInt = Annotated[int, Strict(), Field(gt=0)]
Milliseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


@dataclass(frozen=True, config=STRICT)
class Shard:
    """A rectangle of a table on one rank: rows [offsets[0], +sizes[0]), cols likewise."""

    rank: NonNegInt
    offsets: tuple[NonNegInt, NonNegInt]
    sizes: tuple[PositiveInt, PositiveInt]


@dataclass(frozen=True, config=STRICT)
class TablePlan:
    """How one table is cut (its sharding type) and where each piece goes."""

    name: Annotated[str, Field(min_length=1)]
    sharding_type: ShardingType
    shards: Annotated[tuple[Shard, ...], Field(min_length=1)]
    compute_kernel: ComputeKernel = "fused"

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
class Predicted:
    """What the cost model expects of the plan, and the bound no plan can beat under it."""

    cost_model: str
    max_ms: Milliseconds
    lower_bound_ms: Milliseconds
    per_rank: tuple[RankBreakdown, ...]

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
class WorkloadRef:
    name: str
    sha256: Optional[str] = None


@dataclass(frozen=True, config=STRICT)
class Plan:
    """A full sharding plan for one workload."""

    format: Literal["shardopt-plan"]
    version: Literal[1]
    workload: WorkloadRef
    world_size: PositiveInt
    tables: tuple[TablePlan, ...]
    predicted: Optional[Predicted] = None


def _rounded(obj: object) -> object:
    """Plain JSON data with floats at 6 decimals, so equal plans serialise to equal bytes."""
    if isinstance(obj, float):
        return round(obj, 6)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v) for v in obj]
    return obj


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


def plan_to_json(plan: Plan) -> str:
    return _render(_rounded(dataclasses.asdict(plan))) + "\n"


def write_plan(plan: Plan, path: str | Path) -> None:
    write_atomic(path, plan_to_json(plan))


def plan_from_dict(data: object, source: str = "<plan>") -> Plan:
    if isinstance(data, dict):
        if data.get("format") != PLAN_FORMAT:
            raise ShardoptError(
                f"{source}: format: must be {PLAN_FORMAT!r}, got {data.get('format')!r}"
            )
        if data.get("version") != PLAN_VERSION:
            raise ShardoptError(
                f"{source}: version: this shardopt reads plan version {PLAN_VERSION},"
                f" got {data.get('version')!r}"
            )
    return validate_as(Plan, data, source)


def read_plan(path: str | Path) -> Plan:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ShardoptError(f"{path}: cannot read plan: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ShardoptError(
            f"{path}: malformed JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    return plan_from_dict(data, str(path))
