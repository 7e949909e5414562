"""Tables measured alone (``shardopt.measure.alone``): the workload that puts each table on a rank
of its own, and each replica the search may choose timed in TorchRec's dense kernel."""

from __future__ import annotations

import numpy as np
import pytest

from shardopt.costmodel.table_factors import RankSample, fit_factors


def _workload(seed: int = 2000, regime: str = "compute"):
    from shardopt.bench.regimes import regime_task

    return regime_task(regime, seed).workload


def test_every_table_is_alone_on_its_own_rank_with_its_own_lookups_and_an_empty_kernel_last():
    from shardopt.core.workload import workload_from_dict, workload_to_dict
    from shardopt.measure.alone import alone_plan

    data = workload_to_dict(_workload())
    data["tables"][0]["name"] = "empty-kernel-0"  # a user's table may bear the empty kernel's name
    workload = workload_from_dict(data)
    alone, plan = alone_plan(workload)
    count = len(workload.tables)
    assert alone.topology.world_size == plan.world_size == count + 1 and alone.topology.num_hosts == 1
    assert [tp.name for tp in plan.tables[:count]] == [t.name for t in workload.tables]
    assert [tp.ranks for tp in plan.tables] == [(r,) for r in range(count + 1)]
    for tp, table in zip(plan.tables, alone.tables):
        assert tp.sharding_type == "table_wise" and tp.shards[0].sizes == (table.num_embeddings, table.embedding_dim)
    empty = alone.tables[-1]
    assert empty.name not in {t.name for t in workload.tables} and empty.num_embeddings <= 64
    # every table sees the global batch it sees in the workload (a table-wise table's ids of every sample)
    batch = workload.batch_size * workload.topology.world_size
    assert abs(alone.batch_size * (count + 1) - batch) <= (count + 1) / 2


def test_a_workload_of_more_tables_than_ranks_may_be_is_not_measured_alone(monkeypatch):
    from shardopt.measure import alone as module

    workload = _workload()
    monkeypatch.setattr(module, "MAX_WORLD", len(workload.tables))
    assert module.alone_plan(workload) is None


def test_a_sample_counted_ten_times_outweighs_one_that_says_otherwise():
    alone = RankSample((0.0, 0.0), {"t": (1.0, 1.0)}, (2.0, 2.0), weight=10.0)
    rank = RankSample((0.0, 0.0), {"t": (1.0, 1.0)}, (1.0, 1.0))
    factor = fit_factors([alone, rank], ridge=0.0)["t"][1]
    assert 1.8 < factor < 2.0
    assert fit_factors([RankSample((0.0, 0.0), {"t": (1.0, 1.0)}, (2.0, 2.0)), rank], ridge=0.0)["t"][1] == pytest.approx(
        np.sqrt(2.0), rel=1e-6)


def _replicable_workload(dp_allowed: bool = True):
    from shardopt.core.workload import workload_from_dict

    types = None if dp_allowed else ["table_wise", "column_wise"]
    tables = [{"name": f"c{i}", "num_embeddings": 4_000, "embedding_dim": 32, "pooling_factor": 4.0,
               **({"sharding_types": types} if types else {})} for i in range(5)]
    tables.append({"name": "hot", "num_embeddings": 600, "embedding_dim": 16, "pooling_factor": 200.0,
                   **({"sharding_types": types} if types else {})})
    return workload_from_dict({"version": 1, "name": "r", "batch_size": 64, "tables": tables,
                               "topology": {"world_size": 4, "hbm_cap": "1GB", "compute_device": "cpu"}})


def test_a_table_the_search_may_replicate_is_measured_as_a_replica_and_priced_in_that_kernel_only():
    from shardopt.contracts import PlanConfig, ShardSpec
    from shardopt.costmodel.analytic import AnalyticCostModel
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.alone import replica_factors
    from shardopt.search.candidates import workload_candidates

    workload = _replicable_workload()
    model, _ = resolve_cost_model("analytic", workload)
    candidates, _ = workload_candidates(workload, model, PlanConfig().candidates)
    replicable = {name for name, cands in candidates.items() if any(c.sharding_type == "data_parallel" for c in cands)}
    assert "hot" in replicable
    factors = replica_factors(model, workload, iters=3)
    assert {f.name for f in factors} == replicable and {f.kernel for f in factors} == {"dense"}
    assert all(1 / 8 <= x <= 8 for f in factors for x in (f.fwd, f.bwd))
    hot = next(f for f in factors if f.name == "hot")
    priced = AnalyticCostModel(calibration=__import__("dataclasses").replace(model.calibration, table_factors=factors))
    table = workload.table("hot")
    replica = ShardSpec(table, "data_parallel", 600, 16, "dense")
    assert priced.shard_cost(workload, replica).bwd_compute_ms == pytest.approx(
        hot.bwd * model.shard_cost(workload, replica).bwd_compute_ms)
    whole = ShardSpec(table, "table_wise", 600, 16)
    assert priced.shard_cost(workload, whole) == model.shard_cost(workload, whole)
    # a workload whose tables may not be replicated measures none
    assert replica_factors(model, _replicable_workload(dp_allowed=False)) == ()
