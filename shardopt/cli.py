"""The ``shardopt`` command: parse, call one stage, print. Errors exit through one place."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import click

from shardopt import __version__
from shardopt.errors import ShardoptError


def _user_errors(fn):
    """Turn a ShardoptError into its one-line message on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ShardoptError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="shardopt")
def main() -> None:
    """Shard embedding tables of DLRM models over GPUs or CPU ranks, and check the plans."""


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Plan file to write (JSON). Default: plans/<workload name>.json",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the output path.")
@_user_errors
def plan(workload: Path, output: Path | None, quiet: bool) -> None:
    """Plan WORKLOAD (YAML) and write the plan file."""
    from shardopt.costmodel.analytic import AnalyticCostModel
    from shardopt.plan import write_plan
    from shardopt.planner import plan_workload
    from shardopt.summary import plan_summary
    from shardopt.workload import read_workload

    started = time.perf_counter()
    wl, sha = read_workload(workload)
    model = AnalyticCostModel()
    hardware = model.hardware(wl)  # fails here, before any planning, on an unknown profile
    result = plan_workload(wl, sha256=sha, cost_model=model, source=str(workload))
    elapsed = time.perf_counter() - started
    output = output or Path("plans") / f"{wl.name}.json"
    if not output.parent.is_dir():
        if output.parent != Path("plans"):
            raise ShardoptError(f"{output}: output folder {output.parent} does not exist")
        output.parent.mkdir(parents=True)
    write_plan(result, output)
    if quiet:
        click.echo(str(output))
        return
    click.echo(plan_summary(wl, result, hardware.name))
    click.echo(f"planned in {elapsed:.2f} s; wrote {output}")


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
@_user_errors
def validate(workload: Path, plan_file: Path) -> None:
    """Check PLAN against WORKLOAD: exit 0 valid, 1 invalid, 2 unusable input."""
    from shardopt.plan import read_plan
    from shardopt.plan_checks import check_plan
    from shardopt.workload import read_workload

    wl, sha = read_workload(workload)
    plan_obj = read_plan(plan_file)
    report = check_plan(wl, plan_obj, sha)
    for warning in report.warnings:
        click.echo(f"warning: {plan_file}: {warning}", err=True)
    if report.valid:
        click.echo(f"{plan_file}: valid plan for {workload} ({len(plan_obj.tables)} tables)")
        return
    for violation in report.violations:
        click.echo(f"{plan_file}: {violation}")
    click.echo(f"{plan_file}: invalid, {len(report.violations)} violation(s)", err=True)
    sys.exit(1)


@main.command()
@click.option("--name", required=True, help="Workload name.")
@click.option("--tables", "num_tables", type=click.IntRange(min=1), required=True)
@click.option("--world-size", type=click.IntRange(min=1), required=True)
@click.option("--local-world-size", type=click.IntRange(min=1), help="Ranks per host [world size].")
@click.option("--batch-size", type=click.IntRange(min=1), default=512, show_default=True)
@click.option("--device", "compute_device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--hardware", help="Hardware profile name (default: the device's).")
@click.option("--hbm-cap", default="1GB", show_default=True, help="Memory per rank, e.g. 80GB.")
@click.option("--rows-scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True)
@click.option("--dims", default="16,32,64,128,256", show_default=True, help="Embedding dims to draw from.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
@_user_errors
def synth(output: Path, dims: str, local_world_size: int | None, **options) -> None:
    """Write a synthetic DLRM-like workload drawn from the public dlrm_datasets statistics."""
    import yaml

    from shardopt.fileio import write_atomic
    from shardopt.synth import SynthSpec, synth_workload
    from shardopt.workload import workload_from_dict

    try:
        dim_list = tuple(int(d) for d in dims.split(","))
    except ValueError:
        raise click.BadParameter(f"must be integers separated by commas, got {dims!r}", param_hint="--dims")
    spec = SynthSpec(
        dims=dim_list, local_world_size=local_world_size or options["world_size"], **options
    )
    data = synth_workload(spec)
    workload_from_dict(data, "--options")  # the options must make a valid workload
    command = " ".join(["shardopt", "synth"] + [a for a in sys.argv[2:]])
    header = f"# Generated by: {command}\n# Statistics from the public dlrm_datasets (see shardopt/synth.py).\n"
    write_atomic(output, header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100))
    click.echo(f"wrote {output}: {spec.num_tables} tables, {spec.world_size} ranks")


if __name__ == "__main__":  # pragma: no cover
    main()
