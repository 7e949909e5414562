"""Calibration, the learned model, model files and the train/evaluate commands."""

import json
import shutil

import numpy as np
import pytest

from conftest import CONFIGS, DATA, PACKAGED_PROFILE, run_cli
from shardopt.costmodel.calibrate import calibrate
from shardopt.costmodel.profile_data import KernelSample, kernel_samples, kernel_terms
from shardopt.costmodel.registry import embedded_model_path
from shardopt.costmodel.terms import BWD_TERMS, FWD_TERMS
from shardopt.core.hardware import hardware_profiles
from shardopt.profile.dataset import ProfileDataset

PROFILE = PACKAGED_PROFILE


@pytest.fixture(scope="module")
def small_profile(tmp_path_factory):
    """The first 80 kernel points and all all-to-all points of the committed CPU profile."""
    folder = tmp_path_factory.mktemp("prof") / "p"
    folder.mkdir()
    shutil.copy(PROFILE / "manifest.json", folder / "manifest.json")
    lines = (PROFILE / "points.jsonl").read_text().splitlines()
    tbe = [line for line in lines if '"kind": "tbe"' in line][:80]
    a2a = [line for line in lines if '"kind": "a2a"' in line]
    (folder / "points.jsonl").write_text("\n".join(tbe + a2a) + "\n")
    return folder


def test_calibration_recovers_known_constants():
    hw = hardware_profiles()["cpu"]
    samples = kernel_samples(ProfileDataset(PROFILE).records("tbe"))[::4]  # singles and fused
    rng = np.random.default_rng(0)
    fwd_true = rng.uniform(0.5, 2.0, size=len(FWD_TERMS)) * 1e-9
    bwd_true = rng.uniform(0.5, 2.0, size=len(BWD_TERMS)) * 1e-9
    synthetic = []
    for s in samples:
        f, b = kernel_terms(hw, s.shards)
        synthetic.append(KernelSample(s.shards, f @ fwd_true + 3e-5, b @ bwd_true + 1e-5))
    cal = calibrate(hw, synthetic, [], {})
    terms = [kernel_terms(hw, s.shards) for s in samples]
    fwd = [f @ np.array(cal.fwd) + cal.fwd_kernel_s for f, _ in terms]
    bwd = [b @ np.array(cal.bwd) + cal.bwd_kernel_s for _, b in terms]
    assert np.allclose(fwd, [s.fwd_s for s in synthetic], rtol=1e-4)
    assert np.allclose(bwd, [s.bwd_s for s in synthetic], rtol=1e-4)
    assert cal.fwd_kernel_s == pytest.approx(3e-5, rel=1e-2)


def test_training_is_reproducible(small_profile, tmp_path, runner):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        result = run_cli(runner, "train", small_profile, "-o", out, "--epochs", "40", "--seed", "3")
        assert result.exit_code == 0
        assert "held-out MAPE" in result.stdout
    assert a.read_text() == b.read_text()
    c = tmp_path / "c.json"
    run_cli(runner, "train", small_profile, "-o", c, "--epochs", "40", "--seed", "4")
    assert c.read_text() != a.read_text()


def test_embedded_model_exists_and_records_its_hardware():
    path = embedded_model_path("cpu")
    assert path is not None
    data = json.loads(path.read_text())
    assert data["hardware"] == "cpu" and data["trained_on"]["device"] == "cpu"
    assert data["report"]["held_out_kernels"] > 0


@pytest.mark.parametrize("model", ["analytic", "learned", "analytic-v0"])
def test_evaluate_agrees_with_the_plans_own_prediction(runner, tmp_path, model):
    plan = tmp_path / "p.json"
    result = run_cli(runner, "plan", CONFIGS / "tiny.yaml", "-o", plan, "--cost-model", model)
    assert result.exit_code == 0
    predicted = json.loads(plan.read_text())["predicted"]
    result = run_cli(runner, "evaluate", CONFIGS / "tiny.yaml", plan, "--cost-model", model, "--json")
    assert result.exit_code == 0
    evaluated = json.loads(result.stdout)
    assert evaluated["cost_model"] == predicted["cost_model"]
    for a, b in zip(evaluated["per_rank"], predicted["per_rank"]):
        for key in ("fwd_compute_ms", "bwd_compute_ms", "fwd_comm_ms", "bwd_comm_ms", "total_ms"):
            assert a[key] == pytest.approx(b[key], abs=1e-6)
    assert run_cli(runner, "validate", CONFIGS / "tiny.yaml", plan).exit_code == 0


def _model_json():
    return json.loads(embedded_model_path("cpu").read_text())


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: "{not json", "malformed JSON"),
        (lambda d: {**d, "version": 99}, "version: this shardopt reads cost-model versions 2-3, got 99"),
        (lambda d: {**d, "format": "other"}, "format: not a shardopt cost model"),
        (lambda d: {k: v for k, v in d.items() if k != "calibration"}, "calibration: must be a mapping"),
    ],
)
def test_bad_model_files_give_one_clear_line(runner, tmp_path, mutate, message):
    data = mutate(_model_json())
    path = tmp_path / "m.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    result = run_cli(runner, "plan", CONFIGS / "tiny.yaml", "-o", tmp_path / "p.json", "--cost-model", path)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(path) in lines[0]
    assert not (tmp_path / "p.json").exists()


def test_model_for_other_hardware_warns_naming_both(runner, tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text((DATA / "good.yaml").read_text().replace("compute_device: cpu", "compute_device: cuda"))
    result = run_cli(
        runner, "plan", workload, "-o", tmp_path / "p.json", "--cost-model", embedded_model_path("cpu")
    )
    assert result.exit_code == 0
    assert "trained on cpu (" in result.stderr and "the workload targets h200" in result.stderr


def test_learned_without_a_model_for_the_hardware_is_an_error(runner, tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text((DATA / "good.yaml").read_text().replace("compute_device: cpu", "compute_device: cuda"))
    result = run_cli(runner, "plan", workload, "-o", tmp_path / "p.json", "--cost-model", "learned")
    assert result.exit_code == 2
    assert "no embedded model for hardware 'h200'" in result.stderr


def test_torchrec_estimator_bridge_gives_positive_costs():
    from shardopt.core.plan import read_plan
    from shardopt.torchrec.torchrec_costs import torchrec_breakdown
    from shardopt.core.workload import read_workload

    workload, _ = read_workload(DATA / "good.yaml")
    per_rank = torchrec_breakdown(workload, read_plan(DATA / "good_plan.json").tables)
    assert len(per_rank) == 2
    assert all(r.fwd_compute_ms > 0 and r.bwd_compute_ms > r.fwd_compute_ms for r in per_rank)
