"""The profiler: datasets with the promised rows, resumable after SIGINT, CUDA path arguments."""

import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import PACKAGED_PROFILE, run_cli
from shardopt.profile import comm as comm_module
from shardopt.profile.dataset import ProfileDataset, point_key
from shardopt.profile.sweep import build_sweep


@pytest.fixture(scope="module")
def unit_dataset(tmp_path_factory):
    from shardopt.profile.sweep import run_sweep

    folder = tmp_path_factory.mktemp("profile") / "unit"
    run_sweep(str(folder), preset="unit", progress=False)
    return ProfileDataset(folder)





def test_unit_profile_has_singles_fused_and_all_to_all(unit_dataset):
    tbe = list(unit_dataset.records("tbe"))
    a2a = list(unit_dataset.records("a2a"))
    assert any(len(r["tables"]) == 1 for r in tbe)
    assert any(len(r["tables"]) >= 4 for r in tbe)
    assert a2a and a2a[0]["backend"] == "gloo" and a2a[0]["timing"]["median_us"] > 0
    for r in tbe:
        assert r["backend"] in ("fbgemm", "torch")
        assert 0 < r["fwd"]["p25_us"] <= r["fwd"]["median_us"] <= r["fwd"]["p75_us"]
        assert r["bwd"]["runs"] == 3 and r["lookups"] > 0
        assert len(r["unique_rows"]) == len(r["tables"])
    manifest = unit_dataset.manifest()
    for field in ("device_name", "cores", "torch", "fbgemm_gpu", "backend", "threads_per_rank"):
        assert field in manifest


def test_smoke_preset_covers_the_acceptance_rows():
    sweep = build_sweep("smoke", "cpu")
    assert any(len(p["tables"]) == 1 for p in sweep.tbe)
    assert any(len(p["tables"]) >= 4 for p in sweep.tbe)
    assert len(sweep.comm) >= 2


def test_sweeps_are_deterministic():
    a, b = build_sweep("full", "cpu", seed=3), build_sweep("full", "cpu", seed=3)
    assert [point_key(p) for p in a.tbe] == [point_key(p) for p in b.tbe]
    assert [point_key(p) for p in a.tbe] != [point_key(p) for p in build_sweep("full", "cpu", 4).tbe]


def test_more_rank_points_extend_a_profile_without_changing_its_points(monkeypatch):
    """The committed CPU profile grew from 100 to 1000 rank-shaped points by resuming: the
    points drawn before keep their keys, so a resumed sweep measures only the new ones."""
    import shardopt.profile.sweep as sweep_module

    def keys(dense: bool) -> list[str]:
        return [point_key(p) for p in build_sweep("full", "cpu").tbe if (p.get("kernel") == "dense") == dense]

    monkeypatch.setattr(sweep_module, "RANK_POINTS", 100)
    before, replicas = keys(False), keys(True)
    monkeypatch.setattr(sweep_module, "RANK_POINTS", 130)
    after = keys(False)
    assert after[: len(before)] == before
    assert len(after) == len(before) + 30 and len(set(after + replicas)) == len(after) + len(replicas)
    assert keys(True) == replicas  # replicas' points are drawn apart: more rank points leave them be


def test_cuda_sweep_plans_memory_tiers_and_no_single_gpu_nccl():
    sweep = build_sweep("full", "cuda", backend="fbgemm")
    assert {p["location"] for p in sweep.tbe} == {"hbm", "uvm", "uvm_caching"}
    assert "bf16" in {p["precision"] for p in sweep.tbe}
    assert sweep.comm == {} and "torchrun" in sweep.notes[0]
    torch_only = build_sweep("full", "cuda", backend="torch")
    assert {p["location"] for p in torch_only.tbe} == {"hbm"}


def test_launcher_joins_nccl_on_its_local_gpu(monkeypatch):
    calls = []
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(comm_module.torch.cuda, "set_device", lambda d: calls.append(("dev", d)))
    monkeypatch.setattr(comm_module.dist, "init_process_group", lambda b: calls.append(("pg", b)))
    assert comm_module.init_from_launcher("cuda") == "cuda:3"
    assert calls == [("dev", 3), ("pg", "nccl")]
    calls.clear()
    assert comm_module.init_from_launcher("cpu") == "cpu"
    assert calls == [("pg", "gloo")]


def test_torchrun_environment_is_detected(monkeypatch):
    for var in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    assert not comm_module.launched_by_torchrun()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert comm_module.launched_by_torchrun()


def test_cuda_without_a_gpu_is_a_clear_error(runner, tmp_path):
    result = run_cli(runner, "profile", "--device", "cuda", "-o", tmp_path / "p")
    assert result.exit_code == 2
    assert "no CUDA device" in result.stderr
    assert not (tmp_path / "p").exists()


def test_resuming_into_another_sweep_is_refused(runner, unit_dataset):
    result = run_cli(runner, "profile", "--preset", "smoke", "-o", unit_dataset.folder)
    assert result.exit_code == 2
    assert "preset: the dataset was measured with 'unit'" in result.stderr


def test_torn_last_line_is_dropped_and_measured_again(tmp_path):
    ds = ProfileDataset(tmp_path / "d")
    ds.start({"format": "shardopt-profile", "preset": "unit"})
    point = next(ProfileDataset(PACKAGED_PROFILE).records("a2a"))
    ds.append({**point, "key": "a"})
    with open(ds.points_path, "a") as handle:
        handle.write('{"key": "b", "ki')
    assert ds.done_keys() == {"a"}
    ds.start({"format": "shardopt-profile", "preset": "unit"})
    ds.append({**point, "key": "c"})
    assert [r["key"] for r in ds.records()] == ["a", "c"]


def test_sigint_keeps_points_and_rerun_resumes(tmp_path):
    folder = tmp_path / "p"
    # The smoke preset (32 points, seconds) rather than unit: on a fast machine the unit sweep
    # could finish before the signal arrives, and the test would race.
    cmd = [sys.executable, "-m", "shardopt", "profile", "--preset", "smoke", "-o", str(folder)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    points = folder / "points.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if points.exists() and points.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "rerun to resume" in err
    assert len(err.strip().splitlines()) == 1, err  # one line: no traceback from the gloo workers
    kept = points.read_text().splitlines()
    sweep = build_sweep("smoke", "cpu")
    total = len(sweep.tbe) + sum(len(points) for points in sweep.comm.values())
    assert 1 <= len(kept) < total

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"({len(kept)} already there)" in done.stdout
    lines = points.read_text().splitlines()
    assert lines[: len(kept)] == kept  # finished points were not measured again
    keys = [json.loads(line)["key"] for line in lines]
    assert len(keys) == len(set(keys)) == total


def test_a_profile_timed_on_one_batch_is_not_resumed(runner, unit_dataset, tmp_path):
    """Points timed on one repeated batch (before distinct_batches) must not mix with new ones."""
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(unit_dataset.folder, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["distinct_batches"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli(runner, "profile", "--preset", "unit", "-o", old)
    assert result.exit_code == 2
    assert "distinct_batches: the dataset was measured with None, this run has 8" in result.stderr
