"""All-to-all over message sizes and world sizes: gloo on CPUs, NCCL on GPUs.

Two patterns: ``even`` (all_to_all_single with equal splits) and ``pooled`` (TorchRec's
pooled-embedding exchange: rank r sends its ``dims[r]`` columns for each peer's local batch, so the
splits are uneven). A collective's time is the slowest rank's. A single-host CPU sweep spawns its
own gloo ranks on loopback; under ``torchrun`` the launcher's process group is used, across hosts too.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from shardopt.profile.timing import Timing

PATTERNS = ("even", "pooled")
FLOAT_BYTES = 4


@dataclass(frozen=True)
class CommPoint:
    """One all-to-all to time: ``message_bytes`` is what each rank sends in total."""

    world_size: int
    message_bytes: int
    pattern: str


@dataclass(frozen=True)
class CommMeasurement:
    point: CommPoint
    backend: str
    timing: Timing


def _splits(point: CommPoint, rank: int) -> tuple[list[int], list[int]]:
    """Elements rank sends to / receives from each peer."""
    world = point.world_size
    total = max(world, point.message_bytes // FLOAT_BYTES)
    if point.pattern == "even":
        each = total // world
        return [each] * world, [each] * world
    # pooled: rank r owns dims in proportion 1..world (a typical uneven plan), batch split evenly
    weights = np.arange(1, world + 1, dtype=np.float64)
    per_rank = np.maximum(1, np.round(total * weights / weights.mean())).astype(int) // world
    return [int(per_rank[rank])] * world, [int(per_rank[q]) for q in range(world)]


def run_all_to_all(
    points: Sequence[CommPoint], *, device: str, warmup: int, iters: int
) -> list[CommMeasurement]:
    """Time each point in the current process group; every rank returns the same numbers."""
    rank = dist.get_rank()
    dev = torch.device(device)
    backend = dist.get_backend()
    out = []
    for point in points:
        send, recv = _splits(point, rank)
        inp = torch.ones(sum(send), device=dev)
        res = torch.empty(sum(recv), device=dev)
        samples = []
        for i in range(warmup + iters):
            dist.barrier()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_to_all_single(res, inp, recv, send)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                samples.append(time.perf_counter() - t0)
        slowest = torch.tensor(samples, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a collective ends with its slowest rank
        out.append(CommMeasurement(point, backend, Timing.of(slowest.tolist())))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned_rank(rank: int, world: int, port: int, points, warmup, iters, result_path) -> None:
    import signal

    # Ctrl-C reaches the whole process group: the parent stops the workers (SIGTERM), so that one
    # line is printed, not a traceback per worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}"
    )
    try:
        measured = run_all_to_all(points, device="cpu", warmup=warmup, iters=iters)
        if rank == 0:
            with open(result_path, "w") as handle:
                json.dump([measurement_to_dict(m) for m in measured], handle)
    finally:
        dist.destroy_process_group()


def spawn_all_to_all(
    world_size: int, points: Sequence[CommPoint], *, warmup: int = 3, iters: int = 10
) -> list[CommMeasurement]:
    """Spawn ``world_size`` gloo ranks on this host and time the points there."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        context = mp.spawn(
            _spawned_rank,
            args=(world_size, free_port(), list(points), warmup, iters, path),
            nprocs=world_size,
            join=False,
        )
        try:
            while not context.join():
                pass
        except BaseException:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
            for process in context.processes:
                process.join(5)
            raise
        with open(path) as handle:
            return [measurement_from_dict(d) for d in json.load(handle)]


def launched_by_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or (
        "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ
    )


def init_from_launcher(device: str) -> str:
    """Join the launcher's process group: NCCL on GPUs (one per local rank), gloo on CPUs."""
    if device.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        return f"cuda:{local}"
    dist.init_process_group("gloo")
    return "cpu"


def measurement_to_dict(m: CommMeasurement) -> dict:
    return {"point": asdict(m.point), "backend": m.backend, "timing": asdict(m.timing)}


def measurement_from_dict(d: dict) -> CommMeasurement:
    return CommMeasurement(CommPoint(**d["point"]), d["backend"], Timing(**d["timing"]))
