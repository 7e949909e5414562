"""Measured refinement: per-table factors fitted to measured ranks, and the loop that plans, measures
and corrects (``calibrate --workload``), against a stand-in machine whose tables are off by known
factors."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FakeMachine
from shardopt.costmodel.table_factors import RankSample, fit_factors, rank_error


def _samples(true: np.ndarray, contrib: np.ndarray, overhead: float = 0.1) -> list[RankSample]:
    names = [f"t{i}" for i in range(len(true))]
    out = []
    for row in contrib:
        tables = {n: (float(c), float(2 * c)) for n, c in zip(names, row) if c > 0}
        measured = overhead + float(row @ true)
        out.append(RankSample((overhead, overhead), tables, (measured, overhead + 2 * float(row @ true))))
    return out


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(0, 10_000))
def test_the_fit_recovers_each_tables_factor_when_the_ranks_tell_them_apart(count, seed):
    rng = np.random.default_rng(seed)
    true = np.exp(rng.normal(0, 0.3, count))
    contrib = rng.uniform(0.5, 3.0, (4 * count, count)) * (rng.random((4 * count, count)) < 0.7)
    contrib[np.arange(count) % len(contrib), np.arange(count)] += 1.0  # every table on some rank
    fitted = fit_factors(_samples(true, contrib), ridge=1e-8)
    for i, factor in enumerate(true):
        assert fitted[f"t{i}"][0] == pytest.approx(factor, rel=1e-3)
        assert fitted[f"t{i}"][1] == pytest.approx(factor, rel=1e-3)
    assert rank_error(_samples(true, contrib), fitted) < 1e-3


def test_a_rank_measured_slow_raises_its_own_tables_and_no_others():
    tables = {"a": (2.0, 2.0), "b": (1.0, 1.0)}
    slow = RankSample((0.0, 0.0), tables, (3.6, 3.6))  # 20% over its model
    level = RankSample((0.0, 0.0), {"c": (3.0, 3.0)}, (3.0, 3.0))
    fitted = fit_factors([slow, level])
    assert fitted["a"][0] > 1.05 and fitted["b"][0] > 1.05
    assert fitted["c"][0] == pytest.approx(1.0, abs=1e-6)
    # pulled towards one: less than the whole 20% lands on the tables
    assert fitted["a"][0] < 1.2 and rank_error([slow], fitted) < rank_error([slow])


def test_factors_price_only_a_table_of_their_name_and_shape():
    from shardopt.bench.regimes import regime_task
    from shardopt.contracts import ShardSpec
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.costmodel.table_factors import table_factors
    from shardopt.costmodel.analytic import AnalyticCostModel

    workload = regime_task("compute", 1000).workload
    packaged = resolve_cost_model("analytic", workload)[0]
    first = workload.tables[0]
    refined = AnalyticCostModel(calibration=dataclasses.replace(
        packaged.calibration, table_factors=table_factors(workload, {first.name: (2.0, 0.5)})))
    spec = ShardSpec(first, "table_wise", first.num_embeddings, first.embedding_dim)
    a, b = packaged.shard_cost(workload, spec), refined.shard_cost(workload, spec)
    assert b.fwd_compute_ms == pytest.approx(2 * a.fwd_compute_ms)
    assert b.bwd_compute_ms == pytest.approx(0.5 * a.bwd_compute_ms)
    assert b.fwd_comm_ms == a.fwd_comm_ms and b.hbm_bytes == a.hbm_bytes
    other = ShardSpec(workload.tables[1], "table_wise", workload.tables[1].num_embeddings,
                      workload.tables[1].embedding_dim)
    assert refined.shard_cost(workload, other) == packaged.shard_cost(workload, other)
    assert f"1 of {len(workload.tables)} tables priced by this workload's measured plans" in \
        refined.provenance(workload).text
    assert "measured plans" not in packaged.provenance(workload).text
    # the same name with another shape: the model's own price
    grown = dataclasses.replace(first, num_embeddings=first.num_embeddings * 2)
    wide = ShardSpec(grown, "table_wise", grown.num_embeddings, grown.embedding_dim)
    assert refined.shard_cost(workload, wide) == packaged.shard_cost(workload, wide)


def test_table_factors_survive_the_model_file_and_bad_ones_are_named(tmp_path):
    import json

    from shardopt.core.errors import ShardoptError
    from shardopt.costmodel.store import load_model, save_model
    from shardopt.costmodel.table_factors import TableFactor

    from conftest import ROOT

    parts, meta = load_model(ROOT / "shardopt" / "data" / "models" / "cpu.json")
    factors = (TableFactor("t0", 100, 64, 12.5, 1.25, 0.8), TableFactor("t0", 100, 64, 12.5, 1.0, 0.5, "dense"))
    parts = dataclasses.replace(parts, calibration=dataclasses.replace(parts.calibration, table_factors=factors))
    path = tmp_path / "m.json"
    save_model(path, parts, meta["report"])
    assert load_model(path)[0].calibration.table_factors == factors
    from shardopt.bench.regimes import regime_task
    from shardopt.costmodel.registry import resolve_cost_model

    workload = regime_task("compute", 1000).workload
    assert not [w for w in resolve_cost_model(f"analytic@{path}", workload)[1] if "tables' factors" in w]
    assert [w for w in resolve_cost_model(f"learned@{path}", workload)[1] if f"analytic@{path}" in w]
    good = path.read_text()
    for bad, says in (({"fwd": -1.0}, "table_factors[0].fwd"), ({"bwd": 1e9}, "table_factors[0].bwd"), ({"rows": 0}, "table_factors[0].rows/dim"),
                      ({"extra": 1}, "table_factors[0]: must hold exactly"), ({"kernel": "sparse"}, "table_factors[0].kernel"),
                      ({"kernel": "dense"}, "table_factors[1].name: must be a table name given once per kernel")):
        data = json.loads(good)
        data["calibration"]["table_factors"][0].update(bad)
        path.write_text(json.dumps(data))
        with pytest.raises(ShardoptError, match=r"m\.json: calibration\." + says.replace("[", r"\[").replace("]", r"\]")):
            load_model(path)


@pytest.fixture
def machine(monkeypatch):
    from shardopt.bench.regimes import regime_task
    from shardopt.costmodel.registry import resolve_cost_model

    workload = regime_task("compute", 2000).workload
    model = resolve_cost_model("analytic", workload)[0]
    model.held_out = 0.05
    fake = FakeMachine(model)
    monkeypatch.setattr("shardopt.measure.refine.replay_side_by_side", fake.replay)
    monkeypatch.setattr("shardopt.measure.refine.replica_factors", fake.replicas)
    return workload, model, fake


def _lookups_step(fake, workload, plan) -> tuple[float, float]:
    ranks = fake.ranks(workload, plan)
    totals = [f + b for f, b in ranks]
    return max(f for f, _ in ranks) + max(b for _, b in ranks), max(totals) / float(np.mean(totals))


def test_refinement_levels_the_ranks_of_a_machine_the_model_misprices(machine):
    from shardopt.contracts import PlanConfig
    from shardopt.costmodel.analytic import AnalyticCostModel
    from shardopt.measure.refine import refine
    from shardopt.planner.factory import plan_with

    workload, model, fake = machine
    calibration, report = refine(workload, model.calibration, held_out=model.held_out,
                                 deadline=time.perf_counter() + 60)
    refined = AnalyticCostModel(calibration=calibration)
    refined.held_out = model.held_out
    before = _lookups_step(fake, workload, plan_with(workload, PlanConfig(), cost_model=model))
    after = _lookups_step(fake, workload, plan_with(workload, PlanConfig(), cost_model=refined))
    assert after[0] < 0.97 * before[0] and after[1] < before[1], (before, after)
    rounds, final = report["rounds"], report["final"]
    # each round, then the finalists together (none where the last fit's plan was round 1's); the
    # tables are not measured alone, and the replicas are measured apart
    assert rounds and fake.calls == len(rounds) + bool(final)
    assert report["replicas"]["replicas"] == len(fake.replicas(model, workload)) and "alone" not in report
    if final:
        assert final["kept"] == min(final["steps_ms"], key=final["steps_ms"].get) and 2 <= len(final["steps_ms"]) <= 4
    kept = AnalyticCostModel(calibration=calibration)
    kept.held_out = model.held_out
    steps = final["steps_ms"][final["kept"]] if final else rounds[0]["step_ms"]
    assert _lookups_step(fake, workload, plan_with(workload, PlanConfig(), cost_model=kept))[0] == pytest.approx(
        steps, rel=1e-3)  # the file plans the plan kept
    assert report["rank_error_fitted"] < report["rank_error_unfitted"]
    assert {f.name for f in calibration.table_factors} <= {t.name for t in workload.tables}
    assert len([f for f in calibration.table_factors if f.kernel == "fused"]) == report["tables"] > 0
    # the replicas' own factors, measured alone, ride along whichever plan's factors are kept
    assert [f for f in calibration.table_factors if f.kernel == "dense"] == list(fake.replicas(model, workload))


def test_refinement_is_the_same_for_the_same_measurements_and_stops_at_its_deadline(machine):
    from shardopt.measure.refine import refine

    workload, model, fake = machine
    runs = [refine(workload, model.calibration, held_out=model.held_out, deadline=time.perf_counter() + 60)
            for _ in range(2)]
    assert runs[0][0] == runs[1][0] and runs[0][1]["rounds"] == runs[1][1]["rounds"]
    fake.calls = 0
    calibration, report = refine(workload, model.calibration, held_out=model.held_out, deadline=time.perf_counter())
    assert fake.calls == 0 and report["rounds"] == [] and calibration.table_factors == ()


def test_a_first_round_that_cannot_fit_the_budget_is_not_started(machine, monkeypatch):
    """A large world or a slow device: the first round is guessed from the model before it is
    measured, and one that would overrun the deadline is not started (later rounds go by the
    measured time of the one before)."""
    from shardopt.measure import refine as module

    workload, model, fake = machine
    monkeypatch.setattr(module, "BUILD_BYTES_PER_S", 1.0)  # building the kernels would take years
    calibration, report = module.refine(workload, model.calibration, held_out=model.held_out,
                                        deadline=time.perf_counter() + 60)
    # no plan is measured; the replicas, timed apart, still are
    assert fake.calls == 0 and report["rounds"] == []
    assert list(calibration.table_factors) == list(fake.replicas(model, workload))
    monkeypatch.setattr(module, "BUILD_BYTES_PER_S", 1e9)
    _, report = module.refine(workload, model.calibration, held_out=model.held_out, deadline=time.perf_counter() + 60)
    assert fake.calls > 0 and report["rounds"]


def test_replicas_are_measured_only_where_they_fit_the_time_left(machine):
    from shardopt.measure.refine import replicas_refined

    workload, model, fake = machine
    calibration, row = replicas_refined(workload, model.calibration, held_out=model.held_out,
                                        deadline=time.perf_counter())
    assert calibration.table_factors == () and "the probe's time ended first" in row["skipped"]
    calibration, row = replicas_refined(workload, model.calibration, held_out=model.held_out,
                                        deadline=time.perf_counter() + 60)
    # no table is priced from its measurement alone: a rank's other tables change what it costs
    assert fake.calls == 0 and list(calibration.table_factors) == list(fake.replicas(model, workload))
    assert row["replicas"] == len(fake.replicas(model, workload)) > 0


def test_replicas_are_measured_where_no_plan_round_would_fit_after_them(machine, monkeypatch):
    """A large workload: the replicas fit the time left, a plan's round and the finalists after
    it do not. The replicas' factors are kept; no plan is measured."""
    from shardopt.measure import refine as module

    workload, model, fake = machine
    monkeypatch.setattr(module, "_round_guess_s", lambda *a: 20.0)  # any round: 20 s, guessed
    calibration, report = module.refine(workload, model.calibration, held_out=model.held_out,
                                        deadline=time.perf_counter() + 30)
    assert fake.calls == 0 and report["rounds"] == [] and report["replicas"]["replicas"] > 0
    assert list(calibration.table_factors) == list(fake.replicas(model, workload))
    # The round and the finalists after it, guessed, against the < 30 s left: the shortfall reported.
    need = 20.0 * (1 + module.FINALISTS * module.FINAL_ROUNDS / module.ROUNDS)
    assert need - 30 <= report["short_s"] <= need
    calibration, report = module.refine(workload, model.calibration, held_out=model.held_out,
                                        deadline=time.perf_counter())
    assert fake.calls == 0 and calibration.table_factors == () and "replicas" not in report
