"""One sharding group of a 2D world as a workload of its own, and the bytes its replicas sync.

Every group gets the same plan (DMPCollection remaps it onto each group's ranks), so a plan is
made for the group's workload: G ranks, as many per host as the layout puts there, each rank's HBM
and speed the least of the ranks that hold its position in every group, and the host DRAM a group
gets of each host. The replicas of position p sync p's weights (and optimizer state) with each
other; :func:`sync_bytes` says how many bytes that is.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from shardopt.core.layout import shard_bytes, weight_bytes
from shardopt.core.parallelism import GroupLayout, layout_error
from shardopt.core.placement import RankSpec
from shardopt.core.plan import TablePlan
from shardopt.core.workload import Workload


def layout_of(workload: Workload, group: int) -> GroupLayout:
    """The layout of groups of ``group`` ranks in the workload's world (ValueError where none fits)."""
    topo, par = workload.topology, workload.parallelism
    inter = par.inter_host_allreduce if par is not None else False
    reason = layout_error(topo.world_size, topo.ranks_per_host, group, inter)
    if reason is not None:
        raise ValueError(reason)
    return GroupLayout(topo.world_size, topo.ranks_per_host, group, inter)


def group_workload(workload: Workload, group: int) -> Workload:
    """The workload one sharding group of ``group`` ranks plans for (no ``parallelism`` block:
    within the group, planning is 1D)."""
    layout = layout_of(workload, group)
    topo = workload.topology
    per_host = layout.group_ranks_per_host
    specs = []
    for p in range(group):
        members = layout.replica_ranks(p)
        cap = min(topo.rank_caps[r] for r in members)
        speed = min(topo.rank_speeds[r] for r in members)
        if cap != topo.hbm_cap or speed != 1.0:
            specs.append(RankSpec(ranks=(p,), hbm_cap=cap, speed=speed))
    ddr = None if topo.ddr_cap is None else topo.ddr_cap * per_host // topo.ranks_per_host
    topology = dataclasses.replace(
        topo, world_size=group, local_world_size=per_host, ddr_cap=ddr, ranks=tuple(specs) or None
    )
    return dataclasses.replace(workload, topology=topology, parallelism=None)


def sync_bytes(workload: Workload, tables: Sequence[TablePlan], weights_only: bool = False) -> list[int]:
    """Bytes each rank of a group plan syncs with its replicas: its TBE shards' weights and
    optimizer state (``weights_only``: the weights, as ``fully_sharded`` moves them). Data-parallel
    tables are not among them: DDP all-reduces their gradients every step over the whole world."""
    from shardopt.arithmetic.hotrows import expand

    workload, tables = expand(workload, tables)
    out = [0] * workload.topology.world_size
    for tp in tables:
        if tp.sharding_type == "data_parallel":
            continue
        table = workload.table(tp.name)
        for s in tp.shards:
            rows, cols = s.sizes
            size = weight_bytes(table, rows, cols) if weights_only else shard_bytes(workload.optimizer, table, rows, cols)
            out[s.rank] += size
    return out
