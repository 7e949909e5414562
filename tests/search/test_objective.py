"""The critical-path objective: a synchronous step waits for the slowest rank in every phase, so
the search balances lookups and traffic each where the bottleneck alone would not care."""

from dataclasses import replace

import pytest

from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import ShardCost
from shardopt.planner import plan_workload
from shardopt.search.ilp import IlpSearch
from shardopt.contracts import BOTTLENECK, CRITICAL_PATH, Breakdown, rank_phases
from shardopt.search.repair import repair_bottleneck
from shardopt.core.workload import workload_from_dict

# (compute ms, comm ms) per table: every pair costs 8 ms on a rank, but only {a, b} | {c, d}
# splits compute 4 | 4 and traffic 4 | 4; {a, c} | {b, d} splits them 5 | 3 and 3 | 5.
COSTS = {"a": (3.0, 1.0), "b": (1.0, 3.0), "c": (2.0, 2.0), "d": (2.0, 2.0)}


class FixedCosts(AnalyticCostModel):
    """Table-wise shards with the costs above, halved between forward and backward, and no
    per-rank overheads: additive by design."""

    def _shard_cost(self, workload, hw, spec, *args) -> ShardCost:
        compute, comm = COSTS[spec.table.name]
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


def _moved(tables, ranks):
    return tuple(replace(tp, shards=tuple(replace(s, rank=ranks[tp.name]) for s in tp.shards)) for tp in tables)


def test_the_ilp_pairs_lookup_heavy_with_traffic_heavy_tables():
    model = FixedCosts()
    plan = plan_workload(WORKLOAD, cost_model=model,
                         search=IlpSearch(candidates="all", time_limit_s=5, good_enough_gap=0.0, objective=CRITICAL_PATH))
    assert _pairs(plan.tables) == [frozenset("ab"), frozenset("cd")]
    assert Breakdown.of(plan.predicted.per_rank).step_ms == pytest.approx(8.0)
    assert plan.predicted.max_ms == pytest.approx(8.0)
    assert plan.predicted.search.objective == "critical-path"


def test_repair_turns_a_balanced_bottleneck_into_a_balanced_step():
    model = FixedCosts()
    plan = plan_workload(WORKLOAD, cost_model=model,
                         search=IlpSearch(candidates="all", time_limit_s=5, good_enough_gap=0.0, objective=BOTTLENECK))
    # a and c together: every rank's total is 8 ms, but the step waits 2.5 ms in every phase.
    lopsided = _moved(plan.tables, {"a": 0, "c": 0, "b": 1, "d": 1})
    per_rank = model.breakdown(WORKLOAD, lopsided)
    assert Breakdown.of(per_rank).bottleneck_ms == pytest.approx(8.0)
    assert Breakdown.of(per_rank).step_ms == pytest.approx(10.0)
    untouched = repair_bottleneck(WORKLOAD, model, lopsided, time_budget_s=1, objective=BOTTLENECK)
    assert untouched.moves == 0  # nothing to gain for the bottleneck
    fixed = repair_bottleneck(WORKLOAD, model, lopsided, time_budget_s=1, objective=CRITICAL_PATH)
    assert _pairs(fixed.tables) == [frozenset("ab"), frozenset("cd")]
    assert (fixed.before_score, fixed.after_score) == (pytest.approx(10.0), pytest.approx(8.0))
    assert Breakdown.of(model.breakdown(WORKLOAD, fixed.tables)).step_ms == pytest.approx(8.0)


def test_scores_and_the_ranks_to_move_off():
    ranks = [(2.5, 1.5, 2.5, 1.5), (1.5, 2.5, 1.5, 2.5), (1.0, 1.0, 1.0, 1.0)]
    assert BOTTLENECK.score(ranks) == pytest.approx(8.0)
    assert CRITICAL_PATH.score(ranks) == pytest.approx(10.0)
    assert CRITICAL_PATH.score([]) == 0.0
    # The bottleneck: the worst rank (lowest index on ties), every phase weighed.
    assert BOTTLENECK.sources(ranks) == [(0, (1.0, 1.0, 1.0, 1.0))]
    # The critical path: each phase's slowest rank, weighed by the phases it is slowest in.
    assert CRITICAL_PATH.sources(ranks) == [(0, (1.0, 0.0, 1.0, 0.0)), (1, (0.0, 1.0, 0.0, 1.0))]
    cost = ShardCost(1.0, 2.0, 3.0, 4.0, hbm_bytes=0)
    assert rank_phases(cost) == (1.0, 3.0, 2.0, 4.0)  # fwd compute, fwd comm, bwd compute, bwd comm
