"""Commands that measure: profile, train, replay, bench."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from shardopt.cli.app import Interrupted, command_line, main, warn
from shardopt.cli.calibrate_workload import read_workload_kernels, refine_line, refined, replicas_line
from shardopt.cli.options import BUDGET, COMM_PROFILE_HELP, SEED, TIME_LIMIT
from shardopt.contracts import DEFAULT_TIME_LIMIT_S
from shardopt.core.errors import ShardoptError


@main.command()
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--preset", type=click.Choice(["unit", "smoke", "full"]), default="smoke", show_default=True)
@click.option(
    "--backend",
    type=click.Choice(["auto", "fbgemm", "torch-tbe", "torch"]),
    default="auto",
    show_default=True,
    help="Lookup kernel: FBGEMM's TBE; torch-tbe, its algorithm in torch (auto: FBGEMM when installed, else torch-tbe); torch, the old autograd twin (kept to rerun old profiles).",
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


# Of calibrate's budget, the share kept for the fit (about 10 s for the 300-400 kernels that two
# minutes measure on a 2-core VM) and for starting the gloo workers of the comm points.
CALIBRATE_FIT_SHARE = 0.2
CALIBRATE_MIN_KERNELS = 40  # below this the fit's held-out share is a handful of points
PROBE_BUDGET_S = 20.0  # calibrate --probe: all of it, measuring and rescaling
PROBE_FIT_SHARE = 0.1  # rescaling is a median of ratios: no fit to wait for
PROBE_MIN_KERNELS = 6
# calibrate --workload: the share of the budget for measuring the workload's own plans, after the
# fit (shardopt.measure.refine): what sets its plan, measured, where the grid only pins the terms.
REFINE_SHARE = 0.35
# calibrate --probe --workload: the share kept for timing its replicas, after the rescale (they take
# about a second here; what is left unused ends the probe early).
PROBE_REPLICA_SHARE = 0.4


@main.command()
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--budget", type=BUDGET, default=120.0, show_default=True,
              help="Seconds for measuring and fitting together.")
@click.option("--backend", type=click.Choice(["auto", "fbgemm", "torch-tbe"]), default="auto",
              show_default=True, help="Lookup kernel (auto: FBGEMM when installed, else torch-tbe).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--keep-profile", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the measured points in this dataset folder (rerunning resumes it).")
@click.option("--base", default="packaged", show_default=True, metavar="packaged|none|FILE",
              help="A trained model to carry over, rescaled to this machine; kept unless a fresh fit is"
                   " clearly better on the held-out points (packaged: the one shipped for the device).")
@click.option("--workload", "workload_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Spend the budget on this workload's shapes: its own tables at their pooling, then"
                   " kernels shaped like the ranks of its plans (after the few points that pin the terms).")
@click.option("--probe", is_flag=True,
              help=f"At most {PROBE_BUDGET_S:g} s: a few kernels rescale the base model per pass (its"
                   " shapes kept); plan with the file it writes, like any model file.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Model file to write (JSON); plan with --cost-model learned@FILE.")
def calibrate(device: str, budget: float, backend: str, seed: int, keep_profile: Path | None,
              base: str, workload_file: Path | None, probe: bool, output: Path) -> None:
    """Measure this machine for a short budget and fit a cost model to it.

    A CPU model speaks for the CPU it was measured on (FBGEMM's CPU kernels differed 2-9x between
    machines sold under one name). A few points pin the model's terms; rank-shaped fused kernels
    fill the rest of the budget; then the analytic model is calibrated and the learned one trained,
    and a model trained on a full profile elsewhere is rescaled to this machine's speed: the file
    holds the rescaled one unless the fresh fit is clearly better on the held-out points.
    """
    import tempfile
    import warnings

    from shardopt.core.files import check_output, check_output_folder
    from shardopt.costmodel.store import save_model
    from shardopt.costmodel.train import train_model
    from shardopt.profile.dataset import ProfileDataset
    from shardopt.profile.sweep import run_sweep

    warnings.filterwarnings("ignore", category=DeprecationWarning, module="fbgemm_gpu")
    check_output(output, inputs=[keep_profile, workload_file]
                 + ([Path(base)] if base not in ("packaged", "none") else []), suffixes=(".json",))
    if keep_profile is not None:
        check_output_folder(keep_profile, option="--keep-profile")
    base_model = _base_model(base, device)
    workload, kernels = read_workload_kernels(workload_file, device, seed) if workload_file is not None else (None, None)
    refine_share = (PROBE_REPLICA_SHARE if probe else REFINE_SHARE) if workload is not None else 0.0
    if probe:
        if base_model is None:
            raise ShardoptError("--probe rescales a base model: give --base packaged or a model file")
        budget = min(budget, PROBE_BUDGET_S)
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ShardoptError("--device cuda: no CUDA device is visible to torch here")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shardopt-calibrate-") as tmp:
        folder = keep_profile or Path(tmp) / "profile"
        try:
            preset = "probe" if probe else "workload" if kernels is not None else "calibrate"
            swept = run_sweep(str(folder), preset=preset, device=device, backend=backend, seed=seed,
                              deadline=started + budget * (1 - (PROBE_FIT_SHARE if probe else CALIBRATE_FIT_SHARE)
                                                           - refine_share),
                              kernels=kernels)
            measured_s = time.perf_counter() - started
            count = sum(1 for _ in ProfileDataset(folder).records("tbe"))
            least = PROBE_MIN_KERNELS if probe else CALIBRATE_MIN_KERNELS
            if count < least:
                raise ShardoptError(f"--budget {budget:g}: only {count} kernel points were measured in it,"
                                    f" {least} are needed; give it more seconds")
            if probe:
                from shardopt.costmodel.train import probe_model

                parts, report = probe_model(folder, base_model)
            else:
                parts, report = train_model(folder, seed=seed, base=base_model)
            if refine_share:
                parts = refined(workload, parts, report, started + budget, device, backend, probe=probe)
        except KeyboardInterrupt:
            kept = f"measured points are kept in {keep_profile}; rerun to resume" if keep_profile else "nothing was written"
            raise Interrupted(kept) from None
        except RuntimeError as exc:
            raise ShardoptError(f"--backend {backend}: {exc}") from None
        report["calibrate"] = {"budget_s": budget, "points": swept.measured + swept.skipped,
                               "measure_s": round(measured_s, 1), "preset": preset,
                               **({"workload": str(workload_file)} if workload_file is not None else {})}
        save_model(output, parts, report)
    click.echo(
        f"wrote {output}: {swept.measured + swept.skipped} points measured in {measured_s:.0f} s, fitted"
        f"{' and its plans measured' if 'refine' in report else ''} in"
        f" {time.perf_counter() - started - measured_s:.0f} s; {'its own (in-sample) kernels' if probe else 'held-out kernel'}"
        f" {_held_out(report)}.{refine_line(report)}{replicas_line(report)}"
        f" Plan with --cost-model {'analytic' if 'refine' in report or 'replicas' in report else 'learned'}@{output}"
    )


def _base_model(base: str, device: str):
    """(name, parts) of calibrate's --base, read before anything is measured; None for none."""
    from shardopt.costmodel.registry import embedded_model_path
    from shardopt.costmodel.store import load_model

    if base == "none":
        return None
    if base == "packaged":
        path = embedded_model_path(device)  # the packaged models are named for their hardware
        return ("packaged model", load_model(path)[0]) if path is not None else None
    if not Path(base).is_file():
        raise ShardoptError(f"--base {base}: no model file there (or: packaged, none)")
    try:
        return (Path(base).name, load_model(base)[0])
    except ShardoptError as exc:  # the model file's own message, said as the option's
        raise ShardoptError(f"--base {exc}", kind=exc.kind) from None


def _held_out(report: dict) -> str:
    """A trained model's held-out kernel error, as train and calibrate print it."""
    err = report["held_out_mape"]
    kept = ""
    if len(report.get("candidates", {})) > 1:
        others = ", ".join(f"{label} {e['learned']:.1%}" for label, e in report["candidates"].items()
                           if label != report["model"])
        kept = f" (kept: {report['model']}; against {others})"
    return (f"MAPE over {report['held_out_kernels']} kernels: learned {err['learned']:.1%},"
            f" calibrated analytic {err['analytic-calibrated']:.1%}{kept}")


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
    click.echo(
        f"wrote {output}: trained on {report['train_kernels']} kernels in"
        f" {time.perf_counter() - started:.1f} s; held-out {_held_out(report)}"
    )


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--comm-profile", type=click.Path(file_okay=False, path_type=Path), help=COMM_PROFILE_HELP)
@click.option("--backend", type=click.Choice(["auto", "fbgemm", "torch-tbe", "torch"]), default="auto",
              show_default=True)
@click.option("--iters", type=click.IntRange(1, 10_000), default=10, show_default=True)
@click.option("--warmup", type=click.IntRange(0, 10_000), default=3, show_default=True)
@click.option("--builds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Build and time each rank's kernels this often (a kernel's speed varies with where its"
                   " buffers land); the rank's time is their mean, a fifth dropped at each end.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def replay(workload: Path, plan_file: Path, comm_profile: Path | None, backend: str, iters: int,
           warmup: int, builds: int, seed: int, as_json: bool) -> None:
    """Measure PLAN's per-rank cost on this machine's kernels, beside its prediction."""
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning, module="fbgemm_gpu")
    from shardopt.arithmetic.checks import read_checked
    from shardopt.costmodel.comm_source import load_comm_profile
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_plan
    from shardopt.measure.replay_report import replay_json, replay_table

    wl, _, plan_obj = read_checked(workload, plan_file)
    profile = load_comm_profile(str(comm_profile)) if comm_profile is not None else None
    model, _ = resolve_cost_model("analytic", wl, profile)
    comm = comm_for(wl, model)  # the rule plan follows, so both columns read comm from one source
    predicted = plan_obj.predicted
    if predicted is None or profile is not None:
        predicted_name, predicted_ranks = model.name, model.breakdown(wl, plan_obj.tables)
    else:
        predicted_name, predicted_ranks = predicted.cost_model, list(predicted.per_rank)
        if predicted.comm_source and predicted.comm_source != comm.name:
            warn(f"{plan_file}: predicted with comm from {predicted.comm_source};"
                 f" replay takes it from {comm.name}")
    started = time.perf_counter()
    try:
        result = replay_plan(
            wl, plan_obj, backend=backend, warmup=warmup, iters=iters, seed=seed, comm=comm, builds=builds,
            progress=None if as_json else lambda r: click.echo(f"  rank {r} measured", err=True),
        )
    except RuntimeError as exc:
        raise ShardoptError(f"--backend {backend}: {exc}") from None
    elapsed = time.perf_counter() - started
    if as_json:
        click.echo(replay_json(result, predicted_name, predicted_ranks))
    else:
        click.echo(replay_table(wl, result, predicted_name, predicted_ranks))
        from shardopt.planner.summary import placement_lines

        for line in placement_lines(wl):
            click.echo(line)
        click.echo(f"replayed in {elapsed:.1f} s")


@main.command()
@click.option("--suite", type=click.Choice(["unit", "ci", "full", "regimes", "regimes-tuning"]), default="ci",
              show_default=True, help="regimes: held-out tasks with declared links (compute-bound,"
              " comm-bound, hot small tables); regimes-tuning: their tuning half.")
@click.option("--planners", default=None,
              help="Comma-separated planners [default: all for full; shardopt and the baselines for ci].")
@click.option("--rounds", type=click.IntRange(0, 1000), default=0, show_default=True,
              help="Interleaved replay rounds (0: predicted only, as the CI gate runs).")
@click.option("--time-limit", type=TIME_LIMIT, default=DEFAULT_TIME_LIMIT_S, show_default=True)
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
    from shardopt.bench.suites import suite_tasks
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
        path = write_report(entries, plans, tasks, output, command_line())
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
