"""The robust objective: the step under the model's doubt (compute x1/3..x3 against communication,
each table's own error), its invariants, and what it does to a plan and its report."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CONFIGS, run_cli
from shardopt.contracts import BOTTLENECK, Breakdown, CRITICAL_PATH, ROBUST_TIE, PlanConfig, RobustObjective
from shardopt.core.plan import plan_to_json
from shardopt.core.workload import read_workload, workload_from_dict
from shardopt.costmodel.base import ShardCost
from shardopt.costmodel.uncertainty import (
    SIGMA_FLOOR,
    SIGMA_OUTSIDE,
    _in_rank_order,
    doubt_for,
    is_robust,
    plan_score,
    robust_objective,
)
from shardopt.planner.factory import plan_with, resolve_model, search_objective
from shardopt.profile.dataset import CPU_ID_VARIABLE

PACKAGED_CPU = "AuthenticAMD/25/17/1 avx2+avx512f+avx512_bf16"  # the packaged CPU model's fingerprint
FOREIGN_CPU = "GenuineIntel/6/85/7 avx2"

phase = st.floats(0.0, 50.0, allow_nan=False)
peaks = st.tuples(phase, phase, phase, phase)
scales = st.lists(st.floats(0.05, 20.0), min_size=1, max_size=4).map(lambda s: tuple(sorted({1.0, *s})))
balanced = st.tuples(st.floats(0.01, 50.0), st.floats(0.0, 50.0))


@settings(max_examples=200, deadline=None)
@given(p=peaks, s=scales, b=balanced, penalty=st.floats(0.0, 10.0))
def test_the_robust_score_is_at_least_the_nominal_step_and_grows_with_the_penalty(p, s, b, penalty):
    robust = RobustObjective(CRITICAL_PATH.name, scales=s, balanced=b)
    nominal = CRITICAL_PATH.score_peaks(p)
    assert robust.score_peaks(p) >= nominal * (1 - 1e-12)
    assert robust.score_peaks(p, penalty) >= robust.score_peaks(p) - 1e-9
    # the vectorised form scores every row alike
    rows = np.array([p, tuple(x * 2 for x in p)])
    assert np.allclose(robust.score_rows(rows, penalty), [robust.score_peaks(r, penalty) for r in rows])


@settings(max_examples=100, deadline=None)
@given(p=peaks, q=peaks, b=balanced)
def test_one_scale_and_no_variance_orders_plans_as_the_nominal_step(p, q, b):
    robust = RobustObjective(CRITICAL_PATH.name, scales=(1.0,), balanced=b)
    assert robust.score_peaks(p) == pytest.approx((1 + ROBUST_TIE) * CRITICAL_PATH.score_peaks(p))
    if abs(CRITICAL_PATH.score_peaks(p) - CRITICAL_PATH.score_peaks(q)) > 1e-6:
        assert (robust.score_peaks(p) < robust.score_peaks(q)) == (
            CRITICAL_PATH.score_peaks(p) < CRITICAL_PATH.score_peaks(q))


def test_at_three_times_the_compute_a_compute_heavy_plan_loses():
    # nominal: A (compute 6, comm 3) = 9 beats B (compute 4, comm 5.5) = 9.5; lookups x3 undo it
    robust = RobustObjective(CRITICAL_PATH.name, scales=(1 / 3, 1.0, 3.0), balanced=(4.0, 4.0))
    a, b = (3.0, 1.5, 3.0, 1.5), (2.0, 2.75, 2.0, 2.75)  # PHASES: lookups, all-to-all, lookups, all-to-all
    assert CRITICAL_PATH.score_peaks(a) < CRITICAL_PATH.score_peaks(b)
    assert robust.score_peaks(a) > robust.score_peaks(b)


@given(k=st.integers(1, 16), ms=st.floats(0.01, 100.0))
def test_a_cut_in_k_equal_pieces_adds_a_kth_of_the_whole_tables_penalty(k, ms):
    robust = RobustObjective(CRITICAL_PATH.name, variance=(("t", 0.3, 0.2),))
    whole = robust.penalty_of("t", [ShardCost(ms, ms, 0, 0, 0)])
    cut = robust.penalty_of("t", [ShardCost(ms / k, ms / k, 0, 0, 0)] * k)
    assert cut == pytest.approx(whole / k)
    assert robust.penalty_of("other", [ShardCost(ms, ms, 0, 0, 0)]) == 0.0


def _hot_workload():
    tables = [{"name": f"c{i}", "num_embeddings": 20_000, "embedding_dim": 64, "pooling_factor": 10}
              for i in range(6)]
    tables.append({"name": "hot", "num_embeddings": 2_000, "embedding_dim": 32, "pooling_factor": 250})
    return workload_from_dict({"version": 1, "name": "hot", "batch_size": 512,
                               "topology": {"world_size": 4, "hbm_cap": "1GB", "compute_device": "cpu"},
                               "tables": tables})


def test_the_doubt_follows_the_models_provenance_not_this_machine(monkeypatch):
    workload = _hot_workload()
    model = resolve_model(PlanConfig(), workload)[0]
    monkeypatch.setenv(CPU_ID_VARIABLE, PACKAGED_CPU)
    home = doubt_for(model, workload)
    monkeypatch.setenv(CPU_ID_VARIABLE, FOREIGN_CPU)
    away = doubt_for(model, workload)
    assert home.measured_here and not away.measured_here
    assert home.sigma == away.sigma  # the error sizes are the model's, wherever it runs
    sigma = home.table_sigma()
    assert sigma["hot"] == SIGMA_OUTSIDE  # pooled 250: the profile pooled at most ~100
    assert dict(home.extrapolated)["hot"].startswith("pooled 250")
    assert SIGMA_FLOOR <= sigma["c0"] < SIGMA_OUTSIDE
    assert model.held_out is not None and sigma["c0"] == pytest.approx(max(SIGMA_FLOOR, 2 * model.held_out))
    # auto: robust only away from the model's machine; never for the bottleneck objective
    assert not is_robust("auto", home, CRITICAL_PATH) and is_robust("auto", away, CRITICAL_PATH)
    assert is_robust("on", home, CRITICAL_PATH) and not is_robust("off", away, CRITICAL_PATH)
    assert not is_robust("on", away, BOTTLENECK)


def test_the_robust_objective_weighs_the_uncertain_tables_most():
    workload = _hot_workload()
    model = resolve_model(PlanConfig(), workload)[0]
    objective = robust_objective(workload, model, doubt_for(model, workload))
    assert objective.scales == (1 / 3, 1.0, 3.0)
    weights = {name: f for name, f, _ in objective.variance}
    assert weights["hot"] > weights["c0"] > 0


@pytest.mark.parametrize("robust", ["on", "off"])
def test_a_plan_reports_its_sensitivity_and_is_the_same_twice(robust):
    workload = _hot_workload()
    config = PlanConfig(search="greedy", time_limit_s=1.0, robust=robust)
    first, again = plan_with(workload, config), plan_with(workload, config)
    assert plan_to_json(first) == plan_to_json(again)
    sens = first.predicted.sensitivity
    assert first.predicted.search.robust is (robust == "on")
    assert sens.compute_scales == pytest.approx((1 / 3, 1.0, 3.0))
    assert sens.steps_ms[0] < sens.steps_ms[1] < sens.steps_ms[2]
    assert sens.steps_ms[1] == pytest.approx(Breakdown.of(first.predicted.per_rank).step_ms, rel=1e-3)
    assert sens.expected_ms[0] <= sens.expected_ms[1] <= sens.expected_ms[2]
    assert "hot" in sens.extrapolated


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_each_ranks_reweighted_lookups_are_the_dense_sums_floats(world, tables, seed):
    """The interval reweights only the tables a rank holds, summed in the order (and so to the
    floats) of the dense sum over every table, whose zeros add nothing."""
    rng = np.random.default_rng(seed)
    dense = rng.random((world, tables, 2)) * (rng.random((world, tables, 1)) < 0.3)
    factor = np.exp(0.3 * rng.standard_normal((8, tables)))
    rank, table = np.nonzero(dense.any(axis=2))
    entries = _in_rank_order(rank, (factor[:, table, None] * dense[rank, table][None]).swapaxes(0, 1), world)
    assert np.array_equal(entries.swapaxes(0, 1), np.einsum("dt,rtp->drp", factor, dense))
    assert np.array_equal(_in_rank_order(rank, dense[rank, table], world), dense.sum(axis=1))


def test_each_search_wins_on_its_own_objective():
    workload = _hot_workload()
    model = resolve_model(PlanConfig(), workload)[0]
    doubt = doubt_for(model, workload)
    plans = {r: plan_with(workload, PlanConfig(time_limit_s=1.0, robust=r), cost_model=model).tables
             for r in ("on", "off")}
    robust = search_objective(PlanConfig(robust="on"), workload, model, doubt)
    assert robust.robust
    assert plan_score(robust, workload, model, plans["on"]) <= plan_score(robust, workload, model, plans["off"]) + 1e-9
    assert plan_score(CRITICAL_PATH, workload, model, plans["off"]) <= \
        plan_score(CRITICAL_PATH, workload, model, plans["on"]) + 1e-9
    # regret is measured against a reachable step: the nominal greedy plan's
    assert robust.balanced[1] > 0


def test_cli_robust_on_with_the_bottleneck_objective_is_refused(runner, tmp_path):
    out = tmp_path / "p.json"
    result = run_cli(runner, "plan", CONFIGS / "tiny.yaml", "--robust", "on", "--objective", "bottleneck",
                     "-o", out)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: --robust on: the robust objective is the step's; drop --objective bottleneck"]
    assert not out.exists()


def test_cli_summary_and_file_say_how_the_plan_leans_on_the_model(runner, tmp_path, monkeypatch):
    monkeypatch.setenv(CPU_ID_VARIABLE, FOREIGN_CPU)
    out = tmp_path / "p.json"
    result = run_cli(runner, "plan", CONFIGS / "tiny.yaml", "--search", "greedy", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "sensitivity" in result.stdout and "robust: on" in result.stdout
    data = json.loads(out.read_text())
    assert data["version"] == 3 and data["predicted"]["search"]["robust"] is True
    assert len(data["predicted"]["sensitivity"]["steps_ms"]) == 3
    # the model's other CPU is a warning of a result: printed, once
    assert result.stderr.count("calibrated on CPU") == 1
    assert "shardopt calibrate --probe --workload W.yaml" in result.stderr  # the 20 s way to measure instead
    monkeypatch.setenv(CPU_ID_VARIABLE, PACKAGED_CPU)
    result = run_cli(runner, "plan", CONFIGS / "tiny.yaml", "--search", "greedy", "-o", tmp_path / "q.json")
    assert "robust: off" in result.stdout and "calibrated on CPU" not in result.stderr


def test_a_failing_command_prints_only_its_error_line_on_a_foreign_cpu(runner, tmp_path, monkeypatch):
    monkeypatch.setenv(CPU_ID_VARIABLE, FOREIGN_CPU)
    workload, _ = read_workload(CONFIGS / "tiny.yaml")
    path = tmp_path / "w.yaml"
    path.write_text((CONFIGS / "tiny.yaml").read_text().replace(f"world_size: {workload.topology.world_size}",
                                                                "world_size: 2000000"))
    result = run_cli(runner, "plan", path, "-o", tmp_path / "p.json")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_plugin_takes_robust_and_refuses_what_the_cli_refuses():
    from shardopt.core.errors import ShardoptError
    from shardopt.torchrec.planner import ShardoptPlanner

    assert ShardoptPlanner(batch_size=8, robust="off").config.robust == "off"
    assert ShardoptPlanner(batch_size=8).config.robust == "auto"
    with pytest.raises(ShardoptError, match="robust: must be 'auto', 'on' or 'off'"):
        ShardoptPlanner(batch_size=8, robust="yes")
    with pytest.raises(ShardoptError, match="needs objective='critical-path'"):
        ShardoptPlanner(batch_size=8, robust="on", objective="bottleneck")


def test_the_gate_plans_auto_as_its_baseline_recorded(tmp_path, monkeypatch):
    from shardopt.gate.run import pinned
    from shardopt.gate.state import PlanState

    path = CONFIGS / "tiny.yaml"
    name = read_workload(path)[0].name
    config = PlanConfig()
    for recorded in (True, False):
        base = {"workloads": {name: PlanState("x", True, 1.0, 1.0, 0.5, robust=recorded)}}
        assert pinned(config, base, path).robust == ("on" if recorded else "off")
    assert pinned(config, None, path).robust == "auto"  # --update: this machine decides, and records it
    assert pinned(PlanConfig(robust="off"), base, path).robust == "off"  # an explicit choice stands
