"""The replicas' sync of a 2D plan: bytes from the plan's shards, time from the replicas' links."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardopt.arithmetic.groups import group_workload, sync_bytes
from shardopt.core.hardware import hardware_for
from shardopt.core.layout import shard_bytes, weight_bytes
from shardopt.core.parallelism import Parallelism
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import workload_from_dict
from shardopt.costmodel.replica_sync import allreduce_seconds, replica_sync


def _workload(world=16, local=8, group=4, every=1, strategy="default", optimizer="rowwise_adagrad", tables=6):
    return workload_from_dict({
        "version": 1, "name": "w", "batch_size": 8, "optimizer": optimizer,
        "topology": {"world_size": world, "local_world_size": local, "hbm_cap": "8GB", "compute_device": "cuda",
                     "hardware": "h100"},
        "tables": [{"name": f"t{i}", "num_embeddings": 1000 * (i + 1), "embedding_dim": 16 * (i % 3 + 1)}
                   for i in range(tables)],
        "parallelism": {"sharding_group_size": group, "sync_every": every, "strategy": strategy},
    })


def _table_wise(workload, ranks):
    return tuple(TablePlan(t.name, "table_wise", (Shard(r, (0, 0), (t.num_embeddings, t.embedding_dim)),))
                 for t, r in zip(workload.tables, ranks))


@settings(max_examples=50, deadline=None)
@given(data=st.data(), every=st.integers(1, 1000), scale=st.integers(1, 4))
def test_sync_grows_with_a_ranks_bytes_and_shrinks_with_sync_every(data, every, scale):
    base = _workload(every=1)
    ranks = data.draw(st.lists(st.integers(0, 3), min_size=6, max_size=6))
    plan = _table_wise(base, ranks)
    sync = replica_sync(base, 4, plan)
    group = group_workload(base, 4)
    assert list(sync.bytes_per_rank) == [sum(shard_bytes(base.optimizer, group.table(tp.name), *tp.shards[0].sizes)
                                             for tp in plan if tp.shards[0].rank == p) for p in range(4)]
    hw = hardware_for(base.topology)
    latency_ms = 2 * (sync.replicas - 1) * hw.comm_latency_us * 1e-3
    # Linear in a rank's bytes, one slope for every rank (the replicas of each share a host here).
    slopes = {round((ms - latency_ms) / size, 18) for ms, size in zip(sync.ms_per_rank, sync.bytes_per_rank) if size}
    assert len(slopes) == 1
    # Every table's rows multiplied: the bytes, and the time beyond latency, by the same factor.
    wide = dataclasses.replace(base, tables=tuple(dataclasses.replace(t, num_embeddings=t.num_embeddings * scale)
                                                  for t in base.tables))
    wider = replica_sync(wide, 4, _table_wise(wide, ranks))
    assert wider.bytes_per_rank == tuple(b * scale for b in sync.bytes_per_rank)
    for a, b, size in zip(sync.ms_per_rank, wider.ms_per_rank, sync.bytes_per_rank):
        assert b - latency_ms == pytest.approx((a - latency_ms) * scale, rel=1e-9, abs=1e-12)
    # Syncing every K steps: each step carries 1/K of a sync.
    rare = replica_sync(dataclasses.replace(base, parallelism=Parallelism(sharding_group_size=4, sync_every=every)), 4, plan)
    assert rare.ms_per_rank == pytest.approx([ms / every for ms in sync.ms_per_rank])
    assert sync.slowest_ms == max(sync.ms_per_rank)


def test_replicas_across_hosts_sync_over_the_nic_and_one_group_syncs_nothing():
    on_host = _workload(world=16, local=8, group=4)  # 4 replicas side by side on one host
    across = _workload(world=32, local=8, group=2)  # 16 replicas over 2 hosts
    hw = hardware_for(on_host.topology)
    plan_on, plan_across = _table_wise(on_host, [0] * 6), _table_wise(across, [0] * 6)
    s1, s2 = replica_sync(on_host, 4, plan_on), replica_sync(across, 2, plan_across)
    assert s1.links[0] == "intra-host" and s2.links[0] == "inter-host"
    assert s1.ms_per_rank[0] == pytest.approx(allreduce_seconds(s1.bytes_per_rank[0], 4, hw.intra_host_bw_gbps,
                                                                hw.comm_latency_us) * 1e3)
    assert s2.ms_per_rank[0] == pytest.approx(allreduce_seconds(s2.bytes_per_rank[0], 16, hw.inter_host_bw_gbps,
                                                                hw.comm_latency_us) * 1e3)
    whole = _workload(world=16, local=8, group=16)
    assert replica_sync(whole, 16, _table_wise(whole, range(6))).slowest_ms == 0.0


def test_fully_sharded_moves_the_weights_and_data_parallel_tables_sync_through_ddp():
    default, sharded = _workload(optimizer="adam"), _workload(optimizer="adam", strategy="fully_sharded")
    plan = _table_wise(default, [0, 1, 2, 3, 0, 1])
    group = group_workload(default, 4)
    weights = [sum(weight_bytes(group.table(tp.name), *tp.shards[0].sizes) for tp in plan if tp.shards[0].rank == p)
               for p in range(4)]
    assert list(replica_sync(sharded, 4, plan).bytes_per_rank) == weights
    assert all(a > w for a, w in zip(replica_sync(default, 4, plan).bytes_per_rank, weights))  # Adam's state too
    t = default.tables[0]
    dp = (TablePlan(t.name, "data_parallel", tuple(Shard(r, (0, 0), (t.num_embeddings, t.embedding_dim))
                                                     for r in range(4))),) + plan[1:]
    assert sync_bytes(group, dp)[0] == sync_bytes(group, plan)[0] - shard_bytes("adam", t, t.num_embeddings, t.embedding_dim)


def test_the_group_workload_is_the_groups_topology():
    workload = _workload(world=32, local=8, group=8)
    group = group_workload(workload, 8)
    assert group.topology.world_size == 8 and group.topology.ranks_per_host == 2 and group.parallelism is None
