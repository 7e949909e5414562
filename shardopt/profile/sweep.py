"""Sweep presets and the resumable loop that measures them into a profile dataset.

Presets (``unit`` for tests, ``smoke`` for a two-minute check, ``full`` for the dataset that trains the
default model, ``calibrate`` for ``shardopt calibrate``: a few points that pin the model's terms,
then rank-shaped ones until a time budget ends) are deterministic lists of points given a seed.
Each point is appended to the dataset as soon as it is measured; a rerun measures only the
points it does not find.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import numpy as np

from shardopt import __version__
from shardopt.core.errors import check_interrupted
from shardopt.profile.comm import PATTERNS, CommPoint
from shardopt.profile.points import (
    cap_elements, cap_lookups, dense_points, random_table, rank_like_points, table_spec, tbe_spec,
)
from shardopt.profile.dataset import (
    DATASET_FORMAT,
    ProfileDataset,
    machine_metadata,
    point_key,
    tables_of,
)

PRESETS = ("unit", "smoke", "full", "calibrate", "workload", "probe")
# Rank-shaped fused points in the full CPU preset: planning compares ranks, so the model must
# know how a rank's shards slow each other down, not only how tables cost alone.
RANK_POINTS = 1000
PIN_POINTS = 24  # calibrate's single tables at the corners the model's terms separate
# Data-parallel replicas' kernels in the full preset: another algorithm (a dense gradient, a step
# over every row), which the fused points say nothing about.
DENSE_POINTS = 240
CALIBRATE_RANK_POINTS = 2000  # more than any budget measures: the budget decides how many
DATASET_VERSION = 1


@dataclass(frozen=True)
class Sweep:
    """What one preset measures on one device."""

    preset: str
    tbe: list[dict]
    comm: dict[int, list[CommPoint]]
    warmup: int
    iters: int
    comm_warmup: int = 3
    comm_iters: int = 10
    notes: list[str] = field(default_factory=list)
    comm_first: bool = False  # a budgeted sweep measures its few comm points before the open-ended kernels


def build_sweep(preset: str, device: str, seed: int = 0, backend: str = "fbgemm",
                kernels: list[dict] | None = None) -> Sweep:
    """``kernels``: the points a ``workload`` preset measures after calibrate's pins (a workload's
    own shapes, :mod:`shardopt.planner.workload_points`)."""
    on_cuda = device.startswith("cuda")
    rng = np.random.default_rng(seed)
    if preset == "probe":  # calibrate --probe: the pins (and given kernels) briefly, no comm
        generic = _calibrate_sweep(rng, on_cuda)
        return Sweep("probe", generic.tbe[:PIN_POINTS] + list(kernels or ()), {}, warmup=1, iters=4)
    if preset == "workload":
        generic = _calibrate_sweep(rng, on_cuda)
        return Sweep("workload", generic.tbe[:PIN_POINTS] + list(kernels or ()), generic.comm,
                     warmup=generic.warmup, iters=generic.iters, comm_warmup=generic.comm_warmup,
                     comm_iters=generic.comm_iters, comm_first=True)
    zipf = {"distribution": "zipf", "alpha": 1.05}
    uniform = {"distribution": "uniform"}
    if preset == "unit":
        tbe = [
            tbe_spec([table_spec(2000, 16, 4, uniform)], 256),
            tbe_spec([table_spec(5000, 32, 8, zipf)], 256),
            tbe_spec([table_spec(1000 * (i + 1), 16 * (i + 1), 2 + i, zipf) for i in range(4)], 256),
        ]
        return Sweep(preset, tbe, {2: [CommPoint(2, 65536, "even")]}, warmup=1, iters=3,
                     comm_warmup=1, comm_iters=3)
    if preset == "smoke":
        tbe = [
            tbe_spec([table_spec(rows, dim, pooling, access)], 1024)
            for rows in (20_000, 200_000)
            for dim in (32, 128)
            for pooling in (2, 16)
            for access in (uniform, zipf)
        ]
        for n in (4, 6, 8, 8):
            tables = [random_table(rng, 4_000_000, 2e5) for _ in range(n)]
            cap_lookups(tables, 1024, 2e5)
            tbe.append(tbe_spec(tables, 1024))
        sizes = (4096, 262_144, 4_194_304)
        comm = {w: [CommPoint(w, s, p) for s in sizes for p in PATTERNS] for w in (2, 4)}
        return Sweep(preset, tbe, comm, warmup=1, iters=3, comm_warmup=2, comm_iters=5)
    if preset == "calibrate":
        return _calibrate_sweep(rng, on_cuda)
    if preset == "full":
        max_elems = 2**28 if on_cuda else 2**24
        max_rows = 2e7 if on_cuda else 2e6
        max_lookups = 2e7 if on_cuda else 4e5
        batches = (2048, 8192, 32768) if on_cuda else (512, 2048, 4096, 8192)
        precisions = ("fp32", "fp16", "bf16") if on_cuda else ("fp32", "fp16")
        locations = ("hbm", "uvm", "uvm_caching") if on_cuda and backend == "fbgemm" else ("hbm",)
        tbe = []
        for _ in range(320):
            table = random_table(rng, max_elems, max_rows)
            batch = int(rng.choice(batches))
            cap_lookups([table], batch, max_lookups)
            precision = precisions[0] if rng.random() < 0.7 else str(rng.choice(precisions[1:]))
            location = locations[0] if rng.random() < 0.7 else str(rng.choice(locations))
            tbe.append(tbe_spec([table], batch, precision, location))
        for _ in range(200):
            n = int(rng.integers(2, 17))
            tables = [random_table(rng, max_elems, max_rows) for _ in range(n)]
            cap_elements(tables, 4 * max_elems)
            batch = int(rng.choice(batches))
            cap_lookups(tables, batch, max_lookups * 4)  # a replayed CPU rank sees ~1M lookups
            tbe.append(tbe_spec(tables, batch, precisions[0] if rng.random() < 0.8 else precisions[1]))
        if not on_cuda:
            tbe.extend(rank_like_points(rng, RANK_POINTS, max_elems * 4, max_lookups * 4))
        # Drawn apart, so the points above (and a profile holding them) stay as they were.
        tbe.extend(dense_points(np.random.default_rng([seed, 1]), DENSE_POINTS, max_elems // 2, max_lookups))
        sizes = tuple(int(2**k) for k in range(10, 25, 2))  # 1 KiB .. 16 MiB
        comm = {} if on_cuda else {w: [CommPoint(w, s, p) for s in sizes for p in PATTERNS] for w in (2, 4, 8)}
        notes = (
            ["all-to-all not measured: NCCL needs several GPUs; run under torchrun --nproc-per-node N"]
            if on_cuda
            else []
        )
        # Replay's repetitions: the model learns from points as steady as the ones it is judged on.
        return Sweep(preset, tbe, comm, warmup=3, iters=10, notes=notes)
    raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")


def _calibrate_sweep(rng: np.random.Generator, on_cuda: bool) -> Sweep:
    """Points that pin the model's terms, then rank-shaped ones, in the order a budget takes them.

    One table alone at each corner of what the terms separate (rows that fit the caches or not,
    narrow and wide rows, few and many lookups, flat and skewed access) fixes the per-byte and
    per-lookup costs; rank-shaped kernels (several tables fused, as a plan puts them on a rank)
    then teach how shards on one rank slow each other down, which is what planning compares.
    """
    zipf = {"distribution": "zipf", "alpha": 1.05}
    uniform = {"distribution": "uniform"}
    big = 20_000_000 if on_cuda else 2_000_000
    batch = 8192 if on_cuda else 2048
    pins = [
        tbe_spec([table_spec(rows, dim, pooling, access)], batch)
        for rows in (20_000, big)
        for dim in (16, 64, 256)
        for pooling in (1, 20)
        for access in (uniform, zipf)
    ]
    for table in (t for p in pins for t in p["tables"]):  # a CPU rank's lookups, as replay sees them
        cap_lookups([table], batch, 2e7 if on_cuda else 4e5)
    max_elems, max_lookups = (2**28, 8e7) if on_cuda else (2**26, 1.6e6)
    assert len(pins) == PIN_POINTS
    ranks = rank_like_points(rng, CALIBRATE_RANK_POINTS, max_elems, max_lookups)
    sizes = (4096, 262_144, 4_194_304)
    comm = {} if on_cuda else {w: [CommPoint(w, s, p) for s in sizes for p in PATTERNS] for w in (2, 4)}
    return Sweep("calibrate", pins + ranks, comm, warmup=2, iters=6, comm_warmup=2, comm_iters=5,
                 comm_first=True)


def comm_sizes(sweep: Sweep) -> list[int]:
    """The message sizes a preset measures, whatever the world size."""
    return sorted({p.message_bytes for points in sweep.comm.values() for p in points}) or [
        int(2**k) for k in range(10, 25, 2)
    ]


def comm_spec(point: CommPoint) -> dict:
    return {"kind": "a2a", "world_size": point.world_size, "message_bytes": point.message_bytes,
            "pattern": point.pattern}


@dataclass
class SweepResult:
    measured: int
    skipped: int
    seconds: float


def _manifest(sweep: Sweep, seed: int, backend: str, device: str, meta: dict) -> dict:
    from shardopt.profile.tbe import DISTINCT_BATCHES

    return {
        "format": DATASET_FORMAT,
        "version": DATASET_VERSION,
        "preset": sweep.preset,
        "seed": seed,
        "backend": backend,
        "threads_per_rank": 1 if device == "cpu" else None,
        "distinct_batches": DISTINCT_BATCHES,  # a new batch each timed iteration, in turn
        "shardopt": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "notes": sweep.notes,
        **meta,
    }


def run_sweep(
    folder: str,
    *,
    preset: str,
    device: str = "cpu",
    backend: str = "auto",
    seed: int = 0,
    progress: bool | None = None,
    on_point: Callable[[dict], None] | None = None,
    deadline: float | None = None,
    kernels: list[dict] | None = None,
) -> SweepResult:
    """Measure every point of the preset that the dataset at ``folder`` does not hold yet, or,
    with a ``deadline`` (``time.perf_counter()``), the kernel points that fit before it."""
    import torch
    from tqdm import tqdm

    from shardopt.profile.comm import spawn_all_to_all
    from shardopt.profile.kernels import resolve_backend
    from shardopt.profile.tbe import measure_tables, timing_dict

    from shardopt.profile.comm import launched_by_torchrun

    if launched_by_torchrun():
        return _run_launched_comm(folder, preset=preset, device=device, seed=seed)
    backend = resolve_backend(backend)
    sweep = build_sweep(preset, device, seed, backend, kernels)
    meta = machine_metadata(device)
    dataset = ProfileDataset(folder)
    dataset.start(_manifest(sweep, seed, backend, device, meta))
    done = dataset.done_keys()
    if device == "cpu":
        torch.set_num_threads(1)  # a CPU rank is one intra-op thread; ranks share the host's cores
    tbe_todo = [s for s in sweep.tbe if point_key(s) not in done]
    comm_todo = {
        w: [p for p in pts if point_key(comm_spec(p)) not in done] for w, pts in sweep.comm.items()
    }
    total = len(sweep.tbe) + sum(len(p) for p in sweep.comm.values())
    todo = len(tbe_todo) + sum(len(p) for p in comm_todo.values())
    started = time.perf_counter()
    with tqdm(total=total, initial=total - todo, desc=f"profile {preset}", unit="pt",
              disable=None if progress is None else not progress) as bar:

        def measure_comm() -> None:
            for world, points in comm_todo.items():
                if not points:
                    continue
                for m in spawn_all_to_all(world, points, warmup=sweep.comm_warmup, iters=sweep.comm_iters):
                    record = _comm_record(m, meta["device"])
                    dataset.append(record)
                    if on_point:
                        on_point(record)
                    bar.update()
                    check_interrupted()

        if sweep.comm_first:
            measure_comm()
        for spec in tbe_todo:
            if deadline is not None and time.perf_counter() >= deadline:
                break
            m = measure_tables(
                tables_of(spec), spec["batch"], backend=backend, device=device,
                precision=spec["precision"], location=spec["location"],
                warmup=sweep.warmup, iters=sweep.iters, seed=seed, dense=spec.get("kernel") == "dense",
            )
            record = {
                **spec, "key": point_key(spec), "backend": m.backend, "device": meta["device"],
                "fwd": timing_dict(m.fwd), "bwd": timing_dict(m.bwd),
                "lookups": m.lookups, "unique_rows": list(m.unique_rows),
            }
            dataset.append(record)
            if on_point:
                on_point(record)
            bar.update()
            check_interrupted()
        if not sweep.comm_first:
            measure_comm()
    return SweepResult(len(dataset.done_keys() - done), total - todo, time.perf_counter() - started)


def _comm_record(m, device: str) -> dict:
    from shardopt.profile.comm import measurement_to_dict

    spec = comm_spec(m.point)
    return {**spec, "key": point_key(spec), "backend": m.backend, "device": device,
            "timing": measurement_to_dict(m)["timing"]}


def _run_launched_comm(folder: str, *, preset: str, device: str, seed: int) -> SweepResult:
    """Under torchrun: every rank joins the launcher's group; rank 0 records the all-to-alls."""
    import torch.distributed as dist

    from shardopt.profile.comm import init_from_launcher, run_all_to_all

    started = time.perf_counter()
    local_device = init_from_launcher(device)
    try:
        world, rank = dist.get_world_size(), dist.get_rank()
        sweep = build_sweep(preset, device, seed)
        points = [CommPoint(world, size, p) for size in comm_sizes(sweep) for p in PATTERNS]
        dataset = ProfileDataset(folder)
        if rank == 0:
            manifest = {
                "format": DATASET_FORMAT, "version": DATASET_VERSION, "preset": preset,
                "seed": seed, "backend": dist.get_backend(), "shardopt": __version__,
                "launcher": "torchrun", **machine_metadata(local_device),
            }
            dataset.start(manifest)
        done = dataset.done_keys() if rank == 0 else set()
        flags = [point_key(comm_spec(p)) in done for p in points]
        shared = [flags]
        dist.broadcast_object_list(shared, src=0)  # every rank must run the same collectives
        todo = [p for p, skip in zip(points, shared[0]) if not skip]
        measured = run_all_to_all(todo, device=local_device, warmup=sweep.comm_warmup,
                                  iters=sweep.comm_iters)
        if rank == 0:
            for m in measured:
                dataset.append(_comm_record(m, "cuda" if device.startswith("cuda") else "cpu"))
        return SweepResult(len(todo), len(points) - len(todo), time.perf_counter() - started)
    finally:
        dist.destroy_process_group()
