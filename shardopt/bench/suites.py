"""The named suites of benchmark tasks: which tasks the tests, the gate and the reports run."""

from __future__ import annotations

from shardopt.bench.regimes import regime_tasks
from shardopt.bench.tasks import Task, sampled_tasks

SUITES = {"unit": 3, "ci": 8, "full": 30, "regimes": 4, "regimes-tuning": 4}


def suite_tasks(suite: str, seed: int = 0) -> list[Task]:
    """The tasks of a suite: "unit" (tests), "ci" (the gate), "full" (the report, plus the
    CPU configs that ship with shardopt), "regimes" (the held-out tasks of the three regimes with
    declared links, :mod:`shardopt.bench.regimes`) and "regimes-tuning" (their tuning half)."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
    if suite.startswith("regimes"):
        return regime_tasks(SUITES[suite], "tuning" if suite.endswith("tuning") else "held-out")
    tasks = sampled_tasks(SUITES[suite], seed)
    if suite == "full":
        from pathlib import Path

        from shardopt.core.workload import read_workload

        configs = Path(__file__).resolve().parents[2] / "configs"  # in the repository, not the package
        for name in ("dlrm-medium", "tiny"):
            path = configs / f"{name}.yaml"
            if path.is_file():
                tasks.append(Task(name, read_workload(path)[0], f"configs/{name}.yaml"))
    return tasks
