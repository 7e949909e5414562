"""Replay: measure a plan (ours or anyone's) on this machine's real lookup kernels.

For each rank, one fused kernel per precision and sharding type holds that rank's shards, as
TorchRec groups them (data-parallel replicas pool the local batch only). Each kernel is fed the
lookups its rank really receives for one global batch drawn from the workload's access
distributions: row-wise shards get the ids in their row range, column-wise shards every id of
their table, data-parallel replicas the rank's local batch. Forward and backward (with the fused
optimizer update) are timed with warm-up and medians, a rank's kernels one after another as its
step runs them. Communication is not measured here (one machine has no cluster's links): it comes
by the comm-source rule (:func:`comm_for`), as the prediction's does.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from shardopt.arithmetic.traffic import rank_comm_from_all_to_all
from shardopt.core.errors import ShardoptError, check_interrupted
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.comm_curve import CommCurves
from shardopt.costmodel.plan_kernels import KernelKey, rank_kernels
from shardopt.profile.bags import Bags, sample_bags
from shardopt.arithmetic.memory import plan_memory
from shardopt.contracts import Breakdown
from shardopt.core.plan import Plan, RankBreakdown, TablePlan
from shardopt.profile.kernels import KernelSpec, resolve_backend
from shardopt.profile.precision import measured_precision
from shardopt.profile.tbe import DISTINCT_BATCHES, PreparedKernel, time_kernels
from shardopt.core.workload import Workload


# A 2-core VM's timings wander by several percent; ten iterations keep two replays within a few.
REPLAY_WARMUP = 3
REPLAY_ITERS = 10
REPLAY_BUILDS = 3  # each rank built and timed this often (SIDE_BY_SIDE_ROUNDS_PER_BUILD says why)
# Side by side each rank is timed once per round, so a round's timing can be shorter.
SIDE_BY_SIDE_WARMUP = 2
SIDE_BY_SIDE_ITERS = 5
# Kernels (weights and optimizer state of every plan's shards) a side-by-side window may hold at once.
SIDE_BY_SIDE_MEMORY_BYTES = 6 * 2**30
# Rounds timed on one build of a window's kernels before they are built afresh. A kernel's forward
# depends on where its buffers land: one rank of a 4-rank plan took 4.4 or 6.3 ms by the build, the
# same within a build (``benchmarks/results/replay_builds.md``), so a plan replayed on one build came
# out up to 12% faster or slower against TorchRec's from run to run. Built afresh each round (0.15 s
# a rank there) and centred by :func:`rank_centre`, a rank's time is over builds.
SIDE_BY_SIDE_ROUNDS_PER_BUILD = 1
TRIM = 0.2  # share of a rank's rounds dropped at each end (:func:`rank_centre`)


@dataclass(frozen=True)
class RankReplay:
    measured: RankBreakdown
    fwd_spread_ms: float  # p75 - p25 of the forward time, summed over the rank's kernels
    bwd_spread_ms: float
    kernels: int


@dataclass(frozen=True)
class ReplayResult:
    ranks: tuple[RankReplay, ...]
    backend: str
    device: str
    comm_source: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def per_rank(self) -> tuple[RankBreakdown, ...]:
        return tuple(r.measured for r in self.ranks)

    @property
    def bottleneck(self) -> RankBreakdown:
        return max(self.per_rank, key=lambda r: (r.total_ms, -r.rank))


class CommSource:
    """Per-rank communication milliseconds (forward, backward) for a plan."""

    name: str

    def rank_comm_ms(self, workload: Workload, tables: Sequence[TablePlan]) -> list[tuple[float, float]]:
        raise NotImplementedError


class DeclaredBandwidthComm(CommSource):
    """A cost model's communication terms: the links the workload declares (or its hardware
    profile's), as the comm-source rule picks them."""

    name = "declared bandwidths (analytic model)"

    def __init__(self, model: Optional[CostModel] = None, name: Optional[str] = None) -> None:
        self.model = model or AnalyticCostModel()
        self.name = name or self.name

    def rank_comm_ms(self, workload, tables):
        return [(r.fwd_comm_ms, r.bwd_comm_ms) for r in self.model.breakdown(workload, tables)]


class ProfiledComm(CommSource):
    """All-to-all times interpolated (log-log) from a measured profile at the plan's world size."""

    def __init__(self, records: Sequence[dict], source: str, curves: Optional[CommCurves] = None,
                 name: Optional[str] = None) -> None:
        self.curves = curves if curves is not None else CommCurves.from_records(records)
        self.source = source
        self.name = name or f"measured all-to-all ({source})"

    def world_sizes(self) -> list[int]:
        return self.curves.world_sizes()

    def time_ms(self, world: int, pattern: str, message_bytes: float) -> float:
        return self.curves.seconds(world, pattern, message_bytes) * 1e3

    def rank_comm_ms(self, workload, tables):
        world = workload.topology.world_size
        if world > 1 and not self.curves.covers(world):
            raise ValueError(
                f"{self.source}: no all-to-all of both patterns (even, pooled) measured at world size"
                f" {world} (measured: {', '.join(map(str, self.world_sizes())) or 'none'})"
            )
        return rank_comm_from_all_to_all(workload, tables, self.time_ms)


def comm_for(workload: Workload, model: CostModel) -> CommSource:
    """Replay's communication by the same rule as the model's prediction
    (:mod:`shardopt.costmodel.comm_source`): measured curves when the rule picks them, else the
    links, so the predicted and measured columns read comm from one source."""
    choice = model.comm_choice(workload)
    if choice.curves is not None:
        return ProfiledComm((), choice.label, curves=choice.curves, name=choice.label)
    return DeclaredBandwidthComm(model, name=choice.label)


def _rank_bags(
    workload: Workload, plan: Plan, rank: int, batches: Sequence[dict[str, Bags]], device: str = "cpu"
) -> dict[KernelKey, list[tuple[KernelSpec, list[Bags]]]]:
    """The shards of one rank grouped into kernels, each with the bags it receives from every batch."""
    batch = workload.batch_size
    groups = rank_kernels(workload, plan.tables, device)[rank]
    out: dict[KernelKey, list[tuple[KernelSpec, list[Bags]]]] = {}
    for key, members in groups.items():
        out[key] = []
        for placed in members:
            received = []
            for drawn in batches:
                bags = drawn[placed.table.name]
                if placed.sharding_type == "data_parallel":
                    per_sample = len(placed.table.features)  # bags are sample-major, a bag per feature
                    bags = bags.samples(rank * batch * per_sample, batch * per_sample)
                elif (placed.row_offset, placed.rows) != (0, placed.table.num_embeddings):
                    bags = bags.rows(placed.row_offset, placed.rows)
                received.append(bags)
            out[key].append((KernelSpec(placed.rows, placed.cols), received))
    return out


class PlanReplay:
    """A plan ready to replay: the lookups each rank receives, its comm and memory; each rank's
    kernels are built on demand (one rank at a time keeps memory to a rank's tables) and can be
    timed as often as a benchmark wants, interleaved with other plans'."""

    def __init__(
        self,
        workload: Workload,
        plan: Plan,
        *,
        backend: str = "auto",
        device: str = "cpu",
        seed: int = 0,
        comm: Optional[CommSource] = None,
    ) -> None:
        from dataclasses import replace

        from shardopt.arithmetic.hotrows import expand

        sequence = [t.name for t in workload.tables if not t.pooled]
        if sequence:
            raise ShardoptError(f"table {sequence[0]!r}: a sequence (unpooled) table; replay measures pooled"
                                " FBGEMM kernels only")
        # Hot-row tables run as a data-parallel hot table and a row-wise cold one (ids remapped).
        self.workload, expanded = expand(workload, plan.tables)
        self.plan = replace(plan, tables=expanded)
        self.backend = resolve_backend(backend)
        self.device = device
        self.comm = comm or DeclaredBandwidthComm()
        world = self.workload.topology.world_size
        global_batch = self.workload.batch_size * world
        # A new batch each iteration, as in training (DISTINCT_BATCHES says why); the first is the
        # batch replay always drew, the others come from seeds of their own.
        self.batches = [
            {
                t.name: sample_bags(t, global_batch, np.random.default_rng([seed, i] + ([j] if j else [])))
                for i, t in enumerate(self.workload.tables)
            }
            for j in range(DISTINCT_BATCHES)
        ]
        self.notes = tuple(sorted(
            {
                f"{t.data_type} tables are measured at {measured_precision(t.data_type, device)}"
                for t in self.workload.tables
                if measured_precision(t.data_type, device) != t.data_type
            }
        ))
        self.comm_ms = self.comm.rank_comm_ms(self.workload, self.plan.tables)
        self.hbm, _ = plan_memory(self.workload, self.plan.tables)

    @property
    def world(self) -> int:
        return self.workload.topology.world_size

    def build_rank(self, rank: int) -> list[PreparedKernel]:
        """The rank's kernels (one per precision and sharding type, as TorchRec groups them), built
        with their inputs."""
        groups = _rank_bags(self.workload, self.plan, rank, self.batches, self.device)
        return [
            PreparedKernel([spec for spec, _ in members], [list(b) for b in zip(*(bags for _, bags in members))],
                           backend=self.backend, device=self.device, precision=precision,
                           dense=kind == "data_parallel")
            for (precision, kind), members in sorted(groups.items())
        ]

    def time_rank(self, rank: int, kernels: Sequence[PreparedKernel], warmup: int, iters: int) -> RankReplay:
        """The rank's kernels timed together, as its step runs them (:func:`time_kernels`)."""
        if not kernels:
            return self.rank_replay(rank, 0.0, 0.0)
        fwd, bwd = time_kernels(kernels, warmup, iters)
        check_interrupted()  # a Ctrl-C that landed in a finalizer was swallowed: stop here
        return self.rank_replay(rank, fwd.median_us / 1e3, bwd.median_us / 1e3, (fwd.p75_us - fwd.p25_us) / 1e3,
                                (bwd.p75_us - bwd.p25_us) / 1e3, len(kernels))

    def rank_replay(self, rank, fwd, bwd, fwd_spread=0.0, bwd_spread=0.0, kernels=0) -> RankReplay:
        fcomm, bcomm = self.comm_ms[rank]
        measured = RankBreakdown(
            rank=rank, fwd_compute_ms=fwd, bwd_compute_ms=bwd, fwd_comm_ms=fcomm,
            bwd_comm_ms=bcomm, total_ms=fwd + bwd + fcomm + bcomm, hbm_bytes=self.hbm[rank],
        )
        return RankReplay(measured, fwd_spread, bwd_spread, kernels)

    def centred(self, rank: int, timed: Sequence[RankReplay]) -> RankReplay:
        """The rank's timings (builds or rounds) as one: each part's :func:`rank_centre`."""
        return self.rank_replay(
            rank, rank_centre([t.measured.fwd_compute_ms for t in timed]),
            rank_centre([t.measured.bwd_compute_ms for t in timed]), statistics.fmean(t.fwd_spread_ms for t in timed),
            statistics.fmean(t.bwd_spread_ms for t in timed), timed[0].kernels)

    def result(self, ranks: Sequence[RankReplay]) -> ReplayResult:
        return ReplayResult(tuple(ranks), self.backend, self.device, self.comm.name, self.notes)


def replay_plan(
    workload: Workload,
    plan: Plan,
    *,
    backend: str = "auto",
    device: str = "cpu",
    warmup: int = REPLAY_WARMUP,
    iters: int = REPLAY_ITERS,
    seed: int = 0,
    comm: Optional[CommSource] = None,
    progress=None,
    builds: int = REPLAY_BUILDS,
) -> ReplayResult:
    """Measure every rank's fused kernels, built ``builds`` times (the rank's time is their
    :func:`rank_centre`); ``progress`` is called with each finished rank."""
    import torch

    if device == "cpu":
        torch.set_num_threads(1)  # one CPU rank is one intra-op thread, as the profile assumes
    replay = PlanReplay(workload, plan, backend=backend, device=device, seed=seed, comm=comm)
    ranks = []
    for rank in range(replay.world):
        ranks.append(replay.centred(rank, [replay.time_rank(rank, replay.build_rank(rank), warmup, iters)
                                           for _ in range(max(1, builds))]))
        if progress:
            progress(rank)
    return replay.result(ranks)


@dataclass(frozen=True)
class SideBySide:
    """Plans replayed in turns: per plan, each rank's centre (:func:`rank_centre`) and each round's
    bottleneck."""

    per_rank: dict[str, tuple[RankBreakdown, ...]]
    runs: dict[str, list[float]]

    def bottleneck_ms(self, name: str) -> float:
        """The max over ranks of each rank's centre: centres first, so timing noise on several
        near-equal ranks does not inflate the max (which would penalise the best-balanced plans)."""
        return Breakdown.of(self.per_rank[name]).bottleneck_ms

    def step_ms(self, name: str) -> float:
        """The critical path of per-rank centres: each phase's slowest rank, summed."""
        return Breakdown.of(self.per_rank[name]).step_ms


def replay_side_by_side(
    workload: Workload,
    plans: Mapping[str, Plan],
    rounds: int,
    *,
    comm: Optional[CommSource] = None,
    warmup: int = SIDE_BY_SIDE_WARMUP,
    iters: int = SIDE_BY_SIDE_ITERS,
    memory_bytes: int = SIDE_BY_SIDE_MEMORY_BYTES,
    seed: int = 0,
    device: str = "cpu",
    backend: str = "auto",
    rounds_per_build: int = SIDE_BY_SIDE_ROUNDS_PER_BUILD,
) -> SideBySide:
    """Several plans of one workload measured in turns on this machine's CPU kernels.

    The kernels of every (plan, rank) in a window are built once and timed in turns, in a new
    shuffled order each round; a window holds as many ranks as fit ``memory_bytes``. Timing one
    rank at a time instead gave each rank its own stretch of the machine's drift: on the 2-core
    VMs a rank's compute moved ~20% between such stretches, alike for every plan (correlation
    0.91), so which rank came out the bottleneck was chance. The kernels are built afresh every
    ``rounds_per_build`` rounds (SIDE_BY_SIDE_ROUNDS_PER_BUILD says why). ``seed`` draws the
    batches (another seed: other batches of the same distributions).
    """
    import torch

    if device == "cpu":
        torch.set_num_threads(1)  # one CPU rank is one intra-op thread, as the profile assumes
    replays = {name: PlanReplay(workload, plan, comm=comm, seed=seed, device=device, backend=backend)
               for name, plan in plans.items()}
    world = workload.topology.world_size
    timed: dict[str, list[list[RankReplay]]] = {name: [[] for _ in range(world)] for name in plans}
    rng = np.random.default_rng(0)
    for ranks in rank_windows([sum(r.hbm[rank] for r in replays.values()) for rank in range(world)],
                              memory_bytes):
        turns = [(name, rank) for rank in ranks for name in plans]
        kernels: dict = {}
        for done in range(rounds):
            if done % max(1, rounds_per_build) == 0:
                kernels.clear()  # the last build's memory goes back before the next is made
                kernels.update({turn: replays[turn[0]].build_rank(turn[1]) for turn in turns})
            for i in rng.permutation(len(turns)):
                name, rank = turns[i]
                timed[name][rank].append(replays[name].time_rank(rank, kernels[name, rank], warmup, iters))
        kernels.clear()
    per_rank = {name: tuple(replay.centred(rank, timed[name][rank]).measured for rank in range(world))
                for name, replay in replays.items()}
    runs = {name: [max(timed[name][rank][i].measured.total_ms for rank in range(world)) for i in range(rounds)]
            for name in plans}
    return SideBySide(per_rank, runs)


def rank_centre(values: Sequence[float]) -> float:
    """A rank's time over its rounds: the mean of the middle ones (TRIM of them dropped at each
    end). Over builds a rank's time is bimodal, so a median jumps between the modes with the draw;
    a mean of the middle follows how often each comes, and drops a round the VM stalled."""
    ordered = sorted(values)
    cut = int(len(ordered) * TRIM)
    return statistics.fmean(ordered[cut:len(ordered) - cut])


def rank_windows(rank_bytes: Sequence[int], budget: int) -> list[list[int]]:
    """Consecutive ranks grouped so each group's kernels (every plan's) fit ``budget`` bytes;
    a rank bigger than the budget alone is a group of its own."""
    windows: list[list[int]] = []
    held = 0
    for rank, size in enumerate(rank_bytes):
        if windows and held + size <= budget:
            windows[-1].append(rank)
            held += size
        else:
            windows.append([rank])
            held = size
    return windows


def profiled_comm(folder: Path, world_size: int) -> "ProfiledComm":
    """All-to-all times of a profile folder; ShardoptError when it holds none at ``world_size``."""
    from shardopt.profile.dataset import ProfileDataset

    dataset = ProfileDataset(folder)
    dataset.manifest()  # a folder that is no profile fails here, naming it
    records = list(dataset.records("a2a"))
    if not records:
        raise ShardoptError(f"{folder}: --comm-profile: the profile holds no all-to-all points")
    comm = ProfiledComm(records, str(folder))
    if world_size > 1 and not comm.curves.covers(world_size):
        raise ShardoptError(
            f"{folder}: --comm-profile: no all-to-all of both patterns (even, pooled) measured at world size"
            f" {world_size} (measured: {', '.join(map(str, comm.world_sizes())) or 'none'})"
        )
    return comm
