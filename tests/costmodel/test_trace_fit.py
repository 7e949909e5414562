"""The trace fit: a model rescaled per pass to traced ranks, and what it says when plans disagree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardopt.bench.baselines import RandomTableWise
from shardopt.bench.regimes import regime_task
from shardopt.costmodel.registry import embedded_model_path
from shardopt.costmodel.store import load_model
from shardopt.costmodel.trace_fit import TracedRun, fit_traces, predicted_compute
from shardopt.planner.pipeline import plan_workload
from shardopt.traces.kineto import MeasuredRank

BASE = load_model(embedded_model_path("cpu"))[0]
TASK = regime_task("compute", 7)


def _run(seed: int, fwd: float, bwd: float, noise: float = 0.0) -> TracedRun:
    """A 'traced' run of a random plan whose ranks took ``fwd`` / ``bwd`` times the base's prediction."""
    w = TASK.workload
    plan = plan_workload(w, search=RandomTableWise(seed))
    run = TracedRun(w, plan, (), f"plan {seed}")
    predicted = predicted_compute(BASE, run)
    rng = np.random.default_rng(seed)
    ranks = tuple(
        MeasuredRank(rank=r, step_ms=10.0, fwd_compute_ms=p[0] * fwd * np.exp(noise * rng.standard_normal()),
                     bwd_compute_ms=p[1] * bwd * np.exp(noise * rng.standard_normal()), fwd_comm_ms=0.0,
                     bwd_comm_ms=0.0, fwd_transfer_ms=0.0, bwd_transfer_ms=0.0, steps=18)
        for r, p in enumerate(predicted)
    )
    return TracedRun(w, plan, ranks, f"plan {seed}")


@settings(max_examples=8, deadline=None)
@given(st.floats(0.2, 5.0), st.floats(0.2, 5.0), st.integers(0, 100))
def test_a_uniformly_slower_cluster_is_recovered_per_pass(fwd, bwd, seed):
    run = _run(seed, fwd, bwd)
    parts, report = fit_traces(BASE, [run], {"device": "cpu", "source": "trace"})
    assert report["pass_factor"]["fwd"] == pytest.approx(fwd, rel=1e-6)
    assert report["pass_factor"]["bwd"] == pytest.approx(bwd, rel=1e-6)
    # the fitted model predicts the traced ranks, and another plan's ranks scale alike
    assert predicted_compute(parts, run) == pytest.approx(np.array(
        [[r.fwd_compute_ms, r.bwd_compute_ms] for r in run.ranks]), rel=1e-5)
    other = _run(seed + 1, 1.0, 1.0)
    assert predicted_compute(parts, other) == pytest.approx(
        predicted_compute(BASE, other) * np.array([fwd, bwd]), rel=1e-5)
    assert report["shape_carries"] and max(report["in_sample_mape"]) < 1e-6


def test_plans_that_disagree_say_the_shape_does_not_carry():
    parts, report = fit_traces(BASE, [_run(1, 1.5, 1.5), _run(2, 2.0, 1.5)], {"device": "cpu"})
    assert not report["shape_carries"]
    assert [f["fwd"] for f in report["per_plan_factor"]] == pytest.approx([1.5, 2.0])
    assert 1.5 <= report["pass_factor"]["fwd"] <= 2.0


def test_noisy_ranks_give_the_median_factor():
    run = _run(3, 2.0, 0.5, noise=0.1)
    _, report = fit_traces(BASE, [run], {"device": "cpu"})
    assert report["pass_factor"]["fwd"] == pytest.approx(2.0, rel=0.15)
    assert report["pass_factor"]["bwd"] == pytest.approx(0.5, rel=0.15)


@settings(max_examples=25, deadline=None)
@given(st.floats(1e-6, 1e-3), st.floats(1e-12, 1e-8), st.lists(st.floats(16, 1e8), min_size=3, max_size=30, unique=True))
def test_the_links_latency_and_bandwidth_are_recovered(alpha, beta, sizes):
    from shardopt.costmodel.trace_fit import fit_links

    got = fit_links([(b, (alpha + beta * b) * 1e3) for b in sizes])
    assert got is not None
    assert alpha + beta * max(sizes) == pytest.approx(got[0] + got[1] * max(sizes), rel=1e-4)
    assert alpha + beta * min(sizes) == pytest.approx(got[0] + got[1] * min(sizes), rel=1e-4)


def test_too_few_sizes_fit_no_links_and_the_model_keeps_the_base_comm():
    from shardopt.costmodel.trace_fit import fit_links

    assert fit_links([(100.0, 0.1), (100.0, 0.2), (200.0, 0.3)]) is None
    parts, report = fit_traces(BASE, [_run(4, 1.0, 1.0)], {"device": "cpu"}, [(100.0, 0.1)])
    assert report["links"] is None and parts.calibration.comm == BASE.calibration.comm


def test_fitted_links_become_the_models_line_at_the_traced_world():
    points = [(b, (50e-6 + b / 2e9) * 1e3) for b in (1e3, 1e4, 1e5, 1e6)]
    parts, report = fit_traces(BASE, [_run(5, 1.0, 1.0)], {"device": "cpu"}, points)
    world = TASK.workload.topology.world_size
    alpha, beta = parts.calibration.comm[world]
    assert alpha == pytest.approx(50e-6, rel=1e-3) and 1 / beta == pytest.approx(2e9, rel=1e-3)
    assert report["links"]["bandwidth_gbps"] == pytest.approx(2.0, rel=1e-3)
    assert parts.calibration.comm_curves is None  # the base's profiled curves no longer speak for the links
