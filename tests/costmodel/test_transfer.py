"""A trained model carried to another machine (costmodel.transfer) and calibrate's choice between
it and a fresh fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import PACKAGED_PROFILE
from shardopt.core.errors import ShardoptError
from shardopt.core.hardware import hardware_profiles
from shardopt.costmodel.kernel_net import KernelPredictor
from shardopt.costmodel.profile_data import kernel_samples
from shardopt.costmodel.registry import embedded_model_path
from shardopt.costmodel.store import load_model, save_model
from shardopt.costmodel.train import train_model
from shardopt.costmodel.transfer import transferred
from shardopt.profile.dataset import ProfileDataset

HW = hardware_profiles()["cpu"]


@pytest.fixture(scope="module")
def base():
    return load_model(embedded_model_path("cpu"))[0]


def _machine(folder: Path, count: int, slow) -> Path:
    """A profile of another machine: the packaged points, each pass ``slow(point, pass)`` times slower."""
    folder.mkdir()
    (folder / "manifest.json").write_text((PACKAGED_PROFILE / "manifest.json").read_text())
    lines = []
    for line in (PACKAGED_PROFILE / "points.jsonl").read_text().splitlines():
        point = json.loads(line)
        if point.get("kind") == "tbe" and len(lines) < count:
            for phase in ("fwd", "bwd"):
                point[phase]["median_us"] *= slow(point, phase)
            lines.append(json.dumps(point))
    (folder / "points.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_a_transferred_model_is_the_base_times_one_factor_per_pass(base):
    samples = kernel_samples(ProfileDataset(PACKAGED_PROFILE).records("tbe"))[:200]
    slower = [type(s)(s.shards, s.fwd_s * 2.0, s.bwd_s * 3.0) for s in samples]
    moved = transferred(HW, base, slower, base.calibration)
    kernels = [s.shards for s in samples] + [[]]
    ratio = KernelPredictor(HW, moved).kernel_seconds(kernels) / KernelPredictor(HW, base).kernel_seconds(kernels)
    # The factor is the median over points of measured / predicted: 2x and 3x the base's own.
    base_log = np.median(np.log(np.array([[s.fwd_s, s.bwd_s] for s in samples])
                                / KernelPredictor(HW, base).kernel_seconds(kernels[:-1])), axis=0)
    np.testing.assert_allclose(ratio, np.tile(np.exp(base_log) * [2.0, 3.0], (len(kernels), 1)), rtol=1e-9)
    np.testing.assert_allclose(moved.calibration.fwd_kernel_s / base.calibration.fwd_kernel_s,
                               np.exp(base_log[0]) * 2.0, rtol=1e-9)


def test_calibrate_keeps_the_rescaled_model_where_only_the_speed_differs(base, tmp_path):
    # 60 points: too few for a fresh fit to learn the shape (held-out 17-19% against 13%), plenty
    # to measure two speeds. With hundreds of the packaged profile's own points the two tie.
    folder = _machine(tmp_path / "p", 60, lambda point, phase: 2.0 if phase == "fwd" else 3.0)
    parts, report = train_model(folder, base=("packaged model", base))
    assert report["model"] == "packaged model, rescaled"
    assert set(report["candidates"]) == {"fitted here", "packaged model, rescaled"}
    np.testing.assert_allclose(np.exp(parts.prior_shift), [2.0, 3.0], rtol=0.15)
    assert report["held_out_mape"] == report["candidates"]["packaged model, rescaled"]


def test_calibrate_keeps_its_own_fit_where_the_shape_differs(base, tmp_path):
    # A machine on which rows of 64 and wider cost 3x more and narrower ones 3x less: no one
    # factor fits it (held-out: fitted here 102%, rescaled 372%).
    def slow(point, phase):
        return 3.0 if point["tables"][0]["dim"] >= 64 else 1 / 3
    folder = _machine(tmp_path / "p", 400, slow)
    _, report = train_model(folder, base=("packaged model", base))
    assert report["model"] == "fitted here", report["candidates"]


def test_without_a_base_there_is_no_choice_to_report(tmp_path):
    folder = _machine(tmp_path / "p", 120, lambda point, phase: 1.0)
    parts, report = train_model(folder)
    assert "candidates" not in report and parts.prior_shift == (0.0, 0.0)


def test_the_shift_is_stored_and_checked(base, tmp_path):
    samples = kernel_samples(ProfileDataset(PACKAGED_PROFILE).records("tbe"))[:100]
    moved = transferred(HW, base, [type(s)(s.shards, s.fwd_s * 1.5, s.bwd_s) for s in samples], base.calibration)
    save_model(tmp_path / "m.json", moved, {})
    assert load_model(tmp_path / "m.json")[0].prior_shift == pytest.approx(moved.prior_shift)
    data = json.loads((tmp_path / "m.json").read_text())
    for bad in ([0.1], [50.0, 0.0], ["x", 0.0]):
        data["prior_shift"] = bad
        (tmp_path / "bad.json").write_text(json.dumps(data))
        with pytest.raises(ShardoptError, match=r"bad.json: prior_shift"):
            load_model(tmp_path / "bad.json")
