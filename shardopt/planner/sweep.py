"""What-if sweeps: one workload planned over cluster sizes and HBM caps, before anyone buys them.

Each point is the workload with its topology's ``world_size`` (and ``hbm_cap``) replaced, checked
as a workload file is (a pin to a rank the smaller cluster lacks is that point's reason), and
planned as ``shardopt plan`` would. Points plan in parallel processes; each finished point is kept
in the output folder, so an interrupted sweep resumes where it stopped. Scaling efficiency is weak
scaling (TorchRec's batch is per rank): the step of the smallest feasible world over this one's.
"""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Callable, Literal, Optional, Sequence

from pydantic import Field, Strict
from pydantic.dataclasses import dataclass as checked

from shardopt.contracts import Breakdown, PlanConfig
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.validation import STRICT
from shardopt.core.workload import MAX_WORLD, Workload, workload_from_dict, workload_to_dict

POINTS_DIR = "points"  # finished points, one JSON each: what a resumed sweep skips


@dataclass(frozen=True)
class SweepPoint:
    world_size: int
    hbm_cap: int
    feasible: bool
    reason: Optional[str] = None  # why no plan (infeasible, or the resized workload is not valid)
    step_ms: Optional[float] = None  # the critical path
    phases_ms: Optional[tuple[float, float, float, float]] = None  # each phase's slowest rank
    bottleneck_ms: Optional[float] = None
    headroom: Optional[float] = None  # 1 - the fullest rank's share of its HBM
    efficiency: Optional[float] = None  # weak scaling against the smallest feasible world (same cap)
    group_size: Optional[int] = None  # 2D: the sharding group's size (the plan is the group's)
    sync_ms: Optional[float] = None  # 2D: the replicas' sync per step, inside step_ms


def resized(workload: Workload, world: int, cap: Optional[int], group: Optional[int] = None) -> Workload:
    """The workload on ``world`` ranks (and ``cap`` bytes of HBM each; in sharding groups of
    ``group`` ranks, its parallelism block's other settings kept), checked as a file is."""
    data = workload_to_dict(workload)
    if group is not None:
        data["parallelism"] = {**data.get("parallelism", {}), "sharding_group_size": group}
    topo = data["topology"]
    local = topo.get("local_world_size")
    if local is not None and local > world:
        topo["local_world_size"] = world  # part of one host (a world that is not whole hosts is refused)
    topo["world_size"] = world
    if cap is not None:
        topo["hbm_cap"] = cap
    return workload_from_dict(data, f"{workload.name} at {world} ranks")


def plan_point(data: dict, world: int, cap: Optional[int], config_json: str, group: Optional[int] = None) -> SweepPoint:
    """One point, in a worker process (plain data in and out)."""
    from shardopt.arithmetic.checks import planned_workload
    from shardopt.planner.factory import plan_with, resolve_model

    base = workload_from_dict(data)
    shown_cap = cap if cap is not None else base.topology.hbm_cap
    where = f"{base.name} at {world} ranks" + (f" in groups of {group}" if group is not None else "")
    try:
        workload = resized(base, world, cap, group)
        config = PlanConfig.from_json(config_json)
        plan = plan_with(workload, config, cost_model=resolve_model(config, workload)[0], source=where)
    except ShardoptError as exc:
        return SweepPoint(world, shown_cap, False, reason=str(exc), group_size=group)
    from shardopt.arithmetic.memory import plan_memory

    workload = planned_workload(workload, plan)

    per_rank = plan.predicted.per_rank
    breakdown = Breakdown.of(per_rank)
    hbm, _ = plan_memory(workload, plan.tables)
    caps = workload.topology.rank_caps
    fullest = max((used / caps[r] for r, used in hbm.items()), default=0.0)
    phases = tuple(max(getattr(r, f) for r in per_rank)
                   for f in ("fwd_compute_ms", "fwd_comm_ms", "bwd_comm_ms", "bwd_compute_ms"))
    block = plan.parallelism
    return SweepPoint(world, shown_cap, True, step_ms=block.step_ms if block else breakdown.step_ms,
                      phases_ms=phases, bottleneck_ms=breakdown.bottleneck_ms, headroom=1.0 - fullest,  # type: ignore[arg-type]
                      group_size=block.sharding_group_size if block else group, sync_ms=block.sync_ms if block else None)


def sweep(workload: Workload, worlds: Sequence[int], caps: Sequence[Optional[int]], config: PlanConfig,
          folder: Path, jobs: int, progress: Optional[Callable[[SweepPoint], None]] = None,
          key: str = "", groups: Sequence[Optional[int]] = (None,)) -> list[SweepPoint]:
    """Every (world, cap, group size) point, planned in ``jobs`` processes; points already in
    ``folder`` for the same ``key`` (the workload's hash and the config) are read back, not
    planned again."""
    data = workload_to_dict(workload)
    kept = folder / POINTS_DIR
    done: dict[tuple[int, Optional[int], Optional[int]], SweepPoint] = {}
    todo = []
    grid = [(w, c, g) for w in worlds for c in caps for g in groups]
    for point_key in grid:
        old = _read_point(kept / _point_name(*point_key), key, point_key)
        if old is not None:
            done[point_key] = old
            if progress:
                progress(old)
        else:
            todo.append(point_key)
    if todo:
        kept.mkdir(parents=True, exist_ok=True)
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo)))) as pool:
            futures = {pool.submit(plan_point, data, w, c, config.to_json(), g): (w, c, g) for w, c, g in todo}
            try:
                for future in as_completed(futures):
                    point_key = futures[future]
                    point = future.result()
                    done[point_key] = point
                    _write_point(kept / _point_name(*point_key), point, key)
                    if progress:
                        progress(point)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    points = [done[k] for k in grid]
    return points if any(g is not None for g in groups) else with_efficiency(points)


def with_efficiency(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    out = []
    for point in points:
        same_cap = [p for p in points if p.hbm_cap == point.hbm_cap and p.feasible]
        base = min(same_cap, key=lambda p: p.world_size, default=None)
        eff = base.step_ms / point.step_ms if point.feasible and base and point.step_ms else None
        out.append(replace(point, efficiency=eff))
    return out


def smallest_meeting(points: Sequence[SweepPoint], target_ms: float) -> Optional[SweepPoint]:
    """The fewest ranks (then the least HBM) whose plan's step is within ``target_ms``."""
    meeting = [p for p in points if p.feasible and p.step_ms is not None and p.step_ms <= target_ms]
    return min(meeting, key=lambda p: (p.world_size, p.hbm_cap), default=None)


def _point_name(world: int, cap: Optional[int], group: Optional[int] = None) -> str:
    return f"w{world}-cap{cap if cap is not None else 'default'}" + (f"-g{group}" if group is not None else "") + ".json"


POINT_FORMAT, POINT_VERSION = "shardopt-sweep-point", 1
Ms = Optional[Annotated[float, Strict(), Field(ge=0, le=1e12, allow_inf_nan=False)]]


@checked(frozen=True, config=STRICT)
class _Point:
    """A finished point as its file holds it: strict and bounded."""

    world_size: Annotated[int, Strict(), Field(gt=0, le=MAX_WORLD)]
    hbm_cap: Annotated[int, Strict(), Field(gt=0, le=2**62)]
    feasible: Annotated[bool, Strict()]
    reason: Optional[Annotated[str, Strict(), Field(max_length=4096)]] = None
    step_ms: Ms = None
    phases_ms: Optional[tuple[Annotated[float, Strict(), Field(ge=0, le=1e12, allow_inf_nan=False)], ...]] = None
    bottleneck_ms: Ms = None
    headroom: Optional[Annotated[float, Strict(), Field(ge=-1e6, le=1, allow_inf_nan=False)]] = None
    efficiency: Optional[Annotated[float, Strict(), Field(ge=0, le=1e6, allow_inf_nan=False)]] = None
    group_size: Optional[Annotated[int, Strict(), Field(gt=0, le=MAX_WORLD)]] = None
    sync_ms: Ms = None

    def __post_init__(self) -> None:
        if self.phases_ms is not None and len(self.phases_ms) != 4:
            raise ValueError("phases_ms: the four phases' slowest ranks (fwd comp, fwd comm, bwd comp, bwd comm)")


@checked(frozen=True, config=STRICT)
class _PointFile:
    format: Literal["shardopt-sweep-point"]
    version: Literal[1]
    key: Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{0,64}$")]
    point: _Point


def _read_point(path: Path, key: str, expected: tuple[int, Optional[int], Optional[int]]) -> Optional[SweepPoint]:
    """A finished point of this sweep (``key``: the workload's hash and the config), or None where
    none is kept or the file is another sweep's (planned again). A file of this sweep that is not
    a point (edited, from another shardopt) is refused naming the file and field: its figures would
    enter the table unchecked."""
    from shardopt.core.loaders import load_json
    from shardopt.core.validation import validate_as

    if not path.is_file():
        return None
    data = load_json(path, "sweep point")
    if isinstance(data, dict) and data.get("key") != key and isinstance(data.get("key"), str):
        return None  # another sweep's point (another workload or config): planned again
    hint = f" (delete {path} to plan the point again)"
    if not isinstance(data, dict) or data.get("format") != POINT_FORMAT:
        raise ShardoptError(f"{path}: format: not a shardopt sweep point{hint}")
    if data.get("version") != POINT_VERSION or isinstance(data.get("version"), bool):
        raise ShardoptError(f"{path}: version: this shardopt reads sweep points of version {POINT_VERSION},"
                            f" got {data.get('version')!r}{hint}")
    point = validate_as(_PointFile, data, str(path)).point
    world, cap, group = expected
    if point.world_size != world or (cap is not None and point.hbm_cap != cap) or point.group_size != group:
        raise ShardoptError(f"{path}: point: holds world {point.world_size}, cap {point.hbm_cap}, group"
                            f" {point.group_size}, not the point its name says{hint}")
    return SweepPoint(**{f: getattr(point, f) for f in SweepPoint.__dataclass_fields__})


def _write_point(path: Path, point: SweepPoint, key: str) -> None:
    from shardopt.core.files import write_atomic

    write_atomic(path, json.dumps({"format": POINT_FORMAT, "version": POINT_VERSION, "key": key,
                                   "point": asdict(point)}, sort_keys=True))


def check_worlds(worlds: Sequence[int]) -> None:
    if not worlds:
        raise ShardoptError("--world-sizes: name at least one world size", kind=ErrorKind.INPUT)
