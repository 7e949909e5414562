"""Whole tables take their rank's column cut's kind, so TorchRec runs one kernel there, not two."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DATA
from shardopt.core.plan import Shard, TablePlan, read_plan
from shardopt.core.workload import read_workload, workload_from_dict
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.plan_kernels import kernel_kinds, rank_kernels
from shardopt.costmodel.registry import resolve_cost_model
from shardopt.search.kernel_kinds import share_kernels


def _whole(name, rank, rows, dim, kind="table_wise"):
    return TablePlan(name=name, sharding_type=kind, shards=(Shard(rank=rank, offsets=(0, 0), sizes=(rows, dim)),))


def _columns(name, ranks, rows, dim, kind="column_wise"):
    width = dim // len(ranks)
    return TablePlan(name=name, sharding_type=kind, shards=tuple(
        Shard(rank=r, offsets=(0, i * width), sizes=(rows, width)) for i, r in enumerate(ranks)))


def _workload(n, world=3, only_table_wise=()):
    return workload_from_dict({
        "version": 1, "name": "kinds", "batch_size": 64,
        "topology": {"world_size": world, "compute_device": "cpu", "hbm_cap": "1GB"},
        "tables": [dict(name=f"t{i}", num_embeddings=1000 + i, embedding_dim=64, pooling_factor=2.0,
                        **({"sharding_types": ["table_wise"]} if f"t{i}" in only_table_wise else {}))
                   for i in range(n)]})


def test_whole_tables_beside_a_column_cut_join_its_kernel_and_nothing_else_changes():
    w = _workload(4)
    tables = (_columns("t0", [0, 1], 1000, 64), _whole("t1", 0, 1001, 64), _whole("t2", 1, 1002, 64),
              _whole("t3", 2, 1003, 64))
    shared = share_kernels(w, tables)
    assert [t.sharding_type for t in shared] == ["column_wise", "column_wise", "column_wise", "table_wise"]
    assert [t.shards for t in shared] == [t.shards for t in tables]
    assert [sorted(k[1] for k in r) for r in rank_kernels(w, tables)] == [
        ["column_wise", "table_wise"], ["column_wise", "table_wise"], ["table_wise"]]
    assert [sorted(k[1] for k in r) for r in rank_kernels(w, shared)] == [["column_wise"], ["column_wise"], ["table_wise"]]
    # the models price the plan as TorchRec will run it once relabelled, before and after
    for model in (AnalyticCostModel(), resolve_cost_model("learned", w)[0]):
        assert model.breakdown(w, shared) == model.breakdown(w, tables)


def test_a_table_held_to_table_wise_keeps_its_label():
    w = _workload(2, only_table_wise=("t1",))
    shared = share_kernels(w, (_columns("t0", [0, 1], 1000, 64), _whole("t1", 0, 1001, 64)))
    assert shared[1].sharding_type == "table_wise"


def test_the_commonest_column_kind_on_the_rank_wins():
    w = _workload(4)
    tables = (_columns("t0", [0, 1], 1000, 64, "table_column_wise"), _columns("t1", [0, 2], 1001, 64),
              _columns("t2", [0, 1], 1002, 64, "table_column_wise"), _whole("t3", 0, 1003, 64))
    shared = share_kernels(w, tables)
    assert shared[3].sharding_type == "table_column_wise"
    for model in (AnalyticCostModel(), resolve_cost_model("learned", w)[0]):  # the same rule prices it
        assert model.breakdown(w, shared) == model.breakdown(w, tables)


def test_overheads_count_a_kernel_per_kind_with_whole_tables_in_the_column_kernel():
    w, _ = read_workload(DATA / "good.yaml")
    model = AnalyticCostModel()
    one = model.overheads(w, {"table_wise"})
    assert model.overheads(w, {"table_wise", "column_wise"}) == one
    two = model.overheads(w, {"column_wise", "table_column_wise"})
    assert two[0] == 2 * one[0] and two[1] == 2 * one[1]  # kernel calls
    assert two[2] == 2 * one[2] and two[3] == 2 * one[3]  # a sharding's all-to-alls per kind
    assert kernel_kinds({"table_wise", "data_parallel"}) == {"table_wise", "data_parallel"}


def test_replicas_and_each_kind_are_kernels_of_their_own():
    w, _ = read_workload(DATA / "good.yaml")
    plan = read_plan(DATA / "good_plan.json")
    tables = list(plan.tables)
    tables[2] = replace(tables[2], sharding_type="data_parallel", shards=tuple(
        Shard(rank=r, offsets=(0, 0), sizes=(300, 16)) for r in (0, 1)))
    tables[0] = replace(tables[0], sharding_type="column_wise")
    keys = [sorted(r) for r in rank_kernels(w, tables)]
    assert keys == [[("fp16", "data_parallel"), ("fp32", "table_wise")],
                    [("fp16", "data_parallel"), ("fp32", "column_wise")]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.sampled_from(["column_wise", "table_column_wise"])),
                min_size=1, max_size=8))
def test_relabelling_keeps_every_shard_and_leaves_the_kernels_the_model_counts(draw):
    """Property: shards unchanged, idempotent, and each rank runs the kernels kernel_kinds counts."""
    w = _workload(len(draw), world=4)
    tables = tuple(_columns(f"t{i}", [r, (r + 1) % 4], 1000 + i, 64, kind) if cut else _whole(f"t{i}", r, 1000 + i, 64)
                   for i, (cut, r, kind) in enumerate(draw))
    shared = share_kernels(w, tables)
    assert [(t.name, t.shards) for t in shared] == [(t.name, t.shards) for t in tables]
    assert share_kernels(w, shared) == shared
    labels = [set() for _ in range(4)]
    for t in shared:
        for s in t.shards:
            labels[s.rank].add(t.sharding_type)
    assert all(lab == kernel_kinds(lab) for lab in labels)
