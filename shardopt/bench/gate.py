"""The CI gate: shardopt's predicted step time (critical path) per task against a committed baseline.

Deterministic by construction: fixed task seeds, the pinned packaged cost model, and a search whose
limits are counted in solver work and re-scores rather than seconds. A task fails when its plan is
invalid, when planning fails, or when the step grows by more than the tolerance. A baseline written
before the gate measured steps holds bottlenecks (``metric`` absent): it is reported as that.
"""

from __future__ import annotations

import json
from pathlib import Path

from shardopt.bench.suite import Entry
from shardopt.core.errors import ShardoptError
from shardopt.core.files import write_atomic

BASELINE_FORMAT = "shardopt-bench-baseline"
TOLERANCE = 0.02
METRIC = "critical-path"  # what a baseline's numbers are; "bottleneck" in baselines without one
_FIELD = {"critical-path": "predicted_step_ms", "bottleneck": "predicted_ms"}


def pinned_model() -> str:
    """The packaged CPU cost model the gate's predictions come from: its name and file digest.

    Predictions from another model are not comparable task by task, so a baseline names its model
    and a changed model is reported as that, not as a wall of regressions.
    """
    import hashlib

    from shardopt.costmodel.registry import embedded_model_path

    path = embedded_model_path("cpu")
    if path is None:
        return "analytic-v0"
    return f"{path.name}@{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


def baseline_data(entries: list[Entry], suite: str, planner: str = "shardopt") -> dict:
    from shardopt import __version__

    return {
        "format": BASELINE_FORMAT, "version": 1, "suite": suite, "planner": planner,
        "shardopt": __version__, "cost_model": pinned_model(), "tolerance": TOLERANCE, "metric": METRIC,
        "tasks": {e.task: round(getattr(e, _FIELD[METRIC]), 6) for e in entries
                  if e.planner == planner and e.valid and getattr(e, _FIELD[METRIC]) is not None},
    }


def write_baseline(path: Path, entries: list[Entry], suite: str) -> None:
    write_atomic(path, json.dumps(baseline_data(entries, suite), indent=1) + "\n")


def read_baseline(path: Path) -> dict:
    from shardopt.core.loaders import load_json

    data = load_json(path, "baseline")
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        raise ShardoptError(f"{path}: format: must be {BASELINE_FORMAT!r}")
    tasks = data.get("tasks")
    if not isinstance(tasks, dict):
        raise ShardoptError(f"{path}: tasks: must be a mapping of task to milliseconds")
    for task, ms in tasks.items():
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms <= 0:
            raise ShardoptError(f"{path}: tasks.{task}: must be a positive number of milliseconds, got {ms!r}")
    tolerance = data.get("tolerance", TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 10:
        raise ShardoptError(f"{path}: tolerance: must be a number in [0, 10), got {tolerance!r}")
    for field in ("cost_model", "metric"):
        if field in data and not isinstance(data[field], str):
            raise ShardoptError(f"{path}: {field}: must be a string, got {data[field]!r}")
    if data.get("metric", "bottleneck") not in _FIELD:
        raise ShardoptError(f"{path}: metric: must be one of {', '.join(_FIELD)}, got {data['metric']!r}")
    return data


def check(entries: list[Entry], baseline: dict, planner: str = "shardopt") -> tuple[bool, str]:
    """(passed, a readable table of every task: baseline, now, change, verdict)."""
    tolerance = float(baseline.get("tolerance", TOLERANCE))
    model = pinned_model()
    if baseline.get("cost_model", model) != model:
        return False, (
            f"cost_model: the baseline was predicted with {baseline['cost_model']}, this run with"
            f" {model}; predictions of two models are not comparable. Replay the benchmark"
            " (shardopt bench --suite full --rounds 15 -o benchmarks/results/bench) and, if plan"
            " quality holds, rewrite the baseline with --update."
        )
    metric = baseline.get("metric", "bottleneck")
    if metric != METRIC:
        return False, (
            f"metric: the baseline holds each task's predicted {metric}, the gate now checks the"
            f" {METRIC}; rewrite the baseline with --update once plan quality is confirmed by replay."
        )
    field = _FIELD[metric]
    now = {e.task: e for e in entries if e.planner == planner}
    lines = [f"{'task':<12} {'baseline ms':>12} {'now ms':>12} {'change':>8}  verdict"]
    ok = True
    for task in sorted(set(baseline["tasks"]) | set(now)):
        old = baseline["tasks"].get(task)
        entry = now.get(task)
        if entry is None:
            verdict, new, change = "MISSING (not run)", None, None
        elif not entry.valid or getattr(entry, field) is None:
            verdict, new, change = f"FAIL: no valid plan ({entry.note or 'invalid'})", None, None
        else:
            new = getattr(entry, field)
            change = None if old is None else new / old - 1
            if old is None:
                verdict = "new task (not in the baseline)"
            elif change > tolerance:
                verdict = f"FAIL: worse by more than {tolerance:.0%}"
            elif change < -tolerance:
                verdict = "better (update the baseline to keep it)"
            else:
                verdict = "ok"
        if verdict.startswith(("FAIL", "MISSING")):
            ok = False
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        lines.append(f"{task:<12} {fmt(old):>12} {fmt(new):>12} "
                     f"{'-' if change is None else f'{change:+.1%}':>8}  {verdict}")
    return ok, "\n".join(lines)
