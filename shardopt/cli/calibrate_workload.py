"""``calibrate --workload``'s own parts: the workload's kernels, its plans measured and its replicas
measured (:mod:`shardopt.measure.refine`), and the lines that say what they found."""

from __future__ import annotations

from pathlib import Path

import click

from shardopt.core.errors import ShardoptError


def refined(workload, parts, report: dict, deadline: float, device: str, backend: str, *, probe: bool):
    """``parts`` with the analytic calibration's tables priced by what was measured of the workload:
    its replicas and then its own plans (:func:`shardopt.measure.refine.refine`, progress printed),
    or with ``probe`` its replicas only (:func:`shardopt.measure.refine.replicas_refined`); what was
    measured goes into ``report`` (``refine`` or ``replicas``)."""
    import dataclasses

    from shardopt.costmodel.registry import held_out_error
    from shardopt.measure.refine import refine, replicas_refined

    key, what = ("replicas", "its replicas measured") if probe else ("refine", "its plans measured")
    if workload.parallelism is not None:
        report[key] = {"skipped": "a 2D workload: plan one group (drop the parallelism block, world_size the"
                                  f" group's size) to have {what}"}
        return parts
    held_out = held_out_error(report, "analytic")
    if probe:
        calibration, report[key] = replicas_refined(workload, parts.calibration, held_out=held_out, deadline=deadline,
                                                    device=device, backend=backend)
    else:
        calibration, report[key] = refine(
            workload, parts.calibration, held_out=held_out, deadline=deadline, device=device, backend=backend,
            progress=lambda line: click.echo(f"calibrate --workload: {line}", err=True))
    return dataclasses.replace(parts, calibration=calibration)


def replicas_line(report: dict) -> str:
    replicas = report.get("replicas")
    if not replicas:
        return ""
    if "skipped" in replicas:
        return f" Its replicas were not measured: {replicas['skipped']}."
    if not replicas["replicas"]:
        return " None of its tables may be replicated: no replica to measure."
    count = replicas["replicas"]
    tables, as_what = ("table", "a replica") if count == 1 else ("tables", "replicas")
    return f" The {count} {tables} it may replicate measured as {as_what} in {replicas['seconds']:g} s."


def refine_line(report: dict) -> str:
    refined = report.get("refine")
    if not refined:
        return ""
    if "skipped" in refined:
        return f" Its plans were not measured: {refined['skipped']}."
    if not refined["rounds"]:
        # The replicas may still have been measured (their factors are in the file).
        more = f"about {refined['short_s']} s more" if refined.get("short_s") else "more seconds"
        return replicas_line(refined) + f" No time was left to measure its plans: give --budget {more}."
    first, last = refined["rounds"][0], refined["rounds"][-1]
    return (f" The workload's own plans, measured in {len(refined['rounds'])} rounds: slowest rank"
            f" {first['slowest_over_mean']:.2f}x the mean in the first, {last['slowest_over_mean']:.2f}x in the last;"
            f" per-rank error {refined['rank_error_unfitted']:.1%} before the tables' factors,"
            f" {refined['rank_error_fitted']:.1%} after"
            + (f"; kept the factors ({refined['tables']} tables) of the plan of {refined['final']['kept']}, fastest"
               f" side by side" if refined.get("final") else f" ({refined['tables']} tables)") + ".")


def read_workload_kernels(path: Path, device: str, seed: int):
    """(workload, kernels) of ``calibrate --workload``: the workload's shapes, read before anything runs."""
    from shardopt.core.workload import read_workload
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.planner.workload_points import workload_kernels

    workload, _ = read_workload(path)
    on = "cuda" if workload.topology.compute_device != "cpu" else "cpu"
    if on != device:
        raise ShardoptError(f"{path}: topology.compute_device: the workload runs on {workload.topology.compute_device},"
                            f" calibrate measures --device {device}")
    return workload, workload_kernels(workload, resolve_cost_model("analytic", workload)[0], device == "cuda", seed)
