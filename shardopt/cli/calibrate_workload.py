"""``calibrate --workload``'s own parts: the workload's kernels, its plans measured and its tables
measured alone (:mod:`shardopt.measure.refine`), and the lines that say what they found."""

from __future__ import annotations

from pathlib import Path

import click

from shardopt.core.errors import ShardoptError


def refined(workload, parts, report: dict, deadline: float, device: str, backend: str, *, probe: bool):
    """``parts`` with the analytic calibration's tables priced by what was measured of the workload:
    its tables alone and then its own plans (:func:`shardopt.measure.refine.refine`, progress
    printed), or with ``probe`` its tables alone only (:func:`shardopt.measure.refine.alone_refined`);
    what was measured goes into ``report`` (``refine`` or ``alone``)."""
    import dataclasses

    from shardopt.costmodel.registry import held_out_error
    from shardopt.measure.refine import alone_refined, refine

    key, what = ("alone", "its tables measured alone") if probe else ("refine", "its plans measured")
    if workload.parallelism is not None:
        report[key] = {"skipped": "a 2D workload: plan one group (drop the parallelism block, world_size the"
                                  f" group's size) to have {what}"}
        return parts
    held_out = held_out_error(report, "analytic")
    if probe:
        calibration, report[key] = alone_refined(workload, parts.calibration, held_out=held_out, deadline=deadline,
                                                 device=device, backend=backend)
    else:
        calibration, report[key] = refine(
            workload, parts.calibration, held_out=held_out, deadline=deadline, device=device, backend=backend,
            progress=lambda line: click.echo(f"calibrate --workload: {line}", err=True))
    return dataclasses.replace(parts, calibration=calibration)


def alone_line(report: dict) -> str:
    alone = report.get("alone")
    if not alone:
        return ""
    if "skipped" in alone:
        return f" Its tables were not measured alone: {alone['skipped']}."
    replicas = f" (and the {alone['replicas']} it may replicate, as replicas)" if alone.get("replicas") else ""
    return (f" Each of its {alone['tables']} tables measured alone{replicas} in {alone['seconds']:g} s: the model off"
            f" by {alone['rank_error_before']:.1%} per table before its factor, {alone['rank_error_after']:.1%} after.")


def refine_line(report: dict) -> str:
    refined = report.get("refine")
    if not refined:
        return ""
    if "skipped" in refined:
        return f" Its plans were not measured: {refined['skipped']}."
    if not refined["rounds"]:
        # The tables alone may still have been measured (their factors are in the file).
        more = f"about {refined['short_s']} s more" if refined.get("short_s") else "more seconds"
        return alone_line(refined) + f" No time was left to measure its plans: give --budget {more}."
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
