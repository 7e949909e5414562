"""Replicas' dense kernel gets constants of its own: profiled, fitted apart, stored, priced, carried."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conftest import PACKAGED_PROFILE
from shardopt.contracts import ShardSpec
from shardopt.core.errors import ShardoptError
from shardopt.core.hardware import hardware_profiles
from shardopt.core.workload import Table
from shardopt.costmodel.analytic import REPLICA_COMPANY, AnalyticCostModel, calibrated_hardware
from shardopt.costmodel.base import whole_costs
from shardopt.costmodel.calibrate import MIN_DENSE_POINTS, calibrate
from shardopt.costmodel.constants import KernelConstants
from shardopt.costmodel.profile_data import kernel_samples, kernel_terms
from shardopt.costmodel.registry import embedded_model_path
from shardopt.costmodel.store import load_model, save_model
from shardopt.costmodel.transfer import rescaled
from shardopt.profile.dataset import ProfileDataset, point_key
from shardopt.profile.sweep import DENSE_POINTS, build_sweep

HW = hardware_profiles()["cpu"]


@pytest.fixture(scope="module")
def packaged():
    return load_model(embedded_model_path("cpu"))[0]


@pytest.fixture(scope="module")
def samples():
    every = kernel_samples(ProfileDataset(PACKAGED_PROFILE).records("tbe"))
    return [s for s in every if not s.dense], [s for s in every if s.dense]


def _relative_errors(calibration, points, dense: bool) -> np.ndarray:
    hw = calibrated_hardware(HW, calibration)
    k = calibration.kernel_constants(dense)
    predicted = np.array([[f @ np.array(k.fwd) + k.fwd_kernel_s, b @ np.array(k.bwd) + k.bwd_kernel_s]
                          for f, b in (kernel_terms(hw, s.shards) for s in points)])
    measured = np.array([[s.fwd_s, s.bwd_s] for s in points])
    return np.abs(np.log(measured / predicted))


def test_the_packaged_profile_holds_replicas_and_the_model_their_constants(packaged, samples):
    _, dense = samples
    assert len(dense) == DENSE_POINTS
    assert packaged.calibration.dense is not None
    own = _relative_errors(packaged.calibration, dense, dense=True)
    fused = _relative_errors(packaged.calibration, dense, dense=False)
    # The fused constants priced replicas' backward some 2x low on this profile's CPU.
    assert np.median(own[:, 1]) < 0.5 * np.median(fused[:, 1])
    assert np.median(own.sum(axis=1)) < np.median(fused.sum(axis=1))


def test_replicas_points_leave_the_fused_constants_as_they_were(samples):
    fused, dense = samples
    alone = calibrate(HW, fused[:300], [], {})
    both = calibrate(HW, fused[:300] + dense[:MIN_DENSE_POINTS], [], {})
    assert alone.dense is None and both.dense is not None
    assert dataclasses.replace(both, dense=None) == alone
    fewer = calibrate(HW, fused[:300] + dense[:MIN_DENSE_POINTS - 1], [], {})
    assert fewer.dense is None  # too few to fit some 25 constants: replicas keep the fused ones


def _workload():
    from shardopt.bench.regimes import regime_task

    return regime_task("hot", 1006).workload  # t15: 4703 x 16 pooled 214, a replica in its plans


def test_a_replica_is_priced_by_the_dense_constants_and_a_call_of_its_kernel(packaged):
    cal = dataclasses.replace(packaged.calibration, dense=None)
    fused = cal.kernel_constants()
    doubled = KernelConstants(tuple(2 * c for c in fused.fwd), tuple(3 * c for c in fused.bwd), 1e-5, 2e-5)
    plain, own = AnalyticCostModel(calibration=cal), AnalyticCostModel(calibration=dataclasses.replace(cal, dense=doubled))
    workload = _workload()
    table: Table = workload.table("t15")
    replica = ShardSpec(table, "data_parallel", table.num_embeddings, table.embedding_dim, "dense")
    whole = ShardSpec(table, "table_wise", table.num_embeddings, table.embedding_dim)
    a, b = plain.shard_cost(workload, replica), own.shard_cost(workload, replica)
    assert b.fwd_compute_ms == pytest.approx(2 * a.fwd_compute_ms, rel=1e-9)
    assert b.bwd_compute_ms == pytest.approx(3 * a.bwd_compute_ms, rel=1e-9)
    assert own.shard_cost(workload, whole) == plain.shard_cost(workload, whole)
    assert own.overheads(workload, {"data_parallel"})[:2] == pytest.approx((1e-5, 2e-5))
    company = [share * s for share, s in zip(REPLICA_COMPANY, _mean_rank_s(own, workload))]
    assert own.overheads(workload, {"table_wise", "data_parallel"})[:2] == pytest.approx(
        (fused.fwd_kernel_s + 1e-5 + company[0], fused.bwd_kernel_s + 2e-5 + company[1]))
    company = [share * s for share, s in zip(REPLICA_COMPANY, _mean_rank_s(plain, workload))]
    assert plain.overheads(workload, {"table_wise", "data_parallel"})[:2] == pytest.approx(
        (2 * fused.fwd_kernel_s + company[0], 2 * fused.bwd_kernel_s + company[1]))


def _mean_rank_s(model, workload) -> tuple[float, float]:
    costs, world = whole_costs(workload, model).values(), workload.topology.world_size
    return (sum(c.fwd_compute_ms for c in costs) / world / 1e3, sum(c.bwd_compute_ms for c in costs) / world / 1e3)


def test_replicas_beside_a_cpu_ranks_sharded_tables_cost_a_share_of_its_lookups(packaged):
    # The dense kernel's step sweeps whole tables through the caches the rank's fused kernel
    # kept its rows in (benchmarks/results/replica_company.md): only where both run, only on a CPU.
    model, workload = AnalyticCostModel(calibration=packaged.calibration), _workload()
    fused, dense = packaged.calibration.kernel_constants(), packaged.calibration.kernel_constants(True)
    mean = _mean_rank_s(model, workload)
    assert mean[0] > 0 and mean[1] > 0
    both = model.overheads(workload, {"table_wise", "data_parallel"})[:2]
    assert both == pytest.approx((fused.fwd_kernel_s + dense.fwd_kernel_s + REPLICA_COMPANY[0] * mean[0],
                                  fused.bwd_kernel_s + dense.bwd_kernel_s + REPLICA_COMPANY[1] * mean[1]))
    assert model.overheads(workload, {"data_parallel"})[:2] == pytest.approx((dense.fwd_kernel_s, dense.bwd_kernel_s))
    gpu = dataclasses.replace(workload, topology=dataclasses.replace(workload.topology, compute_device="cuda"))
    assert model.overheads(gpu, {"table_wise", "data_parallel"})[:2] == pytest.approx(
        (fused.fwd_kernel_s + dense.fwd_kernel_s, fused.bwd_kernel_s + dense.bwd_kernel_s))


def test_a_replica_that_costs_its_ranks_company_is_planned_whole(monkeypatch):
    # hot-1006's t15 (4703 x 16, pooled 214): replicated when a replica cost only its own kernel;
    # replayed, the plan without it read 0.91 of TorchRec's step against 1.01 (three runs each).
    from shardopt.contracts import PlanConfig
    from shardopt.costmodel import analytic
    from shardopt.planner.factory import plan_with

    workload = _workload()
    kinds = {t.name: t.sharding_type for t in plan_with(workload, PlanConfig(robust="on")).tables}
    assert kinds["t15"] != "data_parallel"
    monkeypatch.setattr(analytic, "REPLICA_COMPANY", (0.0, 0.0))
    kinds = {t.name: t.sharding_type for t in plan_with(workload, PlanConfig(robust="on")).tables}
    assert kinds["t15"] == "data_parallel"


def test_a_rescaled_model_carries_its_replicas_at_the_same_speed(packaged):
    moved = rescaled(packaged, np.log([2.0, 3.0]), packaged.calibration)
    old, new = packaged.calibration.dense, moved.calibration.dense
    np.testing.assert_allclose(new.fwd, np.array(old.fwd) * 2.0, rtol=1e-12)
    np.testing.assert_allclose(new.bwd, np.array(old.bwd) * 3.0, rtol=1e-12)
    assert (new.fwd_kernel_s, new.bwd_kernel_s) == pytest.approx((old.fwd_kernel_s * 2, old.bwd_kernel_s * 3))


def test_replicas_constants_are_stored_and_checked(packaged, tmp_path):
    save_model(tmp_path / "m.json", packaged, {})
    assert load_model(tmp_path / "m.json")[0].calibration.dense == packaged.calibration.dense
    data = json.loads((tmp_path / "m.json").read_text())
    dense = data["calibration"]["dense"]
    for field, bad in (("fwd", dense["fwd"][:-1]), ("bwd", [-1.0] * len(dense["bwd"])), ("fwd_kernel_s", "x"),
                       ("extra", 1.0)):
        data["calibration"]["dense"] = {**dense, field: bad}
        (tmp_path / "bad.json").write_text(json.dumps(data))
        with pytest.raises(ShardoptError, match=r"bad.json: calibration.dense"):
            load_model(tmp_path / "bad.json")
    del data["calibration"]["dense"]  # an older file: replicas priced with the fused constants
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert load_model(tmp_path / "old.json")[0].calibration.dense is None


def test_the_full_preset_resumes_the_packaged_profile_and_ends_with_replicas():
    sweep = build_sweep("full", "cpu")
    keys = {point_key(p) for p in sweep.tbe}
    held = {r["key"] for r in ProfileDataset(PACKAGED_PROFILE).records("tbe")}
    assert held <= keys  # nothing measured is drawn anew
    dense = [p for p in sweep.tbe if p.get("kernel") == "dense"]
    assert len(dense) == DENSE_POINTS and sweep.tbe[-DENSE_POINTS:] == dense
    assert all(1 <= len(p["tables"]) <= 4 and all(t["rows"] <= 60_000 for t in p["tables"]) for p in dense)


def test_calibrate_without_replicas_carries_the_base_models_at_this_machines_speed(packaged, tmp_path):
    from shardopt.costmodel.train import train_model

    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "manifest.json").write_text((PACKAGED_PROFILE / "manifest.json").read_text())
    lines = []
    for line in (PACKAGED_PROFILE / "points.jsonl").read_text().splitlines():
        point = json.loads(line)
        if point.get("kind") == "tbe" and point.get("kernel") != "dense" and len(lines) < 80:
            point["fwd"]["median_us"] *= 2.0
            lines.append(json.dumps(point))
    (folder / "points.jsonl").write_text("\n".join(lines) + "\n")
    fresh, report = train_model(folder)
    assert fresh.calibration.dense is None and "dense_kernels" not in report
    carried, _ = train_model(folder, base=("packaged model", packaged))
    ratio = np.array(carried.calibration.dense.fwd) / np.array(packaged.calibration.dense.fwd)
    assert np.nanmax(ratio) == pytest.approx(np.nanmin(ratio[np.isfinite(ratio)]), rel=1e-9)  # one factor
    assert 1.5 < np.nanmax(ratio) < 2.7
