"""``calibrate --workload``'s own parts: the workload's kernels, its plans measured and its tables
measured alone (:mod:`shardopt.measure.refine`), and the lines that say what they found."""

from __future__ import annotations

from pathlib import Path

import click

from shardopt.core.errors import ShardoptError


def refined_on_plans(workload, parts, report: dict, deadline: float, device: str, backend: str):
    """``parts`` with the analytic calibration refined on the workload's own measured plans
    (:mod:`shardopt.measure.refine`); the rounds go into ``report``."""
    import dataclasses

    from shardopt.costmodel.registry import held_out_error
    from shardopt.measure.refine import refine

    if workload.parallelism is not None:
        report["refine"] = {"skipped": "a 2D workload: plan one group (drop the parallelism block, world_size the"
                                      " group's size) to have its plans measured"}
        return parts
    calibration, report["refine"] = refine(
        workload, parts.calibration, held_out=held_out_error(report, "analytic"), deadline=deadline,
        device=device, backend=backend, progress=lambda line: click.echo(f"calibrate --workload: {line}", err=True))
    return dataclasses.replace(parts, calibration=calibration)


def refined_alone(workload, parts, report: dict, deadline: float, device: str, backend: str):
    """``parts`` with each of the workload's tables priced by its measurement alone
    (:func:`shardopt.measure.refine.alone_refined`); what it measured goes into ``report``."""
    import dataclasses

    from shardopt.costmodel.registry import held_out_error
    from shardopt.measure.refine import alone_refined

    if workload.parallelism is not None:
        report["alone"] = {"skipped": "a 2D workload: plan one group (drop the parallelism block, world_size the"
                                     " group's size) to have its tables measured alone"}
        return parts
    calibration, report["alone"] = alone_refined(workload, parts.calibration, held_out=held_out_error(report, "analytic"),
                                                 deadline=deadline, device=device, backend=backend)
    return dataclasses.replace(parts, calibration=calibration)


def alone_line(report: dict) -> str:
    alone = report.get("alone")
    if not alone:
        return ""
    if "skipped" in alone:
        return f" Its tables were not measured alone: {alone['skipped']}."
    return (f" Each of its {alone['tables']} tables measured alone in {alone['seconds']:g} s: the model off by"
            f" {alone['rank_error_before']:.1%} per table before its factor, {alone['rank_error_after']:.1%} after.")


def refine_line(report: dict) -> str:
    refined = report.get("refine")
    if not refined:
        return ""
    if "skipped" in refined:
        return f" Its plans were not measured: {refined['skipped']}."
    if not refined["rounds"]:
        return " No time was left to measure its plans: give --budget more seconds."
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
