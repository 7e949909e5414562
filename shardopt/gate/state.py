"""What the gate records of one workload's plan, and the baseline file that holds it.

The baseline names the shardopt version, the cost model (name and file digest) and each workload's
hash, so a changed model or workload is reported as that, not as a wall of regressions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from shardopt.contracts import Breakdown, ShardSpec
from shardopt.core.errors import ShardoptError
from shardopt.core.files import write_atomic
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
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


def read_baseline(path: Path) -> Optional[dict]:
    """The baseline, checked; ShardoptError naming the file and field when it is not one."""
    from shardopt.core.loaders import load_json

    data = load_json(path, "baseline")
    if not isinstance(data, dict) or data.get("format") != GATE_FORMAT:
        raise ShardoptError(f"{path}: format: must be {GATE_FORMAT!r} (write one with shardopt gate --update)")
    if data.get("version") != GATE_VERSION:
        raise ShardoptError(f"{path}: version: this shardopt reads gate baselines of version {GATE_VERSION}")
    workloads = data.get("workloads")
    if not isinstance(workloads, dict):
        raise ShardoptError(f"{path}: workloads: must be a mapping of workload name to its recorded plan")
    for name, entry in workloads.items():
        try:
            tables = {t: TableState(**v) for t, v in entry.pop("tables", {}).items()}
            workloads[name] = PlanState(**entry, tables=tables)
        except (TypeError, AttributeError) as exc:
            raise ShardoptError(f"{path}: workloads.{name}: {' '.join(str(exc).split())}") from None
    return data
