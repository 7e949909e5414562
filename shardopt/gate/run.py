"""The gate from end to end: measure every workload, compare, refresh, report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from shardopt.contracts import PlanConfig
from shardopt.core.errors import ShardoptError
from shardopt.gate.check import Finding, Measured, compare, measure, stale
from shardopt.gate.state import read_baseline, write_baseline


def _check_outputs(workloads, baseline: Optional[Path], update: bool, plans_dir, junit, summary, traces=()) -> None:
    from shardopt.core.files import check_output

    if baseline is None:
        if not traces:
            raise ShardoptError("--baseline: required (or --trace DIR alone, a drift check of the model)")
        if update or plans_dir is not None:
            raise ShardoptError(f"{'--update' if update else '--plans'}: needs --baseline")
    inputs = list(workloads) + list(traces) + ([] if update or baseline is None else [baseline])
    if update:
        check_output(baseline, option="--baseline", inputs=list(workloads), suffixes=(".json",))
    elif baseline is not None and not baseline.is_file():
        raise ShardoptError(f"{baseline}: --baseline: no such file (write one with --update)")
    for path, option, suffix in ((junit, "--junit", ".xml"), (summary, "--summary", ".md")):
        if path is not None:
            check_output(path, option=option, inputs=inputs, suffixes=(suffix,))
    if plans_dir is not None and not plans_dir.is_dir():
        raise ShardoptError(f"{plans_dir}: --plans: no such folder")


def run_gate(
    workloads: list[Path], baseline: Optional[Path], tolerance: float, config: PlanConfig, *, update: bool = False,
    plans_dir: Optional[Path] = None, fix: bool = False, junit: Optional[Path] = None,
    summary: Optional[Path] = None, replay: bool = False, traces: tuple[Path, ...] = (),
    trace_tolerance: float = 0.15,
) -> tuple[bool, list[str]]:
    """(passed, lines to print). Inputs are checked before any planning; outputs are atomic.
    Without ``baseline``, only the ``traces`` are checked (a drift check after a training job)."""
    from shardopt.core.files import write_atomic
    from shardopt.gate.report import findings_table, junit_xml, markdown_summary, write_bars
    from shardopt.gate.trace_check import trace_findings

    _check_outputs(workloads, baseline, update, plans_dir, junit, summary, traces)
    findings = trace_findings(workloads, traces, config, trace_tolerance) if traces else []
    measured, lines = [], []
    if baseline is not None:
        measured, against, lines = _against_baseline(workloads, baseline, tolerance, config, update, plans_dir, fix)
        findings += against
    if replay:
        findings += [_replayed(m) for m in measured if m.per_rank]
    if findings:
        lines.insert(0, findings_table(findings))
    if junit is not None:
        write_atomic(junit, junit_xml(findings))
    if summary is not None:
        bars = write_bars(measured, summary.parent)
        write_atomic(summary, markdown_summary(findings, bars))
    return all(f.ok for f in findings), lines


def _against_baseline(workloads, baseline: Path, tolerance: float, config: PlanConfig, update: bool,
                      plans_dir: Optional[Path], fix: bool) -> tuple[list[Measured], list[Finding], list[str]]:
    """Every workload planned (or its committed plan scored) and compared with the baseline, or
    the baseline rewritten with them (``update``): (measured, findings, lines to print)."""
    base = None if update else read_baseline(baseline)
    measured, findings = [], []
    for path in workloads:
        here = pinned(config, base, path)
        fresh = measure(path, here)
        if fresh.name in {m.name for m in measured}:
            raise ShardoptError(f"{path}: name: workload {fresh.name!r} is given twice")
        now = fresh
        if plans_dir is not None:
            now, finding = _committed(fresh, plans_dir, here, tolerance, fix)
            findings.append(finding)
        measured.append(now)
    lines = []
    if update:
        states = {m.name: m.state for m in measured}
        lines.append(_what_changed(baseline, states))
        write_baseline(baseline, states, tolerance)
        models = sorted({s.cost_model for s in states.values()})
        lines.append(f"wrote the baseline {baseline} ({len(states)} workloads, cost models {', '.join(models)})")
    else:
        findings += _against(base, baseline, measured, tolerance)
    return measured, findings, lines


def _against(base: dict, baseline: Path, measured: list[Measured], tolerance: float) -> list[Finding]:
    """Each workload against its recorded state; a baseline of another shardopt version fails
    (its predictions need not compare), one whose ranks lie outside the workload is refused."""
    from shardopt import __version__
    from shardopt.gate.state import baseline_rank_problem

    findings = []
    for m in measured:
        state = base["workloads"].get(m.name)
        if state is not None and (problem := baseline_rank_problem(baseline, m.name, state,
                                                                    m.workload.topology.world_size)):
            raise ShardoptError(problem)
        if state is not None and base["shardopt"] != __version__:
            findings.append(Finding(m.name, "version", False, f"the baseline was written by shardopt"
                                    f" {base['shardopt']}, this is {__version__}: its predictions need not compare;"
                                    " re-baseline with --update"))
            continue
        findings += compare(m.name, state, m.state, tolerance)
    return findings


def pinned(config: PlanConfig, base: Optional[dict], path: Path) -> PlanConfig:
    """``config`` with --robust auto resolved as the baseline recorded it for this workload: the
    gate keeps its pinned model, and auto's choice follows the machine it runs on."""
    import dataclasses

    from shardopt.core.workload import read_workload

    if base is None or config.robust != "auto":
        return config
    state = base["workloads"].get(read_workload(path)[0].name)
    return config if state is None else dataclasses.replace(config, robust="on" if state.robust else "off")


def _committed(fresh: Measured, plans_dir: Path, config: PlanConfig, tolerance: float, fix: bool):
    """The committed plan scored (the one that will run), and whether it went stale."""
    from shardopt.core.plan import write_plan

    path = plans_dir / f"{fresh.name}.json"
    if not path.is_file():
        finding = Finding(fresh.name, "plan", False, f"{path}: no committed plan (--fix writes one)")
    else:
        committed = measure(fresh.path, config, plan_path=path)
        finding = stale(committed, fresh, tolerance, path)
        if finding.ok:
            return committed, finding
    if not fix:
        return fresh, finding
    write_plan(fresh.plan, path)
    return fresh, Finding(fresh.name, "plan", True, f"{path}: wrote a fresh plan ({finding.message.split(': ', 1)[-1]})")


def _replayed(m: Measured) -> Finding:
    """The plan measured on this machine's kernels: for nightly jobs, reported, never gated (a
    measurement on one machine does not compare with a baseline measured on another)."""
    from shardopt.contracts import Breakdown
    from shardopt.measure.replay import replay_plan

    if m.workload.topology.compute_device != "cpu":
        return Finding(m.name, "replayed", True, "not replayed: a cuda workload (replay runs CPU workloads here)")
    from shardopt.arithmetic.checks import planned_workload

    try:
        result = replay_plan(planned_workload(m.workload, m.plan), m.plan)
    except (ShardoptError, RuntimeError) as exc:
        return Finding(m.name, "replayed", True, f"not replayed: {' '.join(str(exc).split())}")
    measured = Breakdown.of(result.per_rank).step_ms
    predicted = Breakdown.of(m.per_rank).step_ms
    return Finding(m.name, "replayed", True, f"replayed step {measured:.3f} ms on this machine's kernels"
                   f" (predicted {predicted:.3f} ms; reported, not gated)", predicted, measured)


def _what_changed(baseline: Path, states: dict) -> str:
    """A line per workload whose step moved against the old baseline, if there was one."""
    if not baseline.is_file():
        return "no earlier baseline"
    try:
        old = read_baseline(baseline)
    except ShardoptError:
        return "the earlier baseline was unreadable; replaced"
    out = []
    for name, state in sorted(states.items()):
        before = old["workloads"].get(name)
        if before is None:
            out.append(f"{name}: added")
        elif abs(state.step_ms - before.step_ms) > 1e-9 or state.workload_sha256 != before.workload_sha256:
            out.append(f"{name}: step {before.step_ms:.3f} -> {state.step_ms:.3f} ms")
    out += [f"{name}: removed" for name in sorted(set(old["workloads"]) - set(states))]
    return "; ".join(out) or "no change against the earlier baseline"
