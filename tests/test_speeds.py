"""Compute-speed scenarios: the search balances compute and traffic each where the model alone
would not care, and a spread of 0 is the model's speed alone."""

from dataclasses import replace

import pytest

from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import ShardCost
from shardopt.planner import plan_workload
from shardopt.search.ilp import IlpSearch
from shardopt.search.repair import repair_bottleneck
from shardopt.search.speeds import NOMINAL, SpeedScenarios
from shardopt.workload import workload_from_dict

SPREAD = SpeedScenarios.spread(0.25)
# (compute ms, comm ms) per table: every pair costs 8 ms on a rank at the model's speed, but only
# {a, b} | {c, d} splits compute 4 | 4; {a, c} | {b, d} and {a, d} | {b, c} split it 5 | 3.
COSTS = {"a": (3.0, 1.0), "b": (1.0, 3.0), "c": (2.0, 2.0), "d": (2.0, 2.0)}


class FixedCosts(AnalyticCostModel):
    """Table-wise shards with the costs above and no per-rank overheads: additive by design."""

    def _shard_cost(self, workload, hw, table, *args) -> ShardCost:
        compute, comm = COSTS[table.name]
        return ShardCost(compute / 2, compute / 2, comm / 2, comm / 2, hbm_bytes=1000)

    def overheads(self, workload, sharding_types):
        return 0.0, 0.0, 0.0, 0.0


WORKLOAD = workload_from_dict({
    "version": 1, "name": "mix", "batch_size": 64,
    "topology": {"world_size": 2, "hbm_cap": "1GB", "compute_device": "cpu"},
    "tables": [{"name": n, "num_embeddings": 1000, "embedding_dim": 32, "pooling_factor": 2,
                "sharding_types": ["table_wise"]} for n in COSTS],
})


def _pairs(plan_tables):
    ranks: dict[int, set[str]] = {}
    for tp in plan_tables:
        ranks.setdefault(tp.shards[0].rank, set()).add(tp.name)
    return sorted(map(frozenset, ranks.values()), key=sorted)


def _loads(model, tables):
    return [(r.fwd_compute_ms + r.bwd_compute_ms, r.fwd_comm_ms + r.bwd_comm_ms)
            for r in model.breakdown(WORKLOAD, tables)]


def test_the_ilp_under_several_speeds_pairs_compute_heavy_with_traffic_heavy():
    model = FixedCosts()
    plan = plan_workload(WORKLOAD, cost_model=model,
                         search=IlpSearch(time_limit_s=5, good_enough_gap=0.0, speeds=SPREAD))
    assert _pairs(plan.tables) == [frozenset("ab"), frozenset("cd")]
    assert plan.predicted.max_ms == pytest.approx(8.0)


def test_repair_under_several_speeds_rebalances_compute_of_a_nominally_balanced_plan():
    model = FixedCosts()
    nominal = plan_workload(WORKLOAD, cost_model=model,
                            search=IlpSearch(time_limit_s=5, good_enough_gap=0.0, speeds=NOMINAL))
    # Put a and c together: balanced at the model's speed, 5 | 3 in compute.
    ranks = {"a": 0, "c": 0, "b": 1, "d": 1}
    lopsided = tuple(replace(tp, shards=tuple(replace(s, rank=ranks[tp.name]) for s in tp.shards))
                     for tp in nominal.tables)
    assert max(c + m for c, m in _loads(model, lopsided)) == pytest.approx(8.0)
    untouched = repair_bottleneck(WORKLOAD, model, lopsided, time_budget_s=1, speeds=NOMINAL)
    assert untouched.moves == 0  # nothing to gain at the model's speed alone
    fixed = repair_bottleneck(WORKLOAD, model, lopsided, time_budget_s=1, speeds=SPREAD)
    assert _pairs(fixed.tables) == [frozenset("ab"), frozenset("cd")]
    assert fixed.after_score < fixed.before_score
    assert fixed.after_ms == pytest.approx(8.0)
    assert SPREAD.score(_loads(model, fixed.tables)) == pytest.approx(fixed.after_score)


def test_scenarios_score_the_weighted_bottleneck_and_reject_bad_input():
    spread = SpeedScenarios.spread(0.25)
    assert spread.factors == (0.8, 1.0, 1.25) and spread.weights == (0.25, 0.5, 0.25)
    assert SpeedScenarios.spread(0) is NOMINAL
    ranks = [(5.0, 3.0), (3.0, 5.0)]
    # 0.8: max(7, 7.4) = 7.4; 1.0: 8; 1.25: max(9.25, 8.75) = 9.25
    assert spread.score(ranks) == pytest.approx(0.25 * 7.4 + 0.5 * 8 + 0.25 * 9.25)
    assert NOMINAL.score(ranks) == pytest.approx(8.0)
    # The model's speed first, then each other speed's bottleneck if it is another rank.
    assert spread.bottlenecks(ranks) == [(0, 1.0), (1, 0.8)]
    for bad in (lambda: SpeedScenarios.spread(-0.1), lambda: SpeedScenarios((1.0, 2.0), (0.5,)),
                lambda: SpeedScenarios((1.0,), (0.5,)), lambda: SpeedScenarios((0.0,), (1.0,))):
        with pytest.raises(ValueError):
            bad()
