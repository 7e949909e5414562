"""One contract suite: every cost model and every search through the same checks.

A new model or search joins by adding itself to ``MODELS`` or ``SEARCHES``; what it must satisfy
is written once, here, not in each model's own tests.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from click.testing import CliRunner
from conftest import CONFIGS

from shardopt.arithmetic.checks import check_plan
from shardopt.arithmetic.traffic import CommBytes
from shardopt.bench.baselines import RandomTableWise, TableWiseGreedy
from shardopt.contracts import OBJECTIVES, PHASES, Breakdown, PlanConfig, ShardSpec, rank_phases
from shardopt.cli import main
from shardopt.core.errors import ShardoptError
from shardopt.core.plan import plan_to_json, read_plan
from shardopt.core.workload import read_workload, workload_from_dict
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.registry import resolve_cost_model
from shardopt.planner import build_search, plan_with, plan_workload
from shardopt.search.greedy import GreedySearch
from shardopt.search.ilp import IlpSearch
from shardopt.search.sampler import PlanSampler


def _workload(world: int = 4, tables: int = 9, device: str = "cpu"):
    rows = [20_000, 150_000, 3_000, 80_000, 400_000, 1_000, 60_000, 9_000, 250_000]
    return workload_from_dict({
        "version": 1, "name": "contract", "batch_size": 256,
        "topology": {"world_size": world, "local_world_size": min(world, 2), "hbm_cap": "2GB",
                     "compute_device": device},
        "tables": [{"name": f"t{i}", "num_embeddings": rows[i % len(rows)], "embedding_dim": 16 * (1 + i % 4),
                    "pooling_factor": 1.0 + 3 * (i % 5),
                    "access": {"distribution": "zipf", "alpha": 1.1} if i % 3 == 0 else {"distribution": "uniform"}}
                   for i in range(tables)],
    })


WORKLOAD = _workload()
MODELS = {
    "analytic-v0": lambda w: AnalyticCostModel(),
    "analytic": lambda w: resolve_cost_model("analytic", w)[0],
    "learned": lambda w: resolve_cost_model("learned", w)[0],
}
SEARCHES = {
    "ilp": lambda: IlpSearch(time_limit_s=1.0),
    "ilp-all": lambda: IlpSearch(time_limit_s=1.0, candidates="all"),
    "greedy": lambda: GreedySearch(repair_s=0.2),
    "sampled": lambda: PlanSampler(seed=3),
    "size-greedy": lambda: TableWiseGreedy("size-greedy"),
    "random": lambda: RandomTableWise(seed=1),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request) -> CostModel:
    return MODELS[request.param](WORKLOAD)


@pytest.fixture(scope="module")
def plan_tables():
    return plan_workload(WORKLOAD, search=GreedySearch(repair_s=0, candidates="all")).tables


def test_a_breakdown_has_one_entry_per_rank_whose_total_is_its_phases(model, plan_tables):
    ranks = model.breakdown(WORKLOAD, plan_tables)
    assert [r.rank for r in ranks] == list(range(WORKLOAD.topology.world_size))
    for r in ranks:
        assert all(x >= 0 for x in rank_phases(r))
        assert r.total_ms == pytest.approx(sum(rank_phases(r)))
    b = Breakdown.of(ranks)
    assert b.bottleneck_ms == max(r.total_ms for r in ranks)
    assert b.bottleneck_ms <= b.step_ms + 1e-9  # the slowest rank's sum is at most the phases' maxima summed


def test_a_breakdown_is_the_same_for_the_same_plan(model, plan_tables):
    assert model.breakdown(WORKLOAD, plan_tables) == model.breakdown(WORKLOAD, plan_tables)


def test_shard_floor_is_at_most_shard_cost_and_costs_are_finite(model):
    for table in WORKLOAD.tables:
        for kind, rows, cols in (("table_wise", table.num_embeddings, table.embedding_dim),
                                 ("column_wise", table.num_embeddings, table.embedding_dim // 2)):
            spec = ShardSpec(table, kind, rows, cols)
            cost, floor = model.shard_cost(WORKLOAD, spec), model.shard_floor(WORKLOAD, spec)
            assert 0 < cost.total_ms < float("inf")
            assert floor.total_ms <= cost.total_ms + 1e-9
            assert cost.hbm_bytes == floor.hbm_bytes > 0
    if not model.floor_below_cost:
        spec = ShardSpec(WORKLOAD.tables[0], "table_wise", 100, 16)
        assert model.shard_floor(WORKLOAD, spec) == model.shard_cost(WORKLOAD, spec)


def test_the_declared_capabilities_agree(model):
    """A model reading comm off measured curves is not additive and gives a comm floor."""
    curves = model.comm_curves(WORKLOAD)
    if curves is not None:
        assert not model.additive(WORKLOAD)
        assert model.comm_floor_ms(WORKLOAD, CommBytes()) is not None
    assert model.compute_overhead_ms(WORKLOAD, {"table_wise"}) <= model.rank_overhead_ms(WORKLOAD, {"table_wise"}) + 1e-9


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_every_search_gives_a_valid_deterministic_plan_above_its_bound(name):
    model = AnalyticCostModel()
    first = plan_workload(WORKLOAD, cost_model=model, search=SEARCHES[name]())
    again = plan_workload(WORKLOAD, cost_model=model, search=SEARCHES[name]())
    assert check_plan(WORKLOAD, first).valid
    assert first == again
    assert first.predicted.lower_bound_ms <= first.predicted.max_ms + 1e-9
    assert (first.predicted.search.objective is None) == (SEARCHES[name]().objective is None)


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_every_search_refuses_what_cannot_fit_with_exit_3(name):
    tight = workload_from_dict({
        "version": 1, "name": "tight", "batch_size": 64,
        "topology": {"world_size": 2, "hbm_cap": "1MB", "compute_device": "cpu"},
        "tables": [{"name": "big", "num_embeddings": 4_000, "embedding_dim": 64, "pooling_factor": 2,
                    "sharding_types": ["table_wise"]}]})  # 1 MB on one rank, which holds 1 MB less a little
    with pytest.raises(ShardoptError) as info:
        plan_workload(tight, search=SEARCHES[name]())
    assert info.value.exit_code == 3


@settings(max_examples=40, deadline=None, derandomize=True)
@given(search=st.sampled_from(["ilp", "greedy"]), time_limit=st.floats(0.01, 3600),
       candidates=st.sampled_from(["torchrec", "all"]), objective=st.sampled_from(sorted(OBJECTIVES)),
       cost_model=st.sampled_from(["analytic", "analytic-v0", "learned", "models/x.json"]))
def test_plan_config_round_trips_through_json(search, time_limit, candidates, objective, cost_model):
    config = PlanConfig(search=search, time_limit_s=time_limit, candidates=candidates, objective=objective,
                        cost_model=cost_model)
    assert PlanConfig.from_json(config.to_json()) == config
    built = build_search(config)
    assert (built.name, built.candidate_set, built.objective.name) == (search, candidates, objective)


@pytest.mark.parametrize("text", ['{"search": "sat"}', '{"time_limit_s": 0}', '{"time_limit_s": "5"}',
                                  '{"objective": "mean"}', '{"extra": 1}', '[]', '{"time_limit_s": NaN}'])
def test_a_bad_plan_config_is_one_line_naming_the_field(text):
    with pytest.raises(ShardoptError) as info:
        PlanConfig.from_json(text, "cfg.json")
    assert str(info.value).startswith("cfg.json") and "\n" not in str(info.value)


def test_cli_plugin_bench_and_search_defaults_are_the_configs(tmp_path, monkeypatch):
    """The defaults a user meets on every way in are one: PlanConfig's."""
    from shardopt.bench.suite import planner_search
    from shardopt.torchrec.planner import ShardoptPlanner

    default = PlanConfig()
    for search in (IlpSearch(), build_search(default), planner_search("shardopt")):
        assert (search.candidate_set, search.time_limit_s, search.objective.name) == (
            default.candidates, default.time_limit_s, default.objective)
    assert GreedySearch().candidate_set == default.candidates
    assert ShardoptPlanner(batch_size=8).config == default
    # and the CLI's `plan` with no options plans exactly what plan_with(default) plans
    shutil.copy(CONFIGS / "tiny.yaml", tmp_path / "tiny.yaml")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["plan", "tiny.yaml", "-o", "p.json", "-q"])
    assert result.exit_code == 0, result.output
    workload, sha = read_workload("tiny.yaml")
    expected = plan_with(workload, default, sha256=sha, source="tiny.yaml")
    assert plan_to_json(read_plan("p.json")) == plan_to_json(expected)


def test_phases_are_the_four_of_a_step():
    assert PHASES == ("fwd_compute_ms", "fwd_comm_ms", "bwd_compute_ms", "bwd_comm_ms")
    assert json.loads(PlanConfig().to_json())["comm_source"] == "auto"
