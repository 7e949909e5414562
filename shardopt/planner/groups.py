"""Planning a 2D world: one plan for a sharding group, the group's size chosen where asked (``auto``).

The trade a group size makes: a small group keeps each all-to-all among few ranks but holds more
of the tables per rank and syncs more bytes over more replicas; a large one the reverse. ``auto``
plans every size that can hold the tables and keeps the fastest predicted step, the sync
included; a size that cannot hold them is refused with what it would need.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from shardopt.arithmetic.groups import group_workload
from shardopt.contracts import Breakdown
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.layout import shard_bytes, weight_bytes
from shardopt.core.parallelism import group_sizes
from shardopt.core.plan import GROUP_PLAN_VERSION, GroupChoice, Plan, PlanParallelism
from shardopt.core.units import format_bytes
from shardopt.core.workload import Workload
from shardopt.costmodel.replica_sync import ReplicaSync, replica_sync, replica_sync_ms


@dataclass(frozen=True)
class GroupOutcome:
    """One group size planned: the plan, its sync, its step with the sync (or why it has none)."""

    size: int
    plan: Optional[Plan] = None
    sync: Optional[ReplicaSync] = None
    refused: Optional[str] = None

    @property
    def step_ms(self) -> Optional[float]:
        if self.plan is None or self.sync is None:
            return None
        return group_step_ms(self.plan) + self.sync.slowest_ms

    def choice(self) -> GroupChoice:
        return GroupChoice(sharding_group_size=self.size, step_ms=self.step_ms,
                           sync_ms=self.sync.slowest_ms if self.sync else None, refused=self.refused)


def group_step_ms(plan: Plan) -> float:
    """The group plan's own critical path (the sync aside)."""
    return Breakdown.of(plan.predicted.per_rank).step_ms if plan.predicted else 0.0


def memory_refusal(workload: Workload, size: int) -> Optional[str]:
    """Why ``size`` ranks cannot hold the tables, counted before any search (None: they may)."""
    group = group_workload(workload, size)
    topo = group.topology
    need = sum(shard_bytes(workload.optimizer, t, t.num_embeddings, t.embedding_dim) for t in workload.tables)
    have = sum(topo.rank_caps) + (topo.num_hosts * topo.ddr_cap if topo.compute_device == "cuda" and topo.ddr_cap else 0)
    if need <= have:
        return None
    return (f"a group of {size} ranks holds {format_bytes(have)}, the tables need {format_bytes(need)}"
            f" ({format_bytes(need // size)} a rank against hbm_cap {format_bytes(workload.topology.hbm_cap)})")


def sync_floor_ms(workload: Workload, size: int) -> float:
    """No group plan of ``size`` ranks syncs faster than this: the tables' bytes spread evenly over
    the group's ranks, less the most that data-parallel replicas can take out of the sync (they
    are DDP's; every rank holds each whole, so together at most one rank's HBM)."""
    par = workload.parallelism
    weights_only = par.strategy == "fully_sharded"
    group = group_workload(workload, size)
    total = replicable = 0
    for t in workload.tables:
        size_bytes = shard_bytes(workload.optimizer, t, t.num_embeddings, t.embedding_dim)
        synced = weight_bytes(t, t.num_embeddings, t.embedding_dim) if weights_only else size_bytes
        total += synced
        if "data_parallel" in t.allowed_sharding_types:
            replicable += synced
    need = total - min(replicable, min(group.topology.rank_caps))
    return min(replica_sync_ms(workload, size, [max(need, 0) / size] * size))


def plan_group(workload: Workload, size: int, plan_one: Callable[[Workload], Plan]) -> GroupOutcome:
    """Plan one group size; memory the group lacks is a refusal, not an error."""
    refused = memory_refusal(workload, size)
    if refused is not None:
        return GroupOutcome(size, refused=refused)
    try:
        plan = plan_one(group_workload(workload, size))
    except ShardoptError as exc:
        if exc.kind != ErrorKind.INFEASIBLE:
            raise
        return GroupOutcome(size, refused=str(exc).split(": ", 1)[-1])
    return GroupOutcome(size, plan, replica_sync(workload, size, plan.tables))


def candidate_sizes(workload: Workload) -> list[int]:
    par, topo = workload.parallelism, workload.topology
    if par is not None and not par.auto:
        return [par.sharding_group_size]
    inter = par.inter_host_allreduce if par is not None else False
    return group_sizes(topo.world_size, topo.ranks_per_host, inter)


def plan_2d(workload: Workload, plan_one: Callable[[Workload], Plan], *, candidates: str = "torchrec",
            source: str = "<workload>", progress: Callable[[GroupOutcome], None] | None = None) -> Plan:
    """The plan of one sharding group of ``workload`` (which has a ``parallelism`` block), each
    group size's workload planned by ``plan_one`` (a 1D planner: :func:`~shardopt.planner.plan_with`)."""
    par = workload.parallelism
    outcomes = []
    best: Optional[float] = None
    # Largest groups first: they sync least, so the bound below skips the small ones early.
    for size in sorted(candidate_sizes(workload), reverse=True):
        floor = sync_floor_ms(workload, size) if candidates == "torchrec" else 0.0
        short = memory_refusal(workload, size)
        if short is not None:
            outcome = GroupOutcome(size, refused=short)
        elif best is not None and floor >= best:
            outcome = GroupOutcome(size, refused=f"not planned: its sync alone takes at least {floor:.3g} ms,"
                                                 f" more than the best step found ({best:.3g} ms)")
        else:
            outcome = plan_group(workload, size, plan_one)
        outcomes.append(outcome)
        if outcome.step_ms is not None:
            best = outcome.step_ms if best is None else min(best, outcome.step_ms)
        if progress is not None:
            progress(outcome)
    outcomes.sort(key=lambda o: o.size)
    planned = [o for o in outcomes if o.step_ms is not None]
    if not planned:
        if par.auto:
            reasons = "; ".join(f"{o.size}: {o.refused}" for o in outcomes[-3:])
            raise ShardoptError(f"{source}: parallelism.sharding_group_size: no group size holds the tables"
                                f" (largest tried: {reasons})", ErrorKind.INFEASIBLE)
        raise ShardoptError(f"{source}: parallelism.sharding_group_size: {outcomes[0].refused}", ErrorKind.INFEASIBLE)
    best = min(planned, key=lambda o: (o.step_ms, -o.size))
    return with_parallelism(best.plan, best.sync, workload, best.step_ms,
                            auto=par.auto, choices=tuple(o.choice() for o in outcomes) if par.auto else ())


def with_parallelism(plan: Plan, sync: ReplicaSync, workload: Workload, step_ms: float,
                     auto: bool = False, choices: tuple[GroupChoice, ...] = ()) -> Plan:
    par = workload.parallelism
    block = PlanParallelism(
        world_size=workload.topology.world_size, sharding_group_size=sync.group, sync_every=par.sync_every,
        strategy=par.strategy, inter_host_allreduce=par.inter_host_allreduce, sync_ms=sync.slowest_ms,
        sync_bytes=max(sync.bytes_per_rank, default=0), step_ms=step_ms,
        chosen_by="auto" if auto else "workload", choices=choices,
    )
    return dataclasses.replace(plan, version=GROUP_PLAN_VERSION, parallelism=block)
