"""The gate's checks: each workload's plan against its baseline, and committed plans for staleness."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from shardopt.contracts import PlanConfig
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
from shardopt.gate.state import PlanState, model_id, plan_state

CHECKS = ("valid", "step", "bottleneck", "headroom")
MOST_CHANGED = 3


@dataclass
class Finding:
    """One check of one workload: a JUnit test case, a row of the summary."""

    workload: str
    check: str
    ok: bool
    message: str
    before: Optional[float] = None
    after: Optional[float] = None


@dataclass
class Measured:
    """A workload planned (or its committed plan read) and scored."""

    name: str
    path: Path
    workload: Workload
    plan: Plan
    state: PlanState
    per_rank: list


def measure(path: Path, config: PlanConfig, plan_path: Optional[Path] = None, fresh: Optional[Plan] = None) -> Measured:
    """Plan the workload at ``path`` (or score the committed plan at ``plan_path``)."""
    from shardopt.arithmetic.checks import check_plan
    from shardopt.core.plan import read_plan
    from shardopt.core.workload import read_workload
    from shardopt.planner import plan_with, resolve_model

    workload, sha = read_workload(path)
    model, _ = resolve_model(config, workload)
    if plan_path is not None:
        plan = read_plan(plan_path)
        valid = check_plan(workload, plan, sha).valid
    else:
        plan = fresh or plan_with(workload, config, cost_model=model, sha256=sha, source=str(path))
        valid = True
    if valid:
        from shardopt.arithmetic.checks import planned_workload

        per_rank = model.breakdown(planned_workload(workload, plan), plan.tables)
    else:
        per_rank = []
    state = plan_state(workload, sha, plan, model, valid) if valid else PlanState(
        sha, False, 0.0, 0.0, 0.0, cost_model=model_id(model, workload))
    return Measured(workload.name, path, workload, plan, state, per_rank)


def compare(name: str, base: Optional[PlanState], now: PlanState, tolerance: float) -> list[Finding]:
    """The four checks of one workload; a workload without a baseline passes with a note."""
    if base is None:
        return [Finding(name, "baseline", True, "new workload: not in the baseline (add it with --update)")]
    if base.cost_model != now.cost_model:
        return [Finding(name, "cost-model", False,
                        f"the cost model changed since the baseline ({base.cost_model} -> {now.cost_model}):"
                        " its predictions do not compare with the old ones; re-baseline with --update (and"
                        " replay, shardopt bench --rounds, to see what the new model changes)")]
    out = [Finding(name, "valid", now.valid, "plan is valid" if now.valid else "plan is invalid for the workload")]
    if not now.valid:
        return out
    edited = "" if base.workload_sha256 == now.workload_sha256 else " (the workload changed since the baseline)"
    for check, before, after in (("step", base.step_ms, now.step_ms), ("bottleneck", base.bottleneck_ms, now.bottleneck_ms)):
        change = after / before - 1 if before else 0.0
        ok = change <= tolerance
        message = f"{check} {before:.3f} -> {after:.3f} ms ({change:+.1%})"
        if not ok:
            message += f", over the {tolerance:.0%} tolerance{edited}; changed most: {most_changed(base, now)}"
        out.append(Finding(name, check, ok, message, before, after))
    drop = base.headroom - now.headroom
    ok = now.headroom >= 0 and drop <= tolerance
    message = f"memory headroom {base.headroom:.1%} -> {now.headroom:.1%}"
    if not ok:
        message += f" (down {drop:.1%} points, over the {tolerance:.0%} tolerance){edited}"
    out.append(Finding(name, "headroom", ok, message, base.headroom, now.headroom))
    return out


def most_changed(base: PlanState, now: PlanState) -> str:
    """The tables whose placement or cost moved most, in words."""
    rows = []
    for table, after in now.tables.items():
        before = base.tables.get(table)
        if before is None:
            rows.append((after.cost_ms, f"{table} (new, {after.cost_ms:.3f} ms)"))
            continue
        moved = (before.sharding_type, before.ranks) != (after.sharding_type, after.ranks)
        delta = after.cost_ms - before.cost_ms
        where = f", {before.sharding_type} {before.ranks} -> {after.sharding_type} {after.ranks}" if moved else ""
        rows.append((abs(delta) + (1.0 if moved else 0.0) * before.cost_ms, f"{table} ({delta:+.3f} ms{where})"))
    rows.sort(key=lambda r: -r[0])
    return ", ".join(text for _, text in rows[:MOST_CHANGED]) or "no table"


def stale(committed: Measured, fresh: Measured, tolerance: float, plan_path: Path) -> Finding:
    """A committed plan (at ``plan_path``) still valid and within memory, and not beaten by a fresh plan."""
    name = committed.name
    if not committed.state.valid:
        return Finding(name, "plan", False, f"{plan_path}: stale: no longer a valid plan for the workload;"
                       " re-plan (--fix writes a fresh one)")
    gain = 1 - fresh.state.step_ms / committed.state.step_ms if committed.state.step_ms else 0.0
    if gain > tolerance:
        return Finding(name, "plan", False, f"{plan_path}: re-plan: fresh plan is {gain:.1%} faster"
                       f" ({committed.state.step_ms:.3f} -> {fresh.state.step_ms:.3f} ms per step)",
                       committed.state.step_ms, fresh.state.step_ms)
    return Finding(name, "plan", True, f"{plan_path}: current (a fresh plan is {gain:+.1%} faster)",
                   committed.state.step_ms, fresh.state.step_ms)
