"""Ranks alike in make-up (``search/makeup.py``): the robust search's last step moves and swaps
pieces so that the plan holds under variants of the model whose error leans with the shapes."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardopt.arithmetic.memory import plan_memory
from shardopt.contracts import CRITICAL_PATH, PlanConfig, ShardSpec, rank_phases
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import workload_from_dict, workload_to_dict
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.uncertainty import doubt_for, makeup_variants, robust_objective
from shardopt.planner.factory import plan_with
from shardopt.search.makeup import even_makeup

SIGMA = 0.3


def _workload(dims, rows=None, world=2, local=None, cap="4GB", pooling=None):
    tables = [{"name": f"t{i}", "num_embeddings": (rows or [20_000] * len(dims))[i], "embedding_dim": d,
               "pooling_factor": (pooling or [10] * len(dims))[i]} for i, d in enumerate(dims)]
    topology = {"world_size": world, "hbm_cap": cap, "compute_device": "cpu"}
    if local:
        topology["local_world_size"] = local
    return workload_from_dict({"version": 1, "name": "m", "batch_size": 512, "topology": topology,
                               "tables": tables})


def _table_wise(workload, ranks):
    return tuple(TablePlan(name=t.name, sharding_type="table_wise", shards=(
        Shard(rank=r, offsets=(0, 0), sizes=(t.num_embeddings, t.embedding_dim)),))
        for t, r in zip(workload.tables, ranks))


def _objective(workload, model):
    return robust_objective(workload, model, dataclasses.replace(doubt_for(model, workload), sigma=tuple(
        (t.name, SIGMA) for t in workload.tables)))


def _variant_steps(workload, model, tables, objective):
    """The critical-path step of ``tables`` under the nominal model and each shape variant."""
    tilt = dict(objective.makeup)
    steps = []
    for v in range(1 + len(next(iter(tilt.values())))):
        load = np.zeros((workload.topology.world_size, 4))
        for tp in tables:
            f = 1.0 if v == 0 else tilt[tp.name][v - 1]
            for shard in tp.shards:
                phases = np.array(rank_phases(model.shard_cost(workload, ShardSpec.placed(workload.table(tp.name), tp, shard))))
                phases[[0, 2]] *= f
                load[shard.rank] += phases
        steps.append(float(load.max(axis=0).sum()))
    return steps


def test_ranks_of_one_shape_each_are_mixed_so_the_plan_holds_whichever_way_the_error_leans():
    # rank 0: four wide tables, rank 1: eight narrow ones, level under the nominal model; an
    # error that leans with the dimension makes one rank slow, a mix of both is level under any
    workload = _workload([128] * 4 + [32] * 8, rows=[20_000] * 4 + [20_000] * 8)
    model = AnalyticCostModel()
    objective = _objective(workload, model)
    tables = _table_wise(workload, [0] * 4 + [1] * 8)
    before = _variant_steps(workload, model, tables, objective)
    mixed, moves = even_makeup(workload, model, tables, objective)
    after = _variant_steps(workload, model, mixed, objective)
    assert moves > 0 and np.mean(after) < 0.97 * np.mean(before)
    assert max(after) < max(before)
    dims_on = [{workload.table(tp.name).embedding_dim for tp in mixed if tp.shards[0].rank == r} for r in (0, 1)]
    assert dims_on == [{32, 128}, {32, 128}]


@settings(max_examples=25, deadline=None)
@given(dims=st.lists(st.sampled_from([16, 32, 64, 128, 256]), min_size=3, max_size=14),
       seed=st.integers(0, 10_000), world=st.sampled_from([2, 3, 4]))
def test_makeup_never_worsens_its_score_and_keeps_every_rule(dims, seed, world):
    rng = np.random.default_rng(seed)
    rows = [int(r) for r in rng.integers(1_000, 60_000, len(dims))]
    pooling = [float(p) for p in rng.uniform(1, 120, len(dims)).round(1)]
    workload = _workload(dims, rows=rows, world=world, cap="200MB", pooling=pooling)
    model = AnalyticCostModel()
    objective = _objective(workload, model)
    caps = workload.topology.hbm_cap
    ranks = [int(r) for r in rng.integers(0, world, len(dims))]
    tables = _table_wise(workload, ranks)
    if max(plan_memory(workload, tables)[0].values()) > caps:
        return  # the starting plan must fit
    mixed, moves = even_makeup(workload, model, tables, objective)
    before, after = _variant_steps(workload, model, tables, objective), _variant_steps(workload, model, mixed, objective)
    assert np.mean(after) <= np.mean(before) * (1 + 1e-9) + 1e-9
    assert max(plan_memory(workload, mixed)[0].values()) <= caps
    assert [(tp.name, [(s.offsets, s.sizes) for s in tp.shards]) for tp in mixed] == [
        (tp.name, [(s.offsets, s.sizes) for s in tp.shards]) for tp in tables]
    assert (moves == 0) == (mixed == tables)
    assert even_makeup(workload, model, tables, objective) == (mixed, moves)  # same input, same plan


def test_pieces_stay_on_their_host_and_nothing_moves_without_variants_or_on_unlike_ranks():
    workload = _workload([128] * 4 + [32] * 4, world=4, local=2)
    model = AnalyticCostModel()
    objective = _objective(workload, model)
    tables = _table_wise(workload, [0, 0, 2, 2, 1, 1, 3, 3])
    mixed, moves = even_makeup(workload, model, tables, objective)
    assert moves > 0
    host = workload.topology.host_of
    assert all(host(a.shards[0].rank) == host(b.shards[0].rank) for a, b in zip(tables, mixed))
    assert even_makeup(workload, model, tables, CRITICAL_PATH) == (tables, 0)
    assert even_makeup(workload, model, tables, dataclasses.replace(objective, makeup=())) == (tables, 0)
    data = workload_to_dict(workload)
    data["topology"]["ranks"] = [{"ranks": [0], "speed": 0.5}]
    slow = workload_from_dict(data)
    assert even_makeup(slow, model, tables, _objective(slow, model)) == (tables, 0)


def test_variants_tilt_each_shape_axis_both_ways_by_the_doubt():
    workload = _workload([16, 64, 256], rows=[1_000, 10_000, 100_000], pooling=[5, 5, 5])
    variants = dict(makeup_variants(workload, 0.4))
    assert set(variants) == {"t0", "t1", "t2"}
    assert all(len(v) == 4 for v in variants.values())  # rows and dimension, each way; pooling alike
    assert variants["t1"] == pytest.approx((1.0, 1.0, 1.0, 1.0))  # the middle table: no tilt
    assert variants["t0"][0] == pytest.approx(1 / variants["t0"][2]) and variants["t0"][0] < 1 < variants["t2"][0]
    assert makeup_variants(workload, 0.0) == ()
    assert makeup_variants(_workload([64, 64], pooling=[5, 5]), 0.4) == ()


def test_a_robust_plan_ends_in_makeup_and_a_nominal_one_does_not():
    workload = _workload([128] * 6 + [32] * 10, world=4)
    model = AnalyticCostModel()
    model.held_out = 0.1
    robust = plan_with(workload, PlanConfig(robust="on"), cost_model=model)
    nominal = plan_with(workload, PlanConfig(robust="off"), cost_model=model)
    assert "+makeup" not in nominal.predicted.search.algorithm
    assert isinstance(robust.predicted.search.objective, str) and robust.predicted.search.robust
    assert plan_with(workload, PlanConfig(robust="on"), cost_model=model) == robust
