"""The ``trace`` commands: a training job's torch.profiler traces as a model and a report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from shardopt.cli.app import main
from shardopt.core.errors import ShardoptError
from shardopt.measure.traced import traced_run

WARMUP_HELP = "Traced steps to drop first (warm-up) on every rank."


@main.group()
def trace() -> None:
    """Read a training job's torch.profiler traces: fit a model to them, report on them."""


@trace.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--workload", "workload_path", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The plan the traced job ran.")
@click.option("--also", "also", type=(click.Path(dir_okay=False, path_type=Path), click.Path(path_type=Path)),
              multiple=True, metavar="PLAN TRACES", help="Another traced plan of the same workload and its"
              " traces (a folder or one file); repeat for more.")
@click.option("--base", default="packaged", show_default=True, metavar="packaged|FILE",
              help="The model to rescale: the packaged one for the workload's hardware, or a model file.")
@click.option("--warmup", type=click.IntRange(0, 10_000), default=2, show_default=True, help=WARMUP_HELP)
@click.option("--cpu-id", default=None, help="The CPU the job ran on (a CPU trace does not say) [this machine's].")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Model file to write (JSON); plan with --cost-model learned@FILE.")
def ingest(traces, workload_path: Path, plan_path: Path, also, base: str, warmup: int, cpu_id: str | None,
           output: Path) -> None:
    """Fit a model to a traced training job: the base model rescaled per pass to the job's ranks."""
    from shardopt.core.files import check_output
    from shardopt.costmodel.registry import embedded_model_path, workload_hardware
    from shardopt.costmodel.store import load_model, save_model
    from shardopt.costmodel.trace_fit import fit_traces

    inputs = [workload_path, plan_path, *traces, *(p for pair in also for p in pair)]
    check_output(output, inputs=inputs + ([Path(base)] if base != "packaged" else []), suffixes=(".json",))
    started = time.perf_counter()
    workload, plan, run = traced_run(workload_path, plan_path, traces, warmup)
    runs = [run]
    for other_plan, other_traces in also:
        _, other, extra = traced_run(workload_path, other_plan, [other_traces], warmup)
        runs.append(extra)
    hardware = workload_hardware(workload)
    if base == "packaged":
        path = embedded_model_path(hardware)
        if path is None:
            raise ShardoptError(f"--base packaged: no packaged model for hardware {hardware!r}; give --base FILE"
                                " (a model from shardopt calibrate or train)")
    else:
        path = Path(base)
        if not path.is_file():
            raise ShardoptError(f"--base {base}: no model file there (or: packaged)")
    parts, meta = load_model(path)
    if meta["hardware"] != hardware:
        raise ShardoptError(f"--base {base}: a model of {meta['hardware']}, but {workload_path} runs on {hardware}")
    trained_on = {"device": workload.topology.compute_device, "source": "trace",
                  "traces": [r.source for r in runs]}
    if workload.topology.compute_device == "cpu":
        from shardopt.profile.dataset import cpu_fingerprint

        trained_on["cpu_id"] = cpu_id or cpu_fingerprint()
    try:
        fitted, report = fit_traces(parts, runs, trained_on, [c for r in runs for c in r.collectives])
    except ValueError as exc:
        raise ShardoptError(f"{plan_path}: {exc}") from None
    report.update({"base": str(path), "warmup_steps": warmup, "held_out_kernels": report["ranks"]})
    save_model(output, fitted, report)
    factor = report["pass_factor"]
    links = report["links"]
    linked = "" if links is None else (
        f"; {links['class']} all-to-all over {links['collectives']} traced collectives: latency"
        f" {links['latency_us']:.0f} us, {links['bandwidth_gbps'] or float('inf'):.2f} GB/s")
    carries = "" if report["shape_carries"] else (
        "; the plans' own factors differ by more than 10%: the base model's shape does not carry to this"
        " cluster (see the report in the file)")
    click.echo(
        f"wrote {output}: fitted to {report['ranks']} traced ranks of {len(runs)} plan(s) in"
        f" {time.perf_counter() - started:.1f} s; forward x{factor['fwd']:.3f}, backward x{factor['bwd']:.3f}"
        f" of {path.name}; per-rank lookup error on the traces {max(report['in_sample_mape']):.1%}{linked}{carries}."
        f" Plan with --cost-model learned@{output}"
    )


@trace.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--workload", "workload_path", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The plan the traced job ran.")
@click.option("--cost-model", "cost_model", default="analytic", show_default=True,
              help="The model to set beside the traces (a name, or learned@FILE / analytic@FILE).")
@click.option("--warmup", type=click.IntRange(0, 10_000), default=2, show_default=True, help=WARMUP_HELP)
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also draw traced beside model per rank (PNG).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def report(traces, workload_path: Path, plan_path: Path, cost_model: str, warmup: int, png: Path | None,
           as_json: bool) -> None:
    """A traced job beside the model: per rank and phase, critical path, slowest ranks, error."""
    from shardopt.core.files import check_output, write_atomic
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.trace_report import compare_trace, trace_bars, trace_json, trace_table

    if png is not None:
        check_output(png, option="--png", inputs=[workload_path, plan_path, *traces], suffixes=(".png",))
    workload, plan, run = traced_run(workload_path, plan_path, traces, warmup)
    model, _ = resolve_cost_model(cost_model, workload)
    comparison = compare_trace(workload, plan, run.ranks, model)
    click.echo(json.dumps(trace_json(comparison), indent=1) if as_json else trace_table(comparison))
    if png is not None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="shardopt-trace-") as tmp:
            drawn = Path(tmp) / "bars.png"
            trace_bars(comparison, drawn)
            write_atomic(png, drawn.read_bytes())
        if not as_json:
            click.echo(f"wrote {png}")
