"""shardopt sweep: a workload planned over cluster sizes and HBM caps (a table, its data, a plot)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from shardopt.cli.app import main
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
        except ValueError:
            raise ShardoptError(f"{option}: {part!r} is not a {'size' if option == '--hbm-caps' else 'whole number'}"
                                f" (give a comma-separated list, e.g. {'40GB,80GB' if option == '--hbm-caps' else '8,16,32'})") from None
        if number <= 0 or (option == "--world-sizes" and number > MAX_WORLD):
            raise ShardoptError(f"{option}: {part} is out of range (1 to {MAX_WORLD if option == '--world-sizes' else 'any size'})")
        if number not in out:
            out.append(number)
    return out


@main.command()
@click.argument("workload", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--world-sizes", required=True, help="Comma-separated numbers of ranks, e.g. 8,16,32,64.")
@click.option("--hbm-caps", default=None, help="Comma-separated HBM per rank, e.g. 40GB,80GB. Default: the workload's.")
@click.option("--target-step", type=FiniteFloat(0, 1e9, lo_open=True), default=None,
              help="A step in ms: name the smallest cluster whose plan meets it.")
@click.option("--jobs", type=click.IntRange(1, 256), default=None, help="Points planned at once. Default: the CPUs.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for sweep.md, sweep.json and sweep.png (and finished points, for a resumed sweep).")
@plan_config_options()
def sweep(workload: Path, world_sizes: str, hbm_caps: str | None, target_step: float | None, jobs: int | None,
          output: Path, config: PlanConfig) -> None:
    """Plan WORKLOAD at each world size (and HBM cap): step, phases, headroom, scaling efficiency."""
    import hashlib

    from tqdm import tqdm

    from shardopt.core.files import check_output, check_output_folder, write_atomic
    from shardopt.core.units import format_bytes
    from shardopt.core.workload import read_workload
    from shardopt.planner.sweep import sweep as run_sweep
    from shardopt.planner.sweep_report import sweep_json, sweep_png, sweep_table, verdict

    worlds = sorted(_sizes(world_sizes, "--world-sizes"))
    caps = _sizes(hbm_caps, "--hbm-caps") or [None]
    inputs = [workload, model_path(config.cost_model)]
    check_output_folder(output, inputs=inputs)
    output.mkdir(exist_ok=True)
    for name in OUTPUTS:
        check_output(output / name, option="--output", inputs=inputs)
    wl, sha = read_workload(workload)
    key = hashlib.sha256(f"{sha}\n{config.to_json()}".encode()).hexdigest()
    total = len(worlds) * len(caps)
    with tqdm(total=total, desc="sweep", unit="point", file=sys.stderr,
              disable=None) as bar:
        points = run_sweep(wl, worlds, caps, config, output, jobs or os.cpu_count() or 1,
                           progress=lambda p: bar.update(1), key=key)
    table = sweep_table(points, target_step)
    settings = {"workload": str(workload), "sha256": sha, "config": config.to_json(),
                "world_sizes": worlds, "hbm_caps": [c for c in caps if c is not None]}
    said = verdict(points, target_step)
    write_atomic(output / "sweep.md", f"# Sweep of {wl.name}\n\n{table}\n" + (f"\n{said}\n" if said else ""))
    write_atomic(output / "sweep.json", sweep_json(points, settings, target_step))
    sweep_png(points, f"{wl.name}: predicted step over cluster sizes", target_step, output / "sweep.png")
    click.echo(table)
    if said:
        click.echo(said)
    shown = ", ".join(format_bytes(c) for c in caps if c is not None)
    click.echo(f"wrote {output}/sweep.md, sweep.json, sweep.png ({total} points{'; caps ' + shown if shown else ''})")
