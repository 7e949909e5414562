"""The replicas' sync of a 2D plan, in milliseconds per training step.

DMPCollection's ``sync()`` all-reduces (average) each rank's TBE weights and optimizer state with
the ranks that hold the same position in the other groups; ``fully_sharded`` instead
reduce-scatters the weights in the forward and all-gathers them in the backward, every step. Both
move 2 (R-1)/R of the bytes over the slowest link the R replicas span (NVLink when they share a
host, the rank's NIC otherwise), as a ring does, plus 2 (R-1) link latencies. One sync is spread
over the ``sync_every`` steps it serves; the step waits for the slowest replica group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from shardopt.arithmetic.groups import layout_of, sync_bytes
from shardopt.core.hardware import hardware_for
from shardopt.core.parallelism import Parallelism
from shardopt.core.plan import TablePlan
from shardopt.core.workload import Workload

GB = 1e9


@dataclass(frozen=True)
class ReplicaSync:
    """What the replicas' sync of one group plan costs: per group rank, bytes and amortised ms."""

    group: int
    replicas: int
    every: int
    strategy: str
    bytes_per_rank: tuple[int, ...]
    ms_per_rank: tuple[float, ...]
    links: tuple[str, ...]  # per group rank: "intra-host" or "inter-host"

    @property
    def slowest_ms(self) -> float:
        return max(self.ms_per_rank, default=0.0)

    @property
    def slowest_rank(self) -> int:
        return max(range(len(self.ms_per_rank)), key=lambda r: (self.ms_per_rank[r], -r))


def allreduce_seconds(size: float, members: int, bandwidth_gbps: float, latency_us: float) -> float:
    """A ring all-reduce (or reduce-scatter plus all-gather) of ``size`` bytes over ``members``."""
    if members <= 1:
        return 0.0
    share = 2 * (members - 1) / members
    return share * size / (bandwidth_gbps * GB) + 2 * (members - 1) * latency_us * 1e-6


def replica_sync(workload: Workload, group: int, tables: Sequence[TablePlan],
                 parallelism: Parallelism | None = None) -> ReplicaSync:
    """The sync of ``tables`` (a plan of one group of ``group`` ranks of the 2D ``workload``)."""
    from shardopt.arithmetic.groups import group_workload

    par = parallelism or workload.parallelism or Parallelism(sharding_group_size=group)
    sizes = sync_bytes(group_workload(workload, group), tables, weights_only=par.strategy == "fully_sharded")
    layout = layout_of(workload, group)
    links = tuple("intra-host" if layout.replica_hosts(p) == 1 else "inter-host" for p in range(group))
    ms = replica_sync_ms(workload, group, sizes, par)
    return ReplicaSync(group, layout.replicas, par.amortised_over, par.strategy, tuple(sizes), tuple(ms), links)


def replica_sync_ms(workload: Workload, group: int, sizes: Sequence[float],
                    parallelism: Parallelism | None = None) -> list[float]:
    """Per group rank, the amortised ms of syncing ``sizes[p]`` bytes with its replicas."""
    par = parallelism or workload.parallelism or Parallelism(sharding_group_size=group)
    layout = layout_of(workload, group)
    hw = hardware_for(workload.topology)
    out = []
    for p, size in enumerate(sizes):
        bw = hw.intra_host_bw_gbps if layout.replica_hosts(p) == 1 else hw.inter_host_bw_gbps
        out.append(allreduce_seconds(size, layout.replicas, bw, hw.comm_latency_us) * 1e3 / par.amortised_over)
    return out
