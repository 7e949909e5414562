"""Commands that make and judge plans: plan, validate, evaluate, report, compare."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from shardopt.cli.app import main, stage_status, warn
from shardopt.cli.options import COMM_PROFILE_HELP, model_path, plan_config_options
from shardopt.contracts import PlanConfig
from shardopt.core.errors import ShardoptError


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Plan file to write (JSON). Default: plans/<workload name>.json",
)
@plan_config_options()
@click.option("--quiet", "-q", is_flag=True, help="Print only the output path.")
@click.option("--explain", is_flag=True,
              help="When no plan fits: print every requirement of the smallest conflicting set, a line each.")
def plan(workload: Path, output: Path | None, config: PlanConfig, quiet: bool, explain: bool) -> None:
    """Plan WORKLOAD (YAML) and write the plan file."""
    from shardopt.core.files import check_output
    from shardopt.core.plan import write_plan
    from shardopt.core.workload import read_workload
    from shardopt.costmodel.registry import workload_hardware
    from shardopt.planner import plan_with, resolve_model
    from shardopt.planner.summary import plan_summary

    started = time.perf_counter()
    wl, sha = read_workload(workload)
    default_output = output is None
    output = output or Path("plans") / f"{wl.name}.json"
    make_folder = output.parent == Path("plans")  # the default folder is made on first use
    check_output(output, option="--output" if not default_output else "default output",
                 inputs=[workload, model_path(config.cost_model)], suffixes=(".json",),
                 parent_may_be_created=make_folder)
    model, warnings = resolve_model(config, wl)
    for warning in warnings:
        warn(warning)
    try:
        with stage_status():
            result = plan_with(wl, config, cost_model=model, sha256=sha, source=str(workload))
    except ShardoptError as exc:
        if explain and exc.details:
            for line in exc.details:
                click.echo(f"conflict: {line}", err=True)
        raise
    elapsed = time.perf_counter() - started
    if make_folder:
        output.parent.mkdir(exist_ok=True)
    write_plan(result, output)
    if quiet:
        click.echo(str(output))
        return
    click.echo(plan_summary(wl, result, workload_hardware(wl)))
    click.echo(f"planned in {elapsed:.2f} s; wrote {output}")


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
def validate(workload: Path, plan_file: Path) -> None:
    """Check PLAN against WORKLOAD: exit 0 valid, 1 invalid, 2 unusable input."""
    from shardopt.core.plan import read_plan
    from shardopt.arithmetic.checks import check_plan
    from shardopt.core.workload import read_workload

    wl, sha = read_workload(workload)
    plan_obj = read_plan(plan_file)
    report = check_plan(wl, plan_obj, sha)
    for warning in report.warnings:
        warn(f"{plan_file}: {warning}")
    if report.valid:
        click.echo(f"{plan_file}: valid plan for {workload} ({len(plan_obj.tables)} tables)")
        return
    for violation in report.violations:
        click.echo(f"{plan_file}: {violation}")
    click.echo(f"{plan_file}: invalid, {len(report.violations)} violation(s)", err=True)
    sys.exit(1)


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--cost-model", "cost_model", default="analytic", show_default=True,
              help="analytic | analytic-v0 | learned | PATH of a model file.")
@click.option("--comm-profile", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=COMM_PROFILE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the breakdown as JSON.")
def evaluate(workload: Path, plan_file: Path, cost_model: str, comm_profile: Path | None, as_json: bool) -> None:
    """Print a cost model's per-rank breakdown of PLAN (ours or anyone's)."""
    import dataclasses
    import json

    from shardopt.arithmetic.checks import read_checked
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.planner.summary import breakdown_table

    from shardopt.costmodel.comm_source import load_comm_profile

    wl, _, plan_obj = read_checked(workload, plan_file)
    profile = load_comm_profile(str(comm_profile)) if comm_profile is not None else None
    model, warnings = resolve_cost_model(cost_model, wl, profile)
    for warning in warnings:
        warn(warning)
    per_rank = model.breakdown(wl, plan_obj.tables)
    comm = model.comm_choice(wl).label
    if as_json:
        from shardopt.contracts import Breakdown

        data = {"cost_model": model.name, "comm_source": comm, "max_ms": Breakdown.of(per_rank).bottleneck_ms,
                "step_ms": Breakdown.of(per_rank).step_ms, "per_rank": [dataclasses.asdict(r) for r in per_rank]}
        click.echo(json.dumps(data, indent=1))
        return
    click.echo(f"{plan_file}: predicted by {model.name}; comm priced from {comm}")
    click.echo(breakdown_table(wl, per_rank))


@main.command()
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--workload", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Score the plan with the default model for this workload (needed when the plan"
              " has no prediction).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Figure to write: .png, .svg or .pdf.")
def report(plan_file: Path, workload: Path | None, output: Path) -> None:
    """Draw PLAN's per-rank stacked cost bars (compute and communication, forward and backward)."""
    from shardopt.bench.report import plan_bars_png
    from shardopt.core.files import FIGURE_FORMATS, check_output
    from shardopt.core.plan import read_plan

    check_output(output, inputs=[plan_file, workload], suffixes=FIGURE_FORMATS)
    plan_obj = read_plan(plan_file)
    if workload is not None:
        from shardopt.arithmetic.checks import read_checked
        from shardopt.costmodel.registry import resolve_cost_model

        wl, _, plan_obj = read_checked(workload, plan_file)
        model, _ = resolve_cost_model("analytic", wl)
        per_rank, label = model.breakdown(wl, plan_obj.tables), model.name
    elif plan_obj.predicted is not None:
        per_rank, label = plan_obj.predicted.per_rank, plan_obj.predicted.cost_model
    else:
        raise ShardoptError(f"{plan_file}: predicted: the plan holds no prediction; pass --workload")
    plan_bars_png(per_rank, f"{plan_obj.workload.name}: per-rank cost ({label})", output)
    click.echo(f"wrote {output}")


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@plan_config_options()
@click.option("--replay", "do_replay", is_flag=True, help="Also measure both plans on this machine.")
@click.option("--rounds", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Replay rounds (with --replay): both plans' ranks timed in a shuffled order each"
              " round; steps and bottlenecks are read off per-rank medians.")
@click.option("--torchrec-timeout", "torchrec_timeout", type=click.IntRange(1, 86400), default=120,
              show_default=True, help="Seconds TorchRec's planner may search (its timeout_seconds; it then"
              " keeps its best plan). It is stopped outright at twice that plus 30 s, and shardopt's side"
              " is printed alone.")
def compare(workload: Path, config: PlanConfig, do_replay: bool, rounds: int, torchrec_timeout: int) -> None:
    """Plan WORKLOAD with shardopt and with TorchRec's planner; print both side by side (progress on
    stderr)."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.compare import compare_with_torchrec, comparison_text
    from shardopt.core.workload import read_workload
    from shardopt.measure.replay import comm_for
    from shardopt.planner import resolve_model

    wl, sha = read_workload(workload)
    if wl.parallelism is not None:
        raise ShardoptError(f"{workload}: parallelism: compare weighs 1D plans; for a 2D workload, compare one"
                            " group: drop the parallelism block and set world_size to the group's size")
    sequence = next((i for i, t in enumerate(wl.tables) if not t.pooled), None)
    if sequence is not None:  # said before either side plans, not as TorchRec's failure to plan
        raise ShardoptError(f"{workload}: tables[{sequence}].pooled: false ({wl.tables[sequence].name!r}): compare"
                            " builds TorchRec's EmbeddingBagCollection, which pools; plan a model with sequence"
                            " tables with ShardoptPlanner")
    model, notes = resolve_model(config, wl)
    comm = comm_for(wl, model) if do_replay else None
    for note in notes:
        warn(note)
    result = compare_with_torchrec(wl, model, config, sha256=sha, rounds=rounds if do_replay else 0, comm=comm,
                                   torchrec_timeout_s=torchrec_timeout, progress=lambda line: click.echo(line, err=True))
    click.echo(comparison_text(result))
