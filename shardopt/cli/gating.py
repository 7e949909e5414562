"""The ``gate`` command: plan-quality CI for users' own workloads and committed plans."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from shardopt.cli.app import main
from shardopt.cli.options import plan_config_options
from shardopt.contracts import PlanConfig
from shardopt.core.errors import ShardoptError


def _tolerance(value: str, option: str = "--tolerance") -> float:
    text = value.strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ShardoptError(f"{option}: must be a share such as 2% or 0.02, got {value!r}") from None
    if not 0 <= number < 1:
        raise ShardoptError(f"{option}: must be at least 0% and under 100%, got {value!r}")
    return number


@main.command()
@click.argument("workloads", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The committed baseline (JSON); --update writes it. Required unless --trace is given.")
@click.option("--tolerance", default="2%", show_default=True, help="Largest regression that passes.")
@click.option("--update", is_flag=True, help="Rewrite the baseline with this run and say what changed.")
@click.option("--plans", "plans_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder of committed plans (<workload name>.json): gate them, and find stale ones.")
@click.option("--fix", is_flag=True, help="With --plans: write a fresh plan over each stale one.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JUnit XML: one test case per workload and check.")
@click.option("--summary", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Markdown summary (e.g. $GITHUB_STEP_SUMMARY), per-rank bars beside it.")
@click.option("--replay", is_flag=True, help="Also measure each plan on this machine's kernels (nightly"
              " jobs): reported beside the prediction, never gated.")
@click.option("--trace", "traces", type=click.Path(path_type=Path), multiple=True, metavar="DIR",
              help="A traced training job: a folder of its rank traces and plan.json (the plan it ran);"
                   " fails when the pinned model misses its per-rank lookups by more than --trace-tolerance."
                   " Repeat for more.")
@click.option("--trace-tolerance", default="15%", show_default=True,
              help="Largest per-rank lookup error (MAPE) of the pinned model on a --trace that passes.")
@plan_config_options()
def gate(workloads: tuple[Path, ...], baseline: Path | None, tolerance: str, update: bool, plans_dir: Path | None,
         fix: bool, junit: Path | None, summary: Path | None, replay: bool, traces: tuple[Path, ...],
         trace_tolerance: str, config: PlanConfig) -> None:
    """Gate plan quality of WORKLOADS against a baseline: exit 1 naming each regression."""
    from shardopt.gate.run import run_gate

    tol = _tolerance(tolerance)
    if fix and plans_dir is None:
        raise ShardoptError("--fix: needs --plans DIR, the committed plans to refresh")
    trace_tol = _tolerance(trace_tolerance, "--trace-tolerance")
    ok, lines = run_gate(list(workloads), baseline, tol, config, update=update, plans_dir=plans_dir, fix=fix,
                         junit=junit, summary=summary, replay=replay, traces=traces, trace_tolerance=trace_tol)
    click.echo("\n".join(lines))
    if not ok:
        against = baseline if baseline is not None else ", ".join(map(str, traces))
        click.echo(f"plan-quality gate FAILED against {against}", err=True)
        sys.exit(1)
