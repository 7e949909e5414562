"""What the gate records of one workload's plan, and the baseline file that holds it.

The baseline names the shardopt version, the cost model (name and file digest) and each workload's
hash, so a changed model or workload is reported as that, not as a wall of regressions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import Field, Strict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from shardopt.contracts import Breakdown, ShardSpec
from shardopt.core.errors import ShardoptError
from shardopt.core.files import write_atomic
from shardopt.core.plan import Plan
from shardopt.core.validation import STRICT
from shardopt.core.workload import MAX_WORLD, ShardingType, Workload
from shardopt.costmodel.base import CostModel

GATE_FORMAT = "shardopt-gate"
GATE_VERSION = 1


@dataclass(frozen=True)
class TableState:
    sharding_type: str
    ranks: list
    cost_ms: float  # the table's shards' costs on their own, summed


@dataclass
class PlanState:
    """A workload's plan as the gate compares it."""

    workload_sha256: str
    valid: bool
    step_ms: float
    bottleneck_ms: float
    headroom: float  # 1 - the fullest rank's memory over its cap
    tables: dict = field(default_factory=dict)  # name -> TableState
    cost_model: str = ""  # the model's name and file digest: predictions of two models do not compare
    # Whether the plan was robust to the model's doubt: pinned with the model, so that a run on
    # another machine (where --robust auto may decide otherwise) plans as the baseline did.
    robust: bool = False


def model_id(model: CostModel, workload: Workload) -> str:
    """The model's name and, when it comes from a file, the file's digest."""
    from shardopt.costmodel.registry import embedded_model_path, workload_hardware

    path = embedded_model_path(workload_hardware(workload)) if model.name != "analytic-v0" else None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path is not None else "none"
    return f"{model.name}@{digest}"


def plan_state(workload: Workload, sha256: str, plan: Plan, model: CostModel, valid: bool) -> PlanState:
    from shardopt.arithmetic.checks import planned_workload
    from shardopt.arithmetic.memory import plan_memory
    from shardopt.costmodel.replica_sync import replica_sync

    sync_ms = 0.0
    if plan.parallelism is not None and workload.parallelism is not None:  # 2D: the group's, plus the sync
        sync_ms = replica_sync(workload, plan.world_size, plan.tables).slowest_ms
        workload = planned_workload(workload, plan)
    breakdown = Breakdown.of(model.breakdown(workload, plan.tables))
    hbm, _ = plan_memory(workload, plan.tables)
    tables = {}
    by_name = workload.tables_by_name
    for tp in plan.tables:
        table = by_name.get(tp.name)
        if table is None:
            continue
        cost = sum(model.shard_cost(workload, ShardSpec.placed(table, tp, s)).total_ms for s in tp.shards)
        tables[tp.name] = TableState(tp.sharding_type, sorted(s.rank for s in tp.shards), round(cost, 6))
    search = plan.predicted.search if plan.predicted else None
    return PlanState(sha256, valid, round(breakdown.step_ms + sync_ms, 6), round(breakdown.bottleneck_ms + sync_ms, 6),
                     round(1 - max(hbm.values(), default=0) / workload.topology.hbm_cap, 6), tables,
                     model_id(model, workload), bool(search and search.robust))


def baseline_text(states: dict[str, PlanState], tolerance: float) -> str:
    from shardopt import __version__

    data = {"format": GATE_FORMAT, "version": GATE_VERSION, "shardopt": __version__, "tolerance": tolerance, "workloads": {name: asdict(s) for name, s in sorted(states.items())}}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def write_baseline(path: Path, states: dict[str, PlanState], tolerance: float) -> None:
    write_atomic(path, baseline_text(states, tolerance))


# The baseline file as read: every field required, strict and bounded (a hand-edited "abc" or -1
# is one line naming the field, exit 2, never a comparison against nonsense).
_Ms = Annotated[float, Strict(), Field(ge=0, le=1e12, allow_inf_nan=False)]
_Rank = Annotated[int, Strict(), Field(ge=0, lt=MAX_WORLD)]


@pydantic_dataclass(frozen=True, config=STRICT)
class _TableEntry:
    sharding_type: ShardingType
    ranks: Annotated[list[_Rank], Field(min_length=1)]
    cost_ms: _Ms


@pydantic_dataclass(frozen=True, config=STRICT)
class _WorkloadEntry:
    workload_sha256: Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{64}$")]
    valid: Annotated[bool, Strict()]
    step_ms: _Ms
    bottleneck_ms: _Ms
    headroom: Annotated[float, Strict(), Field(ge=-1e6, le=1, allow_inf_nan=False)]
    tables: dict[Annotated[str, Strict(), Field(min_length=1)], _TableEntry]
    cost_model: Annotated[str, Strict(), Field(min_length=1)]
    robust: Annotated[bool, Strict()]


@pydantic_dataclass(frozen=True, config=STRICT)
class _BaselineFile:
    format: Literal["shardopt-gate"]
    version: Literal[1]
    shardopt: Annotated[str, Strict(), Field(min_length=1, max_length=64)]
    tolerance: Annotated[float, Strict(), Field(ge=0, le=10, allow_inf_nan=False)]
    workloads: dict[Annotated[str, Strict(), Field(min_length=1)], _WorkloadEntry]


def read_baseline(path: Path) -> Optional[dict]:
    """The baseline, checked against its schema; ShardoptError naming the file and field when it
    is not one. Returns the file's fields, with ``workloads`` as name -> PlanState."""
    from shardopt.core.loaders import load_json
    from shardopt.core.validation import validate_as

    data = load_json(path, "baseline")
    if not isinstance(data, dict) or data.get("format") != GATE_FORMAT:
        raise ShardoptError(f"{path}: format: must be {GATE_FORMAT!r} (write one with shardopt gate --update)")
    if data.get("version") != GATE_VERSION or isinstance(data.get("version"), bool):
        raise ShardoptError(f"{path}: version: this shardopt reads gate baselines of version {GATE_VERSION},"
                            f" got {data.get('version')!r}")
    checked = validate_as(_BaselineFile, data, str(path))
    workloads = {}
    for name, e in checked.workloads.items():
        tables = {t: TableState(v.sharding_type, list(v.ranks), v.cost_ms) for t, v in e.tables.items()}
        workloads[name] = PlanState(e.workload_sha256, e.valid, e.step_ms, e.bottleneck_ms, e.headroom, tables,
                                    e.cost_model, e.robust)
    return {"format": checked.format, "version": checked.version, "shardopt": checked.shardopt,
            "tolerance": checked.tolerance, "workloads": workloads}


def baseline_rank_problem(path: Path, name: str, state: PlanState, world: int) -> Optional[str]:
    """A recorded rank outside the workload's world: the baseline is not of this workload."""
    for table, t in sorted(state.tables.items()):
        bad = [r for r in t.ranks if r >= world]
        if bad:
            return f"{path}: workloads.{name}.tables.{table}.ranks: rank {bad[0]} is outside {name}'s world of {world}"
    return None
