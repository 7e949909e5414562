"""One comm-source rule: the declared topology is the target cluster; curves measured elsewhere
price comm only when named explicitly or measured on that very target."""

import json

import pytest

from shardopt.contracts import Breakdown, PlanConfig
from shardopt.core.errors import ShardoptError
from shardopt.core.workload import workload_from_dict
from shardopt.costmodel.comm_source import CommProfile, choose_comm, load_comm_profile
from shardopt.costmodel.registry import resolve_cost_model
from shardopt.planner import plan_with, resolve_model

BASE = {"version": 1, "name": "links", "batch_size": 512,
        "topology": {"world_size": 4, "hbm_cap": "4GB", "compute_device": "cpu"},
        "tables": [{"name": f"t{i}", "num_embeddings": 20_000 + 5_000 * i, "embedding_dim": 64 * (1 + i % 2),
                    "pooling_factor": 4 + 3 * i} for i in range(8)]}


def _workload(**topology):
    return workload_from_dict({**BASE, "topology": {**BASE["topology"], **topology}})


def _kind(workload, profile=None):
    model, _ = resolve_cost_model("analytic", workload, profile)
    return model.comm_choice(workload)


def test_curves_measured_on_the_target_price_a_workload_that_declares_nothing():
    choice = _kind(_workload())
    assert choice.kind == "measured" and choice.curves is not None


@pytest.mark.parametrize("links", [{"intra_host_bw": 100}, {"comm_latency_us": 5}, {"inter_host_bw": 3}])
def test_any_declared_link_makes_the_declared_topology_the_source(links):
    choice = _kind(_workload(**links))
    assert choice.kind == "declared" and choice.curves is None and choice.fitted is None
    assert "declared links" in choice.label


def test_curves_from_one_host_do_not_price_a_cluster_of_several():
    """The packaged CPU curves were measured with every rank on one host: two hosts are another
    target, priced from the hardware profile's links."""
    choice = _kind(_workload(local_world_size=2))
    assert choice.kind == "hardware" and "inter-host" in choice.label


def test_curves_from_other_hardware_are_not_the_target():
    choice = _kind(workload_from_dict({**BASE, "topology": {**BASE["topology"], "compute_device": "cuda",
                                                            "hardware": "a100"}}))
    assert choice.kind == "hardware" and "a100" in choice.label


def test_an_explicit_profile_wins_and_must_cover_the_world_size(tmp_path):
    model, _ = resolve_cost_model("analytic", _workload())
    curves = model.comm_curves(_workload())
    choice = choose_comm(_workload(intra_host_bw=100), profile=CommProfile(curves, "mine"))
    assert choice.kind == "profile" and choice.curves is curves
    with pytest.raises(ShardoptError, match="world size 16"):
        choose_comm(_workload(world_size=16), profile=CommProfile(curves, "mine"))
    with pytest.raises(ShardoptError, match="not a profile"):
        load_comm_profile(str(tmp_path))


def test_a_declared_bandwidth_changes_the_prediction_and_the_plan():
    """Slow inter-host links make cuts that send more bytes dearer: the prediction grows and the
    plan moves away from them."""
    fast, slow = _workload(local_world_size=2, inter_host_bw=100), _workload(local_world_size=2, inter_host_bw=0.05)
    config = PlanConfig(time_limit_s=1.0)
    plans = {}
    for name, wl in (("fast", fast), ("slow", slow)):
        model, _ = resolve_model(config, wl)
        plans[name] = plan_with(wl, config, cost_model=model)
    model, _ = resolve_model(config, slow)
    same = [Breakdown.of(resolve_model(config, w)[0].breakdown(w, plans["fast"].tables)).step_ms for w in (fast, slow)]
    assert same[1] > 1.5 * same[0]
    assert [t.sharding_type for t in plans["fast"].tables] != [t.sharding_type for t in plans["slow"].tables] or \
        [t.shards for t in plans["fast"].tables] != [t.shards for t in plans["slow"].tables]
    assert "inter-host 0.05 GB/s" in plans["slow"].predicted.comm_source
    assert json.loads(json.dumps(plans["slow"].predicted.comm_source))


def test_the_learned_model_prices_declared_links_as_the_analytic_does():
    from shardopt.costmodel.analytic import AnalyticCostModel

    wl = _workload(intra_host_bw=1)
    learned, _ = resolve_cost_model("learned", wl)
    plan = plan_with(wl, PlanConfig(time_limit_s=0.5))
    ours = [x for r in learned.breakdown(wl, plan.tables) for x in (r.fwd_comm_ms, r.bwd_comm_ms)]
    analytic = [x for r in AnalyticCostModel().breakdown(wl, plan.tables) for x in (r.fwd_comm_ms, r.bwd_comm_ms)]
    assert ours == pytest.approx(analytic)
