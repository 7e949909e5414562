"""Replay: measure a plan (ours or anyone's) on this machine's real lookup kernels.

For each rank, one fused kernel per precision holds that rank's shards (data-parallel replicas in
a kernel of their own, since they pool the local batch only). Each kernel is fed the lookups its
rank really receives for one global batch drawn from the workload's access distributions:
row-wise shards get the ids in their row range, column-wise shards every id of their table,
data-parallel replicas the rank's local batch. Forward and backward (with the fused optimizer
update) are timed with warm-up and medians. Communication comes from a measured all-to-all profile
when one is given, else from the workload's declared bandwidths through the analytic model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from shardopt.costmodel.analytic import AnalyticCostModel, rank_comm_from_all_to_all
from shardopt.costmodel.comm_curve import CommCurves
from shardopt.costmodel.plan_kernels import KernelKey, rank_kernels
from shardopt.lookups import Bags, sample_bags
from shardopt.memory import plan_memory
from shardopt.plan import Plan, RankBreakdown, TablePlan
from shardopt.profile.kernels import KernelSpec, resolve_backend
from shardopt.profile.precision import measured_precision
from shardopt.profile.tbe import measure_kernel
from shardopt.workload import Workload


# A 2-core VM's timings wander by several percent; ten iterations keep two replays within a few.
REPLAY_WARMUP = 3
REPLAY_ITERS = 10


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
    """The analytic model's communication terms: the topology's (or profile's) bandwidths."""

    name = "declared bandwidths (analytic model)"

    def __init__(self, model: Optional[AnalyticCostModel] = None) -> None:
        self.model = model or AnalyticCostModel()

    def rank_comm_ms(self, workload, tables):
        return [(r.fwd_comm_ms, r.bwd_comm_ms) for r in self.model.breakdown(workload, tables)]


class ProfiledComm(CommSource):
    """All-to-all times interpolated (log-log) from a measured profile at the plan's world size."""

    def __init__(self, records: Sequence[dict], source: str) -> None:
        self.curves = CommCurves.from_records(records)
        self.source = source
        self.name = f"measured all-to-all ({source})"

    def world_sizes(self) -> list[int]:
        return self.curves.world_sizes()

    def time_ms(self, world: int, pattern: str, message_bytes: float) -> float:
        return self.curves.seconds(world, pattern, message_bytes) * 1e3

    def rank_comm_ms(self, workload, tables):
        world = workload.topology.world_size
        measured = self.world_sizes()
        if world > 1 and world not in measured:
            raise ValueError(
                f"{self.source}: no all-to-all measured at world size {world}"
                f" (measured: {', '.join(map(str, measured)) or 'none'})"
            )
        return rank_comm_from_all_to_all(workload, tables, self.time_ms)


def packaged_cpu_comm() -> ProfiledComm:
    """Communication from the all-to-all points of the CPU profile that ships with shardopt."""
    from importlib import resources
    from pathlib import Path

    from shardopt.profile.dataset import ProfileDataset

    folder = Path(str(resources.files("shardopt").joinpath("data/profiles/cpu-full")))
    return ProfiledComm(list(ProfileDataset(folder).records("a2a")), "the packaged CPU profile")


def _rank_bags(
    workload: Workload, plan: Plan, rank: int, batches: dict[str, Bags], device: str = "cpu"
) -> dict[KernelKey, list[tuple[KernelSpec, Bags]]]:
    """The shards of one rank grouped into kernels, each with the bags it receives."""
    batch = workload.batch_size
    groups = rank_kernels(workload, plan.tables, device)[rank]
    out: dict[KernelKey, list[tuple[KernelSpec, Bags]]] = {}
    for key, members in groups.items():
        out[key] = []
        for placed in members:
            bags = batches[placed.table.name]
            if placed.sharding_type == "data_parallel":
                per_sample = len(placed.table.features)  # bags are sample-major, a bag per feature
                bags = bags.samples(rank * batch * per_sample, batch * per_sample)
            elif (placed.row_offset, placed.rows) != (0, placed.table.num_embeddings):
                bags = bags.rows(placed.row_offset, placed.rows)
            out[key].append((KernelSpec(placed.rows, placed.cols), bags))
    return out


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
) -> ReplayResult:
    """Measure every rank's fused kernels; ``progress`` is called with each finished rank."""
    import torch

    from dataclasses import replace

    from shardopt.hotrows import expand

    # Hot-row tables run as a data-parallel hot table and a row-wise cold one (ids remapped).
    workload, expanded = expand(workload, plan.tables)
    plan = replace(plan, tables=expanded)
    backend = resolve_backend(backend)
    comm = comm or DeclaredBandwidthComm()
    if device == "cpu":
        torch.set_num_threads(1)  # one CPU rank is one intra-op thread, as the profile assumes
    world = workload.topology.world_size
    global_batch = workload.batch_size * world
    batches = {
        t.name: sample_bags(t, global_batch, np.random.default_rng([seed, i]))
        for i, t in enumerate(workload.tables)
    }
    notes = sorted(
        {
            f"{t.data_type} tables are measured at {measured_precision(t.data_type, device)}"
            for t in workload.tables
            if measured_precision(t.data_type, device) != t.data_type
        }
    )
    comm_ms = comm.rank_comm_ms(workload, plan.tables)
    hbm, _ = plan_memory(workload, plan.tables)
    ranks = []
    for rank in range(world):
        fwd = bwd = fwd_spread = bwd_spread = 0.0
        groups = _rank_bags(workload, plan, rank, batches, device)
        for (precision, _), members in sorted(groups.items()):
            specs = [spec for spec, _ in members]
            m = measure_kernel(
                specs, [bags for _, bags in members], backend=backend, device=device,
                precision=precision, warmup=warmup, iters=iters,
            )
            fwd += m.fwd.median_us / 1e3
            bwd += m.bwd.median_us / 1e3
            fwd_spread += (m.fwd.p75_us - m.fwd.p25_us) / 1e3
            bwd_spread += (m.bwd.p75_us - m.bwd.p25_us) / 1e3
        fcomm, bcomm = comm_ms[rank]
        measured = RankBreakdown(
            rank=rank, fwd_compute_ms=fwd, bwd_compute_ms=bwd, fwd_comm_ms=fcomm,
            bwd_comm_ms=bcomm, total_ms=fwd + bwd + fcomm + bcomm, hbm_bytes=hbm[rank],
        )
        ranks.append(RankReplay(measured, fwd_spread, bwd_spread, len(groups)))
        if progress:
            progress(rank)
    return ReplayResult(tuple(ranks), backend, device, comm.name, tuple(notes))
