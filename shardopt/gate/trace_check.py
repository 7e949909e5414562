"""``gate --trace``: the pinned model against a committed trace of a training job (drift)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from shardopt.contracts import PlanConfig
from shardopt.core.errors import ShardoptError
from shardopt.gate.check import Finding

TRACE_WARMUP = 2  # the traced steps dropped first, as `shardopt trace` drops them by default


def trace_findings(workloads: Sequence[Path], folders: Sequence[Path], config: PlanConfig,
                   tolerance: float) -> list[Finding]:
    """One finding per trace folder (its ``plan.json`` and its rank traces): ok while the model
    the gate pins misses the traced per-rank lookups by at most ``tolerance`` (MAPE)."""
    from shardopt.core.plan import read_plan
    from shardopt.core.workload import read_workload
    from shardopt.costmodel.registry import embedded_model_path, workload_hardware
    from shardopt.measure.trace_report import compare_trace
    from shardopt.measure.traced import PLAN_IN_FOLDER, traced_run
    from shardopt.planner.factory import resolve_model

    names = {read_workload(p)[0].name: p for p in workloads}
    out = []
    for folder in folders:
        plan_path = folder / PLAN_IN_FOLDER
        if not folder.is_dir():
            raise ShardoptError(f"{folder}: --trace: no such folder (a folder of rank traces and {PLAN_IN_FOLDER})")
        if not plan_path.is_file():
            raise ShardoptError(f"{folder}: --trace: no {PLAN_IN_FOLDER} in it (the plan the traced job ran)")
        name = read_plan(plan_path).workload.name
        if name not in names:
            raise ShardoptError(f"{plan_path}: workload.name: {name!r} is none of the workloads given"
                                f" ({', '.join(sorted(names))})")
        workload, plan, run = traced_run(names[name], plan_path, [folder], TRACE_WARMUP)
        model, _ = resolve_model(config, workload)
        c = compare_trace(workload, plan, run.ranks, model)
        ok = c.compute_mape <= tolerance
        base = "" if embedded_model_path(workload_hardware(workload)) is not None else " --base MODEL"
        hint = "" if ok else (f"; refit: shardopt trace ingest {folder} --workload {names[name]}"
                              f" --plan {plan_path}{base} -o model.json")
        out.append(Finding(name, "trace", ok, f"{folder}: {model.name} misses the traced per-rank lookups by"
                                              f" {c.compute_mape:.1%} (tolerance {tolerance:.0%}){hint}"))
    return out
