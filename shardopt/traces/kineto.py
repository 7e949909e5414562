"""A training job's torch.profiler (Kineto) traces, read into each rank's phases per step.

Read from Chrome-trace JSON as ``torch.profiler`` exports it (``export_chrome_trace``, or its
``tensorboard_trace_handler``; gzip too): one file per rank (``distributedInfo.rank``), or one file
holding a JSON list of such traces. Steps are the ``ProfilerStep#N`` spans a profiling schedule
marks. In each step:

- the embedding lookups: FBGEMM's TBE forward and backward ops on CPU, its kernels on CUDA (names
  below, from the installed FBGEMM's registrations and its kernel templates), and the dense kernel
  TorchRec gives data-parallel tables;
- the collectives: each one's execution (gloo's ``gloo:all_to_all`` spans on its worker threads,
  NCCL's kernels on a GPU stream) matched in order to the op that enqueued it (``c10d::alltoall_base_``
  and friends on the training thread), which says whether it belongs to the forward (TorchRec's
  input and output all-to-alls) or the backward (the pooled gradients' all-to-all, DDP's all-reduce
  of data-parallel tables): the backward starts at the step's first autograd engine call.

A collective's span includes the time its rank waits for the slowest peer; ``transfer`` keeps the
shortest span among the ranks of each collective, which is closest to the link's own time.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from shardopt.core.errors import ShardoptError

# FBGEMM's TBE, as the installed fbgemm_gpu registers its CPU ops (``fbgemm::...``, checked against
# the registrations in the tests) and as FBGEMM's CUDA templates name their kernels
# (fbgemm_gpu/codegen/training/forward/embedding_forward_split_kernel_template.cu,
# ..._kernel_v2_template.cu, ..._kernel_nobag_small_template.cu; backward/
# embedding_backward_split_kernel_cta_template.cu and _warp_template.cu): the leaf op or the main
# kernels only, so a wrapper around them is not counted twice. On CUDA the backward's sorting
# kernels are not counted: the two kernels named here are its lookups and optimizer update.
TBE_FORWARD = re.compile(
    r"^fbgemm::split_embedding(_nobag)?_codegen_forward_\w*cpu$"
    r"|(split|dense|ssd)_embedding(_nobag)?_codegen_forward_(un)?weighted(_vbe)?(_v2|_small)?_kernel"
)
TBE_BACKWARD = re.compile(
    r"^fbgemm::split_embedding(_nobag)?_backward_codegen_\w+_cpu$"
    r"|(split|dense|ssd)_embedding(_nobag)?_backward_codegen_\w+_kernel_(cta|warp)_per_row"
)
# TorchRec's data-parallel tables: FBGEMM's dense TBE (DenseTableBatchedEmbeddingBagsCodegen).
DENSE_FORWARD = re.compile(r"^fbgemm::dense_embedding_codegen_lookup_function$")
DENSE_BACKWARD = re.compile(r"^autograd::engine::evaluate_function: .*SplitLookupFunction_Dense_Op>$")
BACKWARD_START = "autograd::engine::evaluate_function"
# Collectives: the op the training thread enqueues, and the span that executes it.
ENQUEUE = {
    "c10d::alltoall_base_": "all_to_all", "c10d::alltoall_": "all_to_all",
    "c10d::allreduce_": "all_reduce", "c10d::reduce_scatter_": "reduce_scatter",
    "c10d::_reduce_scatter_base_": "reduce_scatter", "c10d::allgather_": "all_gather",
    "c10d::_allgather_base_": "all_gather",
}
EXECUTE = (
    (re.compile(r"^gloo:all_to_all"), "all_to_all"),
    (re.compile(r"^gloo:all_reduce"), "all_reduce"),
    (re.compile(r"^gloo:reduce_scatter"), "reduce_scatter"),
    (re.compile(r"^gloo:all_gather"), "all_gather"),
    # NCCL runs an all-to-all as grouped sends and receives (ncclDevKernel_SendRecv).
    (re.compile(r"^nccl(Dev)?Kernel_SendRecv"), "all_to_all"),
    (re.compile(r"^nccl(Dev)?Kernel_AllReduce"), "all_reduce"),
    (re.compile(r"^nccl(Dev)?Kernel_ReduceScatter"), "reduce_scatter"),
    (re.compile(r"^nccl(Dev)?Kernel_AllGather"), "all_gather"),
)
STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Collective:
    kind: str  # all_to_all, all_reduce, reduce_scatter, all_gather
    phase: str  # fwd or bwd
    ms: float
    sent_bytes: Optional[float] = None  # what this rank sends its peers (all-to-all, with record_shapes)


# Bytes per element of the tensor types torch.profiler's record_shapes writes ("Input type").
ELEMENT_BYTES = {"float": 4, "double": 8, "long int": 8, "int": 4, "short int": 2, "c10::Half": 2,
                 "c10::BFloat16": 2, "signed char": 1, "unsigned char": 1, "bool": 1}


@dataclass(frozen=True)
class TracedStep:
    """One rank's step: lookup and collective milliseconds per phase, and each collective."""

    number: int
    step_ms: float  # the ProfilerStep span: the step as the job took it
    fwd_compute_ms: float
    bwd_compute_ms: float
    lookups: int  # TBE forward calls (a rank with no sharded table has none)
    collectives: tuple[Collective, ...]


@dataclass(frozen=True)
class RankTrace:
    rank: int
    world_size: int
    source: str
    device: str  # cpu or cuda (a trace with GPU kernels)
    steps: tuple[TracedStep, ...]


class TraceError(ShardoptError):
    """A trace that cannot be read as a training job's (exit 2, one line)."""


def read_traces(paths: Sequence[str | Path]) -> list[RankTrace]:
    """Every rank's trace in ``paths``, sorted by rank; a rank twice is refused."""
    out: dict[int, RankTrace] = {}
    for path in paths:
        for where, data in _documents(Path(path)):
            trace = _rank_trace(data, where)
            if trace.rank in out:
                raise TraceError(f"{where}: rank {trace.rank} again (also in {out[trace.rank].source})")
            out[trace.rank] = trace
    return [out[r] for r in sorted(out)]


def _documents(path: Path) -> list[tuple[str, dict]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except (OSError, EOFError, ValueError) as exc:
        raise TraceError(f"{path}: not a Chrome-trace JSON file (truncated or foreign: {_first(exc)})") from None
    if isinstance(data, list):
        if not data or not all(isinstance(d, dict) for d in data):
            raise TraceError(f"{path}: a list, but not of traces (objects with traceEvents)")
        return [(f"{path}[{i}]", d) for i, d in enumerate(data)]
    if not isinstance(data, dict):
        raise TraceError(f"{path}: not a Chrome-trace JSON file (no traceEvents)")
    return [(str(path), data)]


def _first(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _rank_trace(data: dict, where: str) -> RankTrace:
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise TraceError(f"{where}: traceEvents: missing (not a torch.profiler trace)")
    info = data.get("distributedInfo")
    if not isinstance(info, dict) or not isinstance(info.get("rank"), int) or not isinstance(info.get("world_size"), int):
        raise TraceError(f"{where}: distributedInfo.rank: missing (profile inside the initialised process group,"
                         " as torch.profiler records it then)")
    rank, world = info["rank"], info["world_size"]
    if not 0 <= rank < world:
        raise TraceError(f"{where}: distributedInfo.rank: {rank} is outside world_size {world}")
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str)
             and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    device = "cuda" if any(e.get("cat") == "kernel" for e in spans) else "cpu"
    steps = _steps(spans, device, where, rank, world)
    if not any(s.lookups for s in steps) and not any(s.collectives for s in steps):
        raise TraceError(f"{where}: no TBE (FBGEMM embedding) events and no collectives in any step:"
                         " not a trace of a TorchRec training step")
    return RankTrace(rank, world, where, device, tuple(steps))


def _steps(spans: list[dict], device: str, where: str, rank: int, world: int) -> list[TracedStep]:
    marks = sorted((e for e in spans if STEP.match(e["name"]) and e.get("cat") != "gpu_user_annotation"),
                   key=lambda e: e["ts"])
    if not marks:
        raise TraceError(f"{where}: no ProfilerStep#N spans: profile with torch.profiler.profile(schedule=...)"
                         " and call prof.step() once per training step")
    starts = [m["ts"] for m in marks] + [float("inf")]
    # A GPU kernel belongs to the step whose CPU side launched it (Kineto's correlation id).
    launched = {e["args"]["correlation"]: e["ts"] for e in spans
                if e.get("cat") == "cuda_runtime" and isinstance(e.get("args"), dict) and "correlation" in e["args"]}

    def when(e: dict) -> float:
        if e.get("cat") == "kernel" and isinstance(e.get("args"), dict):
            return launched.get(e["args"].get("correlation"), e["ts"])
        return e["ts"]

    buckets: list[list[dict]] = [[] for _ in marks]
    for e in spans:
        i = bisect.bisect_right(starts, when(e)) - 1  # the last step started at or before it
        if 0 <= i < len(marks):
            buckets[i].append(e)
    return [_step(int(STEP.match(m["name"]).group(1)), m["dur"] / 1e3, b, rank, world) for m, b in zip(marks, buckets)]


def sent_bytes(event: dict, rank: int, world: int) -> Optional[float]:
    """What an all-to-all enqueue (``c10d::alltoall_base_(output, input, out_splits, in_splits, ...)``,
    recorded with shapes) sends to the other ranks: its input's rows for them times a row's bytes."""
    args = event.get("args")
    try:
        dims, kind = args["Input Dims"][1], args["Input type"][1]
        size = ELEMENT_BYTES[kind]
        numel = 1
        for d in dims:
            numel *= int(d)
        splits = json.loads(args.get("Concrete Inputs", [""] * 5)[4] or "[]")
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    if not dims or int(dims[0]) == 0:
        return 0.0
    row = numel / int(dims[0]) * size
    if not splits:  # an even split: a world-th of the rows stays here
        return float(numel * size * (world - 1) / world)
    if len(splits) != world or not 0 <= rank < world:
        return None
    return float((sum(splits) - splits[rank]) * row)


def _step(number: int, step_ms: float, events: list[dict], rank: int = 0, world: int = 1) -> TracedStep:
    backward = min((e["ts"] for e in events if e["name"].startswith(BACKWARD_START)), default=float("inf"))
    fwd = sum(e["dur"] for e in events if TBE_FORWARD.search(e["name"]) or DENSE_FORWARD.search(e["name"]))
    bwd = sum(e["dur"] for e in events if TBE_BACKWARD.search(e["name"]) or DENSE_BACKWARD.search(e["name"]))
    lookups = sum(1 for e in events if TBE_FORWARD.search(e["name"]))
    enqueued = sorted((e for e in events if e["name"] in ENQUEUE), key=lambda e: e["ts"])
    executed = sorted(((e, kind) for e in events for pattern, kind in EXECUTE if pattern.search(e["name"])),
                      key=lambda x: x[0]["ts"])
    collectives = []
    by_kind: dict[str, list[dict]] = {}
    for e in enqueued:
        by_kind.setdefault(ENQUEUE[e["name"]], []).append(e)
    seen: dict[str, int] = {}
    for e, kind in executed:
        i = seen.get(kind, 0)
        seen[kind] = i + 1
        queued = by_kind.get(kind, [])
        # In order per kind, a collective's enqueue says its phase; without one, its own start.
        at = queued[i]["ts"] if i < len(queued) else e["ts"]
        sent = sent_bytes(queued[i], rank, world) if i < len(queued) and kind == "all_to_all" else None
        collectives.append(Collective(kind, "fwd" if at < backward else "bwd", e["dur"] / 1e3, sent))
    return TracedStep(number, step_ms, fwd / 1e3, bwd / 1e3, lookups, tuple(collectives))


@dataclass(frozen=True)
class MeasuredRank:
    """A rank's medians over the kept steps: lookups per pass, and collectives per phase, both as
    the rank saw them (``*_comm_ms``, waits included) and as the fastest rank of each saw them."""

    rank: int
    step_ms: float
    fwd_compute_ms: float
    bwd_compute_ms: float
    fwd_comm_ms: float
    bwd_comm_ms: float
    fwd_transfer_ms: float
    bwd_transfer_ms: float
    steps: int

    @property
    def compute_ms(self) -> float:
        return self.fwd_compute_ms + self.bwd_compute_ms


def _kept_steps(traces: Sequence[RankTrace], warmup: int) -> tuple[list[int], dict[int, dict[int, TracedStep]]]:
    """The step numbers every rank holds, less the first ``warmup``, and each rank's steps by number."""
    numbers = set.intersection(*(set(s.number for s in t.steps) for t in traces)) if traces else set()
    kept = sorted(numbers)[warmup:]
    if not kept:
        most = min((len(t.steps) for t in traces), default=0)
        raise TraceError(f"{traces[0].source if traces else 'traces'}: {most} step(s) shared by every rank,"
                         f" none left after the {warmup} warm-up step(s) (--warmup)")
    return kept, {t.rank: {s.number: s for s in t.steps} for t in traces}


def measured_ranks(traces: Sequence[RankTrace], warmup: int = 2) -> list[MeasuredRank]:
    """Each rank's medians over its steps after the first ``warmup`` (the steps all ranks share)."""
    kept, steps = _kept_steps(traces, warmup)
    fastest_of = {n: _fastest([per_rank[n] for per_rank in steps.values()]) for n in kept}
    out = []
    for t in traces:
        rows = []
        for n in kept:
            step, fastest = steps[t.rank][n], fastest_of[n]
            rows.append((
                step.step_ms, step.fwd_compute_ms, step.bwd_compute_ms,
                sum(c.ms for c in step.collectives if c.phase == "fwd"),
                sum(c.ms for c in step.collectives if c.phase == "bwd"),
                sum(fastest[i] for i, c in enumerate(step.collectives) if c.phase == "fwd"),
                sum(fastest[i] for i, c in enumerate(step.collectives) if c.phase == "bwd"),
            ))
        medians = [statistics.median(col) for col in zip(*rows)]
        out.append(MeasuredRank(t.rank, *medians, steps=len(kept)))
    return out


def _fastest(steps: Sequence[TracedStep]) -> list[float]:
    """Per position in a step's collectives (every rank runs them in the same order), the
    shortest span over the ranks that ran it."""
    best: list[float] = []
    for step in steps:
        for i, c in enumerate(step.collectives):
            if i == len(best):
                best.append(c.ms)
            best[i] = min(best[i], c.ms)
    return best


def collective_points(traces: Sequence[RankTrace], warmup: int = 2) -> list[tuple[float, float]]:
    """(bytes, ms) of every all-to-all of the kept steps whose size the traces record: the most
    any rank sends in it, and its fastest rank's span (the link's time, without waiting)."""
    kept, steps = _kept_steps(traces, warmup)
    out = []
    for n in kept:
        per_rank = [by_number[n].collectives for by_number in steps.values()]
        for i in range(min(len(c) for c in per_rank)):
            these = [c[i] for c in per_rank]
            if these[0].kind != "all_to_all" or any(c.sent_bytes is None for c in these):
                continue
            out.append((max(c.sent_bytes for c in these), min(c.ms for c in these)))
    return out


def check_ranks(traces: Sequence[RankTrace], world_size: int, source: str,
                holds_lookups: Optional[Iterable[int]] = None) -> None:
    """The traces are of a job of ``world_size`` ranks, every rank there once, and (with
    ``holds_lookups``: the ranks the plan gives sharded tables) lookups where the plan put them."""
    if not traces:
        raise TraceError(f"{source}: no trace given")
    worlds = {t.world_size for t in traces}
    if worlds != {world_size}:
        other = next(t for t in traces if t.world_size != world_size)
        raise TraceError(f"{other.source}: distributedInfo.world_size: {other.world_size}, but {source} is a plan"
                         f" of {world_size} ranks (a trace of another job)")
    missing = sorted(set(range(world_size)) - {t.rank for t in traces})
    if missing:
        raise TraceError(f"{source}: no trace of rank(s) {', '.join(map(str, missing))} among the files given"
                         f" (a job of {world_size} ranks needs one per rank)")
    if holds_lookups is not None:
        holds = set(holds_lookups)
        for t in traces:
            looked = any(s.lookups for s in t.steps)
            if (t.rank in holds) != looked:
                what = "no TBE lookups, but the plan gives it sharded tables" if t.rank in holds else \
                    "TBE lookups, but the plan gives it no sharded table"
                raise TraceError(f"{t.source}: rank {t.rank} has {what} (a trace of another plan)")
