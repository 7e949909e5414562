"""Commands for a cluster or model that changed: replan, check-moves."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from shardopt.cli.app import main, warn
from shardopt.cli.options import check_size_option, model_path, plan_config_options
from shardopt.contracts import PlanConfig
from shardopt.core.errors import ShardoptError


@main.command()
@click.argument("old_plan", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--old-workload", type=click.Path(dir_okay=False, path_type=Path),
              help="The workload OLD_PLAN was made for; the plan is checked against it first.")
@click.option("--max-move", help="Most bytes the re-shard may move (weights and optimizer state), e.g. 20GB."
                                 " Default: as few as a fresh plan's step allows.")
@click.option("--frontier", is_flag=True, help="Print the step against bytes moved over budgets.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Plot the frontier (PNG/SVG/PDF).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="New plan to write (JSON); required unless --frontier.")
@click.option("--moves", type=click.Path(dir_okay=False, path_type=Path),
              help="Migration manifest to write (JSON): each piece's old rank, new rank and bytes.")
@click.option("--lost-ranks", "lost_ranks", metavar="LIST",
              help="Old ranks that died, e.g. 6,7: the survivors keep their order as ranks 0, 1, ...;"
                   " nothing is sent from a lost rank, and what only they held is read from the last"
                   " checkpoint (counted in --max-move; the manifest's restored pieces).")
@plan_config_options()
def replan(old_plan: Path, workload: Path, old_workload: Path | None, max_move: str | None, frontier: bool,
           plot: Path | None, output: Path | None, moves: Path | None, lost_ranks: str | None,
           config: PlanConfig) -> None:
    """Plan WORKLOAD again from OLD_PLAN, moving few bytes: the world may grow or shrink, tables
    may come, go or grow, ranks may have been lost. Exit 2 for unusable input or a budget below
    what the change forces."""
    from shardopt.arithmetic.migration import migration
    from shardopt.arithmetic.movement import OldLayout
    from shardopt.core.files import check_output, write_atomic
    from shardopt.core.plan import write_plan
    from shardopt.core.units import parse_size
    from shardopt.core.workload import read_workload
    from shardopt.planner import resolve_model
    from shardopt.planner.replan import move_frontier, replan_start, replan_with
    from shardopt.planner.replan_report import frontier_png, frontier_table, replan_line

    if plot is not None and not frontier:
        raise ShardoptError("--plot: draws the frontier; add --frontier")
    if moves is not None and output is None:
        raise ShardoptError("--moves: the manifest goes with a new plan; add --output")
    if output is None and not frontier:
        raise ShardoptError("--output: name the new plan file (or ask for --frontier)")
    lost = _rank_list(lost_ranks, "--lost-ranks") if lost_ranks is not None else ()
    budget = None
    if max_move is not None:  # 0 is a budget too: move nothing that need not move
        budget = 0 if max_move.strip().upper() in ("0", "0B") else parse_size(check_size_option(max_move, "--max-move"))
    inputs = [old_plan, workload, old_workload, model_path(config.cost_model)]
    written: dict[str, Path] = {}
    for path, option, suffixes in ((output, "--output", (".json",)), (moves, "--moves", (".json",)),
                                   (plot, "--plot", (".png", ".svg", ".pdf"))):
        if path is not None:
            check_output(path, option=option, inputs=inputs, suffixes=suffixes, others=written)
            written[option] = path
    wl, sha = read_workload(workload)
    old = _old_plan(old_plan, old_workload, wl, workload)
    if old.parallelism is not None or wl.parallelism is not None:
        which = f"{old_plan} is one sharding group's plan" if old.parallelism is not None else \
            f"{workload} declares a parallelism block"
        raise ShardoptError(f"{which}: replan re-shards 1D plans only; plan the 2D world afresh with"
                            " shardopt plan (every group gets the same plan)")
    model, warnings = resolve_model(config, wl)
    for warning in warnings:
        warn(warning)
    start = replan_start(old, wl, config, cost_model=model, sha256=sha, source=str(workload), lost_ranks=lost)
    if frontier:
        points = move_frontier(old, wl, config, cost_model=model, sha256=sha, source=str(workload), start=start,
                               progress=lambda b: click.echo(f"budget {b} bytes: planned", err=True))
        click.echo(frontier_table(points))
        if plot is not None:
            frontier_png(points, f"{wl.name}: {old.world_size} -> {wl.topology.world_size} ranks", plot)
            click.echo(f"wrote {plot}")
    if output is None:
        return
    result = replan_with(old, wl, config, max_move=budget, cost_model=model, sha256=sha, source=str(workload),
                         start=start)
    manifest = migration(wl, OldLayout.of(old, lost), result.plan.tables, result.old_of) if moves is not None else None
    write_plan(result.plan, output)
    if manifest is not None:
        write_atomic(moves, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    click.echo(replan_line(result))
    click.echo(f"wrote {output}" + (f" and {moves}" if moves is not None else ""))


def _old_plan(old_plan: Path, old_workload: Path | None, wl, workload: Path):
    """OLD_PLAN read and checked on its own (duplicates, ranks, coverage), against --old-workload
    where given, and as a plan of the model WORKLOAD changed: another workload is refused unless
    --old-workload says what it was and the change is one replan makes (not another device)."""
    from shardopt.arithmetic.checks import check_plan, layout_problems
    from shardopt.core.plan import read_plan
    from shardopt.core.workload import read_workload

    old = read_plan(old_plan)
    if problems := layout_problems(old):
        raise ShardoptError(f"{old_plan}: {problems[0]}")
    if old_workload is None:
        if old.workload.name != wl.name:
            raise ShardoptError(f"{old_plan}: workload.name: the plan is of workload {old.workload.name!r}, not"
                                f" {wl.name!r} ({workload}); if {wl.name!r} is that model changed, pass the workload"
                                " the plan was made for with --old-workload")
        return old
    old_wl, old_sha = read_workload(old_workload)
    if old.workload.name != old_wl.name:
        raise ShardoptError(f"{old_plan}: workload.name: the plan is of workload {old.workload.name!r}, not"
                            f" {old_wl.name!r} (--old-workload {old_workload})")
    report = check_plan(old_wl, old, old_sha)
    if not report.valid:
        raise ShardoptError(f"{old_plan}: not a valid plan for {old_workload}: {report.violations[0]}"
                            f"{f' (and {len(report.violations) - 1} more)' if len(report.violations) > 1 else ''}")
    before, after = old_wl.topology.compute_device, wl.topology.compute_device
    if before != after:
        raise ShardoptError(f"{workload}: topology.compute_device: {after}, where --old-workload {old_workload} is"
                            f" {before}; replan re-shards within one device kind (plan the new one afresh)")
    return old


def _rank_list(text: str, option: str) -> tuple[int, ...]:
    """"6,7" -> (6, 7); anything else one line naming the option."""
    parts = [p.strip() for p in text.split(",")]
    bad = next((p for p in parts if not p.isdigit()), None)
    if bad is not None:
        raise ShardoptError(f"{option}: {bad!r} is not a rank number (give ranks as 6,7)")
    return tuple(int(p) for p in parts)


@main.command("check-moves")
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("old_plan", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("new_plan", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("moves", type=click.Path(dir_okay=False, path_type=Path))
def check_moves(workload: Path, old_plan: Path, new_plan: Path, moves: Path) -> None:
    """Check that MOVES turns OLD_PLAN into NEW_PLAN (of WORKLOAD) exactly, every byte count
    recomputed: exit 0 yes, 1 no, 2 when MOVES is not a moves file."""
    from shardopt.arithmetic.checks import read_checked
    from shardopt.arithmetic.migration import check_moves as check
    from shardopt.core.manifest import read_manifest
    from shardopt.core.plan import read_plan

    wl, _, new = read_checked(workload, new_plan)
    old = read_plan(old_plan)
    manifest = read_manifest(moves)
    problems = check(wl, old, new, manifest)
    if not problems:
        restored = manifest.restored
        click.echo(f"{moves}: turns {old_plan} into {new_plan} exactly"
                   f" ({len(manifest.moves)} moves, {manifest.moved_bytes} bytes, each recomputed"
                   + (f"; {len(restored)} pieces read from the checkpoint for lost ranks"
                      f" {', '.join(map(str, manifest.lost_ranks))}" if restored else "") + ")")
        return
    for problem in problems:
        click.echo(f"{moves}: {problem}")
    click.echo(f"{moves}: {len(problems)} problem(s)", err=True)
    sys.exit(1)
