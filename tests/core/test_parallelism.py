"""The 2D layout (DMPCollection's groups and replica groups) and the workload's parallelism block."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardopt.core.errors import ShardoptError
from shardopt.core.parallelism import GroupLayout, group_sizes, layout_error
from shardopt.core.workload import workload_from_dict

HOSTS = st.sampled_from([1, 2, 4, 8])
LOCAL = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=60, deadline=None)
@given(hosts=HOSTS, local=LOCAL, inter=st.booleans(), data=st.data())
def test_every_rank_is_in_one_group_and_one_replica_group_meeting_at_its_position(hosts, local, inter, data):
    world = hosts * local
    sizes = group_sizes(world, local, inter)
    assert world in sizes  # 1D is always a choice
    group = data.draw(st.sampled_from(sizes))
    layout = GroupLayout(world, local, group, inter)
    groups = [layout.group_ranks(g) for g in range(layout.replicas)]
    replicas = [layout.replica_ranks(p) for p in range(group)]
    assert sorted(r for g in groups for r in g) == list(range(world))
    assert sorted(r for p in replicas for r in p) == list(range(world))
    for g, ranks in enumerate(groups):
        for p, rank in enumerate(ranks):
            assert set(ranks) & set(replicas[p]) == {rank} and rank == layout.global_rank(g, p)
    per_host = layout.group_ranks_per_host
    # Position p of every group sits on the group's host p // per_host: the group is a topology.
    for ranks in groups:
        hosts_of = [layout.host_of(r) for r in ranks]
        assert [hosts_of.index(h) // per_host for h in hosts_of] == [p // per_host for p in range(group)]


def test_dmpcollections_default_layout_keeps_replicas_on_a_host_and_spreads_groups():
    layout = GroupLayout(32, 8, 8)  # 4 replicas of groups of 8
    assert layout.group_ranks(0) == [0, 4, 8, 12, 16, 20, 24, 28]
    assert layout.replica_ranks(0) == [0, 1, 2, 3] and layout.replica_hosts(0) == 1
    assert layout.group_ranks_per_host == 2
    inter = GroupLayout(32, 8, 8, inter_host_allreduce=True)
    assert inter.group_ranks(1) == list(range(8, 16)) and inter.replica_hosts(0) == 4


def test_a_size_whose_groups_spread_unevenly_over_hosts_is_refused():
    assert "divide world_size 24" in layout_error(24, 8, 5, False)
    assert "unevenly" in layout_error(24, 8, 8, False)  # 3 replicas over hosts of 8
    assert layout_error(24, 8, 24, False) is None and 8 not in group_sizes(24, 8)


def _workload(**parallelism):
    tables = [{"name": f"t{i}", "num_embeddings": 1000, "embedding_dim": 16} for i in range(4)]
    return {"version": 1, "name": "w", "batch_size": 8, "tables": tables,
            "topology": {"world_size": 16, "local_world_size": 8, "hbm_cap": "1GB"}, "parallelism": parallelism}


@pytest.mark.parametrize("block,expect", [
    ({"sharding_group_size": 3}, "parallelism.sharding_group_size: must divide world_size 16, got 3"),
    ({"sharding_group_size": 0}, "parallelism.sharding_group_size: must be a number of ranks"),
    ({"sharding_group_size": "8"}, "parallelism.sharding_group_size: must be a number of ranks"),
    ({"sharding_group_size": 8, "sync_every": 0}, "parallelism.sync_every"),
    ({"sharding_group_size": 8, "strategy": "fully_sharded", "sync_every": 4}, "fully_sharded syncs the weights every step"),
    ({"sharding_group_size": 8, "strategy": "grid"}, "parallelism.strategy"),
    ({"sharding_group_size": 8, "extra": 1}, "parallelism.extra"),
])
def test_a_bad_parallelism_block_is_one_line_naming_the_field(block, expect):
    with pytest.raises(ShardoptError, match=expect.replace(".", r"\.").replace("(", r"\(")):
        workload_from_dict(_workload(**block), "w.yaml")


def test_pins_name_ranks_of_one_group():
    data = _workload(sharding_group_size=4)
    data["placement"] = [{"kind": "pin", "tables": ["t0"], "ranks": [5]}]
    with pytest.raises(ShardoptError, match=r"placement\[0\]\.ranks: rank 5 is not below world_size 4"):
        workload_from_dict(data, "w.yaml")
    data["placement"] = [{"kind": "pin", "tables": ["t0"], "ranks": [3]}]
    assert workload_from_dict(data, "w.yaml").parallelism.sharding_group_size == 4
    data["parallelism"] = {"sharding_group_size": "auto"}
    with pytest.raises(ShardoptError, match="give the group's size, not auto"):
        workload_from_dict(data, "w.yaml")
