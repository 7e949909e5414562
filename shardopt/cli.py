"""The ``shardopt`` command: parse, call one stage, print. Errors exit through one place.

Every way out is one of the exit codes of :mod:`shardopt.core.errors`, with at most one line on
stderr: a ShardoptError, a click usage error, an interrupt (SIGINT, SIGTERM) and, should one slip
through, an internal error (exit 70, with the traceback only under SHARDOPT_DEBUG=1).
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
import time
from pathlib import Path

import click

from shardopt import __version__
from shardopt.core.errors import EXIT_INPUT, EXIT_INTERRUPTED, ShardoptError

EXIT_INTERNAL = 70  # a bug: please report it (BSD's EX_SOFTWARE)

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 invalid plan (validate) or regression (bench --check); 2 bad input or"
    " usage; 3 no plan fits; 130 interrupted."
)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class Interrupted(Exception):
    """A command stopped by SIGINT or SIGTERM; the message says what was kept."""


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt()  # as Ctrl-C, so that every ``finally`` (temp files, workers) runs


# click >= 8.2 raises this for a group called with no command (older clicks print help themselves).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class ShardoptGroup(click.Group):
    """click.Group whose every exit is one documented code and one line (click's own print four)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        previous = None
        try:
            previous = signal.signal(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main thread: leave signals alone
            pass
        try:
            code = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                standalone_mode=False, **extra)
        except Interrupted as exc:
            click.echo(f"interrupted: {exc}", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except _NO_ARGS_IS_HELP as exc:  # a bare `shardopt`: the help, as click shows it
            click.echo(exc.format_message(), err=True)
            sys.exit(EXIT_INPUT)
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx is not None else "shardopt"
            click.echo(f"error: {command}: {_one_line(exc.format_message())}"
                       f" (see {command} --help)", err=True)
            sys.exit(EXIT_INPUT)
        except ShardoptError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except (KeyboardInterrupt, click.exceptions.Abort):
            click.echo("interrupted: nothing was written", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            sys.stderr.close()  # the reader went away (| head): not an error of ours
            sys.exit(0)
        except click.ClickException as exc:
            click.echo(f"error: {_one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback for users
            if os.environ.get("SHARDOPT_DEBUG"):
                raise
            click.echo(f"error: internal error, please report it: {type(exc).__name__}:"
                       f" {_one_line(exc)[:300]} (SHARDOPT_DEBUG=1 shows the traceback)", err=True)
            sys.exit(EXIT_INTERNAL)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx):
        # click turns KeyboardInterrupt into Abort after printing a blank line; keep it one line.
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted("nothing was written") from None


def _command_line() -> str:
    """The command as typed, for headers of generated files."""
    return " ".join(["shardopt"] + sys.argv[1:])


class FiniteFloat(click.ParamType):
    """A float in [lo, hi] (or (lo, hi] when ``lo_open``); NaN and infinities are refused."""

    name = "float"

    def __init__(self, lo: float, hi: float, lo_open: bool = False) -> None:
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"must be a number, got {value!r}", param, ctx)
        low_ok = number > self.lo if self.lo_open else number >= self.lo
        if not (math.isfinite(number) and low_ok and number <= self.hi):
            side = "(" if self.lo_open else "["
            self.fail(f"must be a finite number in {side}{self.lo:g}, {self.hi:g}], got {value}", param, ctx)
        return number


TIME_LIMIT = FiniteFloat(0, 3600, lo_open=True)
SEED = click.IntRange(0, 2**32 - 1)


def _size_option(value: str | None, option: str) -> str | None:
    """A size option checked now, so its error names the option."""
    from shardopt.core.units import parse_size

    if value is not None:
        try:
            parse_size(value)
        except ValueError as exc:
            raise ShardoptError(f"{option}: {exc}") from None
    return value


@click.group(name="shardopt", cls=ShardoptGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_CODES_HELP)
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
@click.option("--cost-model", "cost_model", default="analytic", show_default=True,
              help="analytic (calibrated where the package has a profile) | analytic-v0 | learned"
              " | PATH of a model file.")
@click.option("--search", "search_name", type=click.Choice(["ilp", "greedy"]), default="ilp",
              show_default=True,
              help="ilp: CP-SAT over all candidates, warm-started by greedy; greedy: the warm start"
              " alone. Both re-score ranks with the cost model and repair the bottleneck.")
@click.option("--time-limit", type=TIME_LIMIT, default=5.0,
              show_default=True,
              help="Search effort, in seconds on a 2-core machine: it sizes the solver's deterministic"
              " work limit and the repair's count of re-scores, so the same input gives the same"
              " plan on a busy machine; the wall clock stops a search only past 3x this.")
@click.option("--candidates", "candidate_set", type=click.Choice(["torchrec", "all"]),
              default="torchrec", show_default=True,
              help="torchrec: only cuts TorchRec runs as is; all: also row-wise over a subset of ranks"
              " and FlexShard hot-row replicas, which need a runtime that supports them.")
@click.option("--objective", type=click.Choice(["critical-path", "bottleneck"]), default="critical-path",
              show_default=True,
              help="critical-path: the sum over a step's phases (lookups, all-to-all, backward all-to-all,"
              " backward lookups) of the slowest rank in each, as a synchronous step takes; bottleneck:"
              " the slowest rank's total.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the output path.")
def plan(workload: Path, output: Path | None, cost_model: str, search_name: str,
         time_limit: float, candidate_set: str, objective: str, quiet: bool) -> None:
    """Plan WORKLOAD (YAML) and write the plan file."""
    from shardopt.costmodel.registry import resolve_cost_model, workload_hardware
    from shardopt.core.plan import write_plan
    from shardopt.planner import plan_workload
    from shardopt.planner.summary import plan_summary
    from shardopt.core.files import check_output
    from shardopt.core.workload import read_workload

    started = time.perf_counter()
    wl, sha = read_workload(workload)
    default_output = output is None
    output = output or Path("plans") / f"{wl.name}.json"
    make_folder = output.parent == Path("plans")  # the default folder is made on first use
    check_output(output, option="--output" if not default_output else "default output",
                 inputs=[workload, _model_path(cost_model)], suffixes=(".json",),
                 parent_may_be_created=make_folder)
    model, warnings = resolve_cost_model(cost_model, wl)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    from shardopt.contracts import OBJECTIVES

    goal = OBJECTIVES[objective]
    if search_name == "ilp":
        from shardopt.search.ilp import IlpSearch

        search = IlpSearch(time_limit_s=time_limit, candidates=candidate_set, objective=goal)
    else:
        from shardopt.search.greedy import GreedySearch

        search = GreedySearch(repair_s=max(0.2, 0.2 * time_limit), candidates=candidate_set, objective=goal)
    result = plan_workload(wl, sha256=sha, cost_model=model, search=search, source=str(workload))
    elapsed = time.perf_counter() - started
    if make_folder:
        output.parent.mkdir(exist_ok=True)
    write_plan(result, output)
    if quiet:
        click.echo(str(output))
        return
    click.echo(plan_summary(wl, result, workload_hardware(wl)))
    click.echo(f"planned in {elapsed:.2f} s; wrote {output}")


def _model_path(spec: str) -> Path | None:
    """The file a --cost-model value names, if it names one (an input, never to be overwritten)."""
    from shardopt.costmodel.registry import NAMES

    return None if spec in NAMES else Path(spec)


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
@click.option("--tables", "num_tables", type=click.IntRange(1, 100_000), required=True)
@click.option("--world-size", type=click.IntRange(1, 2**16), required=True)
@click.option("--local-world-size", type=click.IntRange(1, 2**16), help="Ranks per host [world size].")
@click.option("--batch-size", type=click.IntRange(1, 2**24), default=512, show_default=True)
@click.option("--device", "compute_device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--hardware", help="Hardware profile name (default: the device's).")
@click.option("--hbm-cap", default="1GB", show_default=True, help="Memory per rank, e.g. 80GB.")
@click.option("--rows-scale", type=FiniteFloat(0, 1e6, lo_open=True), default=1.0, show_default=True)
@click.option("--dims", default="16,32,64,128,256", show_default=True, help="Embedding dims to draw from.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
def synth(output: Path, dims: str, local_world_size: int | None, **options) -> None:
    """Write a synthetic DLRM-like workload drawn from the public dlrm_datasets statistics."""
    from shardopt.core.errors import FieldError
    from shardopt.core.files import check_output, write_atomic
    from shardopt.traces.synth import SynthSpec, synth_workload
    from shardopt.core.workload import workload_from_dict, workload_yaml

    check_output(output, suffixes=(".yaml", ".yml"))
    _size_option(options["hbm_cap"], "--hbm-cap")
    try:
        dim_list = tuple(int(d) for d in dims.split(","))
    except ValueError:
        raise click.BadParameter(f"must be integers separated by commas, got {dims!r}", param_hint="--dims")
    spec = SynthSpec(
        dims=dim_list, local_world_size=local_world_size or options["world_size"], **options
    )
    data = synth_workload(spec)
    try:
        workload_from_dict(data, "synth")  # the options must make a valid workload
    except FieldError as exc:
        raise exc.reworded(_SYNTH_OPTIONS.get(exc.field, exc.path)) from None
    header = f"Generated by: {_command_line()}\nStatistics from the public dlrm_datasets (see shardopt/traces/synth.py)."
    write_atomic(output, workload_yaml(data, header))
    click.echo(f"wrote {output}: {spec.num_tables} tables, {spec.world_size} ranks")


# The option behind each workload field synth writes, for its error messages.
_SYNTH_OPTIONS = {
    "name": "--name", "batch_size": "--batch-size", "world_size": "--world-size",
    "local_world_size": "--local-world-size", "compute_device": "--device", "hardware": "--hardware",
    "hbm_cap": "--hbm-cap", "embedding_dim": "--dims", "num_embeddings": "--rows-scale",
    "tables": "--hbm-cap (or --rows-scale, --dims)",
}


@main.command()
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--preset", type=click.Choice(["unit", "smoke", "full"]), default="smoke", show_default=True)
@click.option(
    "--backend",
    type=click.Choice(["auto", "fbgemm", "torch"]),
    default="auto",
    show_default=True,
    help="Lookup kernel: FBGEMM's TBE, or the torch-native one (auto: FBGEMM when installed).",
)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Dataset folder; rerunning with the same folder resumes.")
def profile(device: str, preset: str, backend: str, seed: int, output: Path) -> None:
    """Measure embedding kernels and all-to-all on this machine into a profile dataset.

    Under torchrun, only all-to-all is measured, at the launcher's world size (NCCL on GPUs).
    """
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning, module="fbgemm_gpu")
    from shardopt.core.files import check_output_folder
    from shardopt.profile.sweep import run_sweep

    check_output_folder(output)
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ShardoptError("--device cuda: no CUDA device is visible to torch here")
    try:
        result = run_sweep(str(output), preset=preset, device=device, backend=backend, seed=seed)
    except KeyboardInterrupt:
        raise Interrupted(f"measured points are kept in {output}; rerun to resume") from None
    except RuntimeError as exc:
        raise ShardoptError(f"--backend {backend}: {exc}") from None
    click.echo(
        f"{output}: measured {result.measured} points ({result.skipped} already there)"
        f" in {result.seconds:.1f} s"
    )


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--base", type=click.Path(dir_okay=False, path_type=Path),
              help="Workload whose tables (in order) take the trace's statistics.")
@click.option("--name", help="Workload name [trace file name].")
@click.option("--dim", type=click.IntRange(4, 2**16), default=64, show_default=True,
              help="embedding_dim of every table when there is no --base.")
@click.option("--world-size", type=click.IntRange(1, 2**16), default=8, show_default=True)
@click.option("--hbm-cap", default="80GB", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
def stats(trace: Path, base: Path | None, name: str | None, dim: int, world_size: int,
          hbm_cap: str, output: Path) -> None:
    """Write a workload with per-table statistics of TRACE (dlrm_datasets format)."""
    from shardopt.core.errors import FieldError
    from shardopt.core.files import check_output, write_atomic
    from shardopt.traces.to_workload import workload_from_trace
    from shardopt.core.workload import workload_from_dict, workload_yaml

    check_output(output, inputs=[trace, base], suffixes=(".yaml", ".yml"))
    _size_option(hbm_cap, "--hbm-cap")
    data = workload_from_trace(
        trace, base=base, name=name, dim=dim, world_size=world_size, hbm_cap=hbm_cap
    )
    try:
        workload_from_dict(data, str(trace))
    except FieldError as exc:  # name what made the field: an option, the base or the trace
        option = {"name": "--name", "hbm_cap": "--hbm-cap", "world_size": "--world-size",
                  "embedding_dim": "--dim"}.get(exc.field)
        if option and not (base and option != "--name"):
            raise exc.reworded(option) from None
        raise exc.reworded(f"{trace} (with {base})" if base else f"{trace}: {exc.path}") from None
    header = f"Generated by: {_command_line()}\nStatistics of the index trace {trace.name}."
    write_atomic(output, workload_yaml(data, header))
    click.echo(f"wrote {output}: {len(data['tables'])} tables, batch {data['batch_size']}")


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--comm-profile", type=click.Path(file_okay=False, path_type=Path),
              help="Profile dataset whose all-to-all points give the communication times"
              " [default: the workload's declared bandwidths].")
@click.option("--backend", type=click.Choice(["auto", "fbgemm", "torch"]), default="auto",
              show_default=True)
@click.option("--iters", type=click.IntRange(1, 10_000), default=10, show_default=True)
@click.option("--warmup", type=click.IntRange(0, 10_000), default=3, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def replay(workload: Path, plan_file: Path, comm_profile: Path | None, backend: str, iters: int,
           warmup: int, seed: int, as_json: bool) -> None:
    """Measure PLAN's per-rank cost on this machine's kernels, beside its prediction."""
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning, module="fbgemm_gpu")
    from shardopt.costmodel.analytic import AnalyticCostModel
    from shardopt.core.plan import read_plan
    from shardopt.arithmetic.checks import check_plan
    from shardopt.measure.replay import replay_plan
    from shardopt.measure.replay_report import replay_json, replay_table
    from shardopt.core.workload import read_workload

    wl, sha = read_workload(workload)
    plan_obj = read_plan(plan_file)
    report = check_plan(wl, plan_obj, sha)
    if not report.valid:
        raise ShardoptError(f"{plan_file}: does not fit {workload}: {report.violations[0]}")
    comm = None
    if comm_profile is not None:
        comm = _profiled_comm(comm_profile, wl.topology.world_size)
    predicted = plan_obj.predicted
    if predicted is None:
        per_rank = AnalyticCostModel().breakdown(wl, plan_obj.tables)
        predicted_name, predicted_ranks = "analytic-v0", per_rank
    else:
        predicted_name, predicted_ranks = predicted.cost_model, list(predicted.per_rank)
    started = time.perf_counter()
    try:
        result = replay_plan(
            wl, plan_obj, backend=backend, warmup=warmup, iters=iters, seed=seed, comm=comm,
            progress=None if as_json else lambda r: click.echo(f"  rank {r} measured", err=True),
        )
    except RuntimeError as exc:
        raise ShardoptError(f"--backend {backend}: {exc}") from None
    elapsed = time.perf_counter() - started
    if as_json:
        click.echo(replay_json(result, predicted_name, predicted_ranks))
    else:
        click.echo(replay_table(wl, result, predicted_name, predicted_ranks))
        click.echo(f"replayed in {elapsed:.1f} s")


def _profiled_comm(folder: Path, world_size: int):
    """All-to-all times of a profile folder; ShardoptError when it holds none at ``world_size``."""
    from shardopt.profile.dataset import ProfileDataset
    from shardopt.measure.replay import ProfiledComm

    dataset = ProfileDataset(folder)
    dataset.manifest()  # a folder that is no profile fails here, naming it
    records = list(dataset.records("a2a"))
    if not records:
        raise ShardoptError(f"{folder}: --comm-profile: the profile holds no all-to-all points")
    comm = ProfiledComm(records, str(folder))
    if world_size > 1 and not comm.curves.covers(world_size):
        raise ShardoptError(
            f"{folder}: --comm-profile: no all-to-all of both patterns (even, pooled) measured at world size"
            f" {world_size} (measured: {', '.join(map(str, comm.world_sizes())) or 'none'})"
        )
    return comm


@main.command()
@click.argument("profile_dir", metavar="PROFILE", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Model file to write (JSON).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--epochs", type=click.IntRange(1, 100_000), default=300, show_default=True)
@click.option("--hardware", help="Hardware profile the data was measured on [from the manifest].")
def train(profile_dir: Path, output: Path, seed: int, epochs: int, hardware: str | None) -> None:
    """Calibrate the analytic model and train the learned one on PROFILE; print held-out error."""
    from shardopt.costmodel.store import save_model
    from shardopt.costmodel.train import train_model
    from shardopt.core.files import check_output

    check_output(output, inputs=[profile_dir], suffixes=(".json",))
    started = time.perf_counter()
    parts, report = train_model(profile_dir, seed=seed, epochs=epochs, hardware=hardware)
    save_model(output, parts, report)
    err = report["held_out_mape"]
    click.echo(
        f"wrote {output}: trained on {report['train_kernels']} kernels in"
        f" {time.perf_counter() - started:.1f} s; held-out MAPE over {report['held_out_kernels']}"
        f" kernels: learned {err['learned']:.1%}, calibrated analytic {err['analytic-calibrated']:.1%}"
    )


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--cost-model", "cost_model", default="analytic", show_default=True,
              help="analytic | analytic-v0 | learned | PATH of a model file.")
@click.option("--json", "as_json", is_flag=True, help="Print the breakdown as JSON.")
def evaluate(workload: Path, plan_file: Path, cost_model: str, as_json: bool) -> None:
    """Print a cost model's per-rank breakdown of PLAN (ours or anyone's)."""
    import dataclasses
    import json

    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.core.plan import read_plan
    from shardopt.arithmetic.checks import check_plan
    from shardopt.planner.summary import breakdown_table
    from shardopt.core.workload import read_workload

    wl, sha = read_workload(workload)
    plan_obj = read_plan(plan_file)
    report = check_plan(wl, plan_obj, sha)
    if not report.valid:
        raise ShardoptError(f"{plan_file}: does not fit {workload}: {report.violations[0]}")
    model, warnings = resolve_cost_model(cost_model, wl)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    per_rank = model.breakdown(wl, plan_obj.tables)
    if as_json:
        from shardopt.contracts import Breakdown

        data = {"cost_model": model.name, "max_ms": Breakdown.of(per_rank).bottleneck_ms,
                "per_rank": [dataclasses.asdict(r) for r in per_rank]}
        click.echo(json.dumps(data, indent=1))
        return
    click.echo(f"{plan_file}: predicted by {model.name}")
    click.echo(breakdown_table(wl, per_rank))


if __name__ == "__main__":  # pragma: no cover
    main()


@main.command("from-torchrec")
@click.argument("factory")
@click.option("--world-size", type=click.IntRange(1, 2**16), required=True)
@click.option("--local-world-size", type=click.IntRange(1, 2**16), default=None)
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True)
@click.option("--hbm-cap", default=None, help="Per-rank memory for tables (GPU HBM, or a CPU rank's DRAM)."
              " Default: TorchRec's topology default.")
@click.option("--batch-size", type=click.IntRange(1, 2**24), required=True, help="Per rank.")
@click.option("--name", default=None, help="Workload name [default: the factory's name].")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
def from_torchrec(factory: str, world_size: int, local_world_size: int | None, device: str,
                  hbm_cap: str | None, batch_size: int, name: str | None, output: Path) -> None:
    """Write the workload of a TorchRec model: FACTORY is "package.module:callable" returning it."""
    import importlib

    from shardopt.core.files import check_output, write_atomic
    from shardopt.torchrec.from_model import workload_from_module
    from shardopt.core.units import parse_size
    from shardopt.core.workload import workload_to_dict, workload_yaml

    check_output(output, suffixes=(".yaml", ".yml"))
    _size_option(hbm_cap, "--hbm-cap")
    if local_world_size is not None and world_size % local_world_size:
        raise ShardoptError(f"--local-world-size: must divide --world-size {world_size}, got {local_world_size}")
    module_name, _, attr = factory.partition(":")
    if not module_name or not attr:
        raise ShardoptError(f"FACTORY: expected 'package.module:callable', got {factory!r}")
    sys.path.insert(0, os.getcwd())
    sys.dont_write_bytecode = True  # importing the user's module must leave no __pycache__ beside it
    import logging
    import warnings

    warnings.filterwarnings("ignore")  # TorchRec's import-time warnings would make errors two lines
    logging.disable(logging.WARNING)
    try:
        make = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ShardoptError(f"FACTORY {factory!r}: {_one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed on import; say how, in one line
        raise ShardoptError(f"FACTORY {factory!r}: importing {module_name} raised {type(exc).__name__}:"
                            f" {_one_line(exc)[:200]}") from None
    if not callable(make):
        raise ShardoptError(f"FACTORY {factory!r}: {attr} is a {type(make).__name__}, not a callable")
    from torchrec.distributed.planner.types import Topology

    caps = {}
    if hbm_cap is not None:
        caps["hbm_cap" if device == "cuda" else "ddr_cap"] = parse_size(hbm_cap)
    topology = Topology(world_size=world_size, compute_device=device,
                        local_world_size=local_world_size, **caps)
    constraints = None
    try:
        model = make()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed; say how, in one line
        raise ShardoptError(f"FACTORY {factory!r}: calling it raised {type(exc).__name__}:"
                            f" {_one_line(exc)[:200]}") from None
    if isinstance(model, tuple) and len(model) == 2:  # (model, constraints) is accepted too
        model, constraints = model
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ShardoptError(f"FACTORY {factory!r}: returned {type(model).__name__}, not a torch.nn.Module"
                            " (or a (module, constraints) pair)")
    if constraints is not None and not isinstance(constraints, dict):
        raise ShardoptError(f"FACTORY {factory!r}: constraints must be a dict of table name to"
                            f" ParameterConstraints, got {type(constraints).__name__}")
    if name is not None:
        from shardopt.core.workload import check_file_stem

        check_file_stem(name, "--name")
    workload_name = name or re.sub(r"[^A-Za-z0-9_.-]", "-", attr.replace("_", "-")).lstrip(".") or "model"
    workload, _ = workload_from_module(model, topology, batch_size, constraints, name=workload_name)
    write_atomic(output, workload_yaml(workload_to_dict(workload), header=f"Generated by: {_command_line()}"))
    click.echo(f"wrote {output}: {len(workload.tables)} tables on {world_size} ranks")


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--cost-model", "cost_model", default="analytic", show_default=True)
@click.option("--time-limit", type=TIME_LIMIT, default=5.0, show_default=True)
@click.option("--replay", "do_replay", is_flag=True, help="Also measure both plans on this machine.")
@click.option("--rounds", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Replay rounds (with --replay): both plans' ranks timed in a shuffled order each"
              " round; steps and bottlenecks are read off per-rank medians.")
@click.option("--comm-profile", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Profile whose all-to-all points give replay's communication"
              " [default: the packaged CPU profile for CPU workloads, else declared bandwidths].")
def compare(workload: Path, cost_model: str, time_limit: float, do_replay: bool, rounds: int,
            comm_profile: Path | None) -> None:
    """Plan WORKLOAD with TorchRec's planner and with shardopt; print both side by side."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.planner import plan_workload
    from shardopt.search.ilp import IlpSearch
    from shardopt.torchrec.to_model import torchrec_plan
    from shardopt.core.workload import read_workload

    wl, sha = read_workload(workload)
    profiled = _profiled_comm(comm_profile, wl.topology.world_size) if comm_profile and do_replay else None
    model, notes = resolve_cost_model(cost_model, wl)
    for note in notes:
        click.echo(f"warning: {note}", err=True)
    started = time.perf_counter()
    theirs = torchrec_plan(wl, sha)
    theirs_s = time.perf_counter() - started
    started = time.perf_counter()
    ours = plan_workload(wl, sha256=sha, cost_model=model,
                         search=IlpSearch(time_limit_s=time_limit, candidates="torchrec"))
    ours_s = time.perf_counter() - started
    from shardopt.contracts import Breakdown

    pred = {}
    for name, p in (("shardopt", ours), ("torchrec", theirs)):
        per_rank = model.breakdown(wl, p.tables)
        pred[name] = (Breakdown.of(per_rank).step_ms, Breakdown.of(per_rank).bottleneck_ms)
    lines = [f"{wl.name}: {len(wl.tables)} tables on {wl.topology.world_size} ranks; cost model {model.name}",
             "ms per step (critical path: each phase's slowest rank, summed) and of the bottleneck rank",
             f"{'planner':<10} {'plan s':>7} {'predicted step':>15} {'bottleneck':>11}"
             + (f" {'replayed step':>14} {'bottleneck':>11}" if do_replay else "")]
    measured = {}
    if do_replay:
        from shardopt.measure.replay import packaged_cpu_comm, replay_side_by_side

        comm = None
        if profiled is not None:
            comm = profiled
        elif wl.topology.compute_device == "cpu":
            comm = packaged_cpu_comm()
        result = replay_side_by_side(wl, {"shardopt": ours, "torchrec": theirs}, rounds, comm=comm)
        measured = {name: (result.step_ms(name), result.bottleneck_ms(name)) for name in ("shardopt", "torchrec")}
    for name, seconds in (("shardopt", ours_s), ("torchrec", theirs_s)):
        line = f"{name:<10} {seconds:>7.1f} {pred[name][0]:>15.3f} {pred[name][1]:>11.3f}"
        if do_replay:
            line += f" {measured[name][0]:>14.3f} {measured[name][1]:>11.3f}"
        lines.append(line)
    ratio = (f"shardopt / torchrec: predicted {pred['shardopt'][0] / pred['torchrec'][0]:.3f} per step"
             f" ({pred['shardopt'][1] / pred['torchrec'][1]:.3f} by bottleneck)")
    if do_replay:
        ratio += (f", replayed {measured['shardopt'][0] / measured['torchrec'][0]:.3f} per step"
                  f" ({measured['shardopt'][1] / measured['torchrec'][1]:.3f} by bottleneck;"
                  f" per-rank medians of {rounds} rounds side by side; comm:"
                  f" {comm.name if comm else 'declared bandwidths'})")
    lines.append(ratio)
    click.echo("\n".join(lines))


@main.command()
@click.option("--suite", type=click.Choice(["unit", "ci", "full"]), default="ci", show_default=True)
@click.option("--planners", default=None,
              help="Comma-separated planners [default: all for full; shardopt and the baselines for ci].")
@click.option("--rounds", type=click.IntRange(0, 1000), default=0, show_default=True,
              help="Interleaved replay rounds (0: predicted only, as the CI gate runs).")
@click.option("--time-limit", type=TIME_LIMIT, default=5.0, show_default=True)
@click.option("--check", "check_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Baseline to gate against: exit 1 with a table when a task regresses.")
@click.option("--update", is_flag=True, help="Rewrite the --check baseline with this run.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for report.md, plots and results.json.")
def bench(suite: str, planners: str | None, rounds: int, time_limit: float, check_file: Path | None,
          update: bool, output: Path | None) -> None:
    """Run planners side by side on a benchmark suite; report, and gate against a baseline."""
    import json
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.suite import PLANNERS, entries_to_json, run_suite
    from shardopt.bench.tasks import suite_tasks
    from shardopt.core.files import check_output, check_output_folder

    if update and check_file is None:
        raise ShardoptError("--update: needs --check FILE, the baseline to rewrite")
    if output is not None:
        check_output_folder(output, inputs=[] if update else [check_file])
    if check_file is not None:
        from shardopt.bench.gate import read_baseline

        if update:
            check_output(check_file, option="--check", suffixes=(".json",))
        else:
            read_baseline(check_file)  # a bad baseline fails now, not after the run
    chosen = tuple(planners.split(",")) if planners else (
        PLANNERS if suite == "full" else ("shardopt", "size-greedy", "lookup-greedy"))
    unknown = [p for p in chosen if p not in PLANNERS]
    if unknown:
        raise ShardoptError(f"--planners: unknown {', '.join(unknown)}; known: {', '.join(PLANNERS)}")
    tasks = suite_tasks(suite)
    started = time.perf_counter()
    entries, plans = run_suite(tasks, chosen, rounds=rounds, time_limit_s=time_limit,
                               progress=lambda m: click.echo(m, err=True))
    click.echo(f"{len(tasks)} tasks x {len(chosen)} planners in {time.perf_counter() - started:.0f} s", err=True)
    if output is not None:
        from shardopt.bench.report import write_report
        from shardopt.core.files import write_atomic

        output.mkdir(exist_ok=True)
        write_atomic(output / "results.json", json.dumps(entries_to_json(entries), indent=1) + "\n")
        path = write_report(entries, plans, tasks, output, _command_line())
        click.echo(f"wrote {path}")
    if check_file is not None:
        from shardopt.bench.gate import check, read_baseline, write_baseline

        if update:
            write_baseline(check_file, entries, suite)
            click.echo(f"wrote the baseline {check_file}")
            return
        ok, table = check(entries, read_baseline(check_file))
        click.echo(table)
        if not ok:
            click.echo(f"plan-quality gate FAILED against {check_file}", err=True)
            sys.exit(1)
        click.echo(f"plan-quality gate passed against {check_file}")


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
        from shardopt.costmodel.registry import resolve_cost_model
        from shardopt.arithmetic.checks import check_plan
        from shardopt.core.workload import read_workload

        wl, sha = read_workload(workload)
        checked = check_plan(wl, plan_obj, sha)
        if not checked.valid:
            raise ShardoptError(f"{plan_file}: does not fit {workload}: {checked.violations[0]}")
        model, _ = resolve_cost_model("analytic", wl)
        per_rank, label = model.breakdown(wl, plan_obj.tables), model.name
    elif plan_obj.predicted is not None:
        per_rank, label = plan_obj.predicted.per_rank, plan_obj.predicted.cost_model
    else:
        raise ShardoptError(f"{plan_file}: predicted: the plan holds no prediction; pass --workload")
    plan_bars_png(per_rank, f"{plan_obj.workload.name}: per-rank cost ({label})", output)
    click.echo(f"wrote {output}")
