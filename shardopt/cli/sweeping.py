"""shardopt sweep: a workload planned over cluster sizes and HBM caps (a table, its data, a plot)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from shardopt.cli.app import Interrupted, main
from shardopt.cli.options import FiniteFloat, model_path, plan_config_options
from shardopt.contracts import PlanConfig
from shardopt.core.errors import ShardoptError

OUTPUTS = ("sweep.md", "sweep.json", "sweep.png")


def _sizes(value: str | None, option: str) -> list[int] | None:
    """A comma-separated list of sizes (``--hbm-caps 40GB,80GB``) or of positive integers."""
    from shardopt.core.units import parse_size
    from shardopt.core.workload import MAX_WORLD

    if value is None:
        return None
    out = []
    for part in value.split(","):
        part = part.strip()
        try:
            number = parse_size(part) if option == "--hbm-caps" else int(part)
        except ValueError as exc:
            if option == "--hbm-caps":  # parse_size says why: not a size, not positive, too large
                raise ShardoptError(f"{option}: {part!r}: {exc} (give a comma-separated list, e.g. 40GB,80GB)") from None
            raise ShardoptError(f"{option}: {part!r} is not a whole number (give a comma-separated list, e.g."
                                " 8,16,32)") from None
        if number <= 0 or (option == "--world-sizes" and number > MAX_WORLD):
            raise ShardoptError(f"{option}: {part} is out of range (1 to {MAX_WORLD if option == '--world-sizes' else 'any size'})")
        if number not in out:
            out.append(number)
    return out


def _groups(value: str | None, workload, worlds: list[int]) -> list[int | None]:
    """``--group-sizes`` as sizes (every size each world allows, for 'all'), each checked against
    every world swept; [None] without the option."""
    from shardopt.core.parallelism import group_sizes, layout_error

    if value is None:
        return [None]
    topo, par = workload.topology, workload.parallelism
    inter = par.inter_host_allreduce if par is not None else False
    local = lambda world: min(topo.ranks_per_host, world)  # noqa: E731 (as a resized world has it)
    if value.strip() == "all":
        shared = set.intersection(*(set(group_sizes(w, local(w), inter)) for w in worlds))
        return sorted(shared)
    sizes = _sizes(value, "--group-sizes")
    for world in worlds:
        for size in sizes:
            reason = layout_error(world, local(world), size, inter)
            if reason is not None:
                raise ShardoptError(f"--group-sizes: {size} at {world} ranks: {reason}")
    return sorted(sizes)


def _of_this_sweep(path: Path, key: str) -> bool:
    import json

    try:
        return json.loads(path.read_text()).get("key") == key
    except (OSError, ValueError, AttributeError):
        return False


def _kept(output: Path, created: bool, total: int, key: str) -> str:
    """What an interrupted sweep leaves: its finished points (to resume from), or nothing at all
    (the folders it made, removed)."""
    from shardopt.planner.sweep import POINTS_DIR

    folder = output / POINTS_DIR
    kept = [p for p in sorted(folder.glob("w*.json")) if _of_this_sweep(p, key)] if folder.is_dir() else []
    if kept:
        return (f"kept {len(kept)} finished points of {total} in {folder}; run the same command again to resume"
                " (sweep.md, sweep.json and sweep.png were not written)")
    for path in (folder, output) if created else (folder,):
        try:
            path.rmdir()  # only if empty: nothing of this run's, nothing of the user's
        except OSError:
            pass
    return "no point had finished; nothing was written"


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--world-sizes", default=None,
              help="Comma-separated numbers of ranks, e.g. 8,16,32,64. Default with --group-sizes: the workload's.")
@click.option("--group-sizes", default=None,
              help="2D parallelism: comma-separated sharding group sizes to weigh, e.g. 32,64,128 (sync settings"
              " from the workload's parallelism block); 'all': every size the world allows.")
@click.option("--hbm-caps", default=None, help="Comma-separated HBM per rank, e.g. 40GB,80GB. Default: the workload's.")
@click.option("--target-step", type=FiniteFloat(0, 1e9, lo_open=True), default=None,
              help="A step in ms: name the smallest cluster whose plan meets it.")
@click.option("--jobs", type=click.IntRange(1, 256), default=None, help="Points planned at once. Default: the CPUs.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for sweep.md, sweep.json and sweep.png (and finished points, for a resumed sweep).")
@plan_config_options()
def sweep(workload: Path, world_sizes: str | None, group_sizes: str | None, hbm_caps: str | None,
          target_step: float | None, jobs: int | None, output: Path, config: PlanConfig) -> None:
    """Plan WORKLOAD at each world size (and HBM cap, and sharding group size): step, phases,
    headroom, scaling efficiency (with groups: the replicas' sync beside the group's step)."""
    import hashlib

    from tqdm import tqdm

    from shardopt.core.files import check_output, check_output_folder, write_atomic
    from shardopt.core.units import format_bytes
    from shardopt.core.workload import read_workload
    from shardopt.planner.sweep import sweep as run_sweep
    from shardopt.planner.sweep_report import group_png, sweep_json, sweep_png, sweep_table, verdict

    if world_sizes is None and group_sizes is None:
        raise ShardoptError("--world-sizes: give the world sizes to sweep (or --group-sizes)")
    caps = _sizes(hbm_caps, "--hbm-caps") or [None]
    inputs = [workload, model_path(config.cost_model)]
    check_output_folder(output, inputs=inputs)
    wl, sha = read_workload(workload)
    worlds = sorted(_sizes(world_sizes, "--world-sizes")) if world_sizes else [wl.topology.world_size]
    groups = _groups(group_sizes, wl, worlds)
    created = not output.exists()
    output.mkdir(exist_ok=True)
    for name in OUTPUTS:
        check_output(output / name, option="--output", inputs=inputs)
    key = hashlib.sha256(f"{sha}\n{config.to_json()}".encode()).hexdigest()
    total = len(worlds) * len(caps) * len(groups)
    try:
        with tqdm(total=total, desc="sweep", unit="point", file=sys.stderr, disable=None) as bar:
            points = run_sweep(wl, worlds, caps, config, output, jobs or os.cpu_count() or 1,
                               progress=lambda p: bar.update(1), key=key, groups=groups)
    except KeyboardInterrupt:
        raise Interrupted(_kept(output, created, total, key)) from None
    table = sweep_table(points, target_step)
    settings = {"workload": str(workload), "sha256": sha, "config": config.to_json(),
                "world_sizes": worlds, "hbm_caps": [c for c in caps if c is not None]}
    said = verdict(points, target_step)
    write_atomic(output / "sweep.md", f"# Sweep of {wl.name}\n\n{table}\n" + (f"\n{said}\n" if said else ""))
    write_atomic(output / "sweep.json", sweep_json(points, settings, target_step))
    if groups != [None]:
        group_png(points, f"{wl.name}: predicted step over sharding group sizes", output / "sweep.png")
    else:
        sweep_png(points, f"{wl.name}: predicted step over cluster sizes", target_step, output / "sweep.png")
    click.echo(table)
    if said:
        click.echo(said)
    shown = ", ".join(format_bytes(c) for c in caps if c is not None)
    click.echo(f"wrote {output}/sweep.md, sweep.json, sweep.png ({total} points{'; caps ' + shown if shown else ''})")
