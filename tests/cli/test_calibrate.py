"""shardopt calibrate: a budgeted sweep, the fit, one model file and nothing else left behind;
--cost-model analytic@PATH / learned@PATH pick a part of it."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from conftest import CONFIGS, PACKAGED_PROFILE, FakeMachine, run_cli


def _copy_points(folder: Path, count: int) -> None:
    """A stand-in for measuring: the first ``count`` kernel points of the packaged profile."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PACKAGED_PROFILE / "manifest.json", folder / "manifest.json")
    lines = [line for line in (PACKAGED_PROFILE / "points.jsonl").read_text().splitlines()
             if json.loads(line).get("kind", "tbe") != "a2a"][:count]
    (folder / "points.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def fake_sweep(monkeypatch):
    calls = []

    def run_sweep(folder, *, preset, device, backend, seed, deadline, kernels=None):
        calls.append({"preset": preset, "deadline_in": deadline - time.perf_counter(), "folder": folder,
                      "kernels": kernels})
        _copy_points(Path(folder), 120)

        class Result:
            measured, skipped = 120, 0
        return Result()

    monkeypatch.setattr("shardopt.profile.sweep.run_sweep", run_sweep)
    return calls


def test_calibrate_writes_one_model_within_its_budget_and_leaves_no_profile(runner, tmp_path, fake_sweep):
    out = tmp_path / "model.json"
    result = run_cli(runner, "calibrate", "--budget", "60", "-o", out)
    assert result.exit_code == 0
    assert "learned@" in result.stdout and "held-out kernel MAPE" in result.stdout
    assert fake_sweep[0]["preset"] == "calibrate"
    assert 0 < fake_sweep[0]["deadline_in"] <= 60 * 0.9  # the fit keeps a share of the budget
    assert not Path(fake_sweep[0]["folder"]).exists()  # the measured points were a temp folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]
    report = json.loads(out.read_text())["report"]
    assert report["calibrate"]["budget_s"] == 60


def test_a_calibrated_model_plans_through_either_part(runner, tmp_path, fake_sweep):
    model = tmp_path / "model.json"
    assert run_cli(runner, "calibrate", "--budget", "60", "-o", model).exit_code == 0
    for part in ("analytic", "learned"):
        plan = tmp_path / f"{part}.json"
        result = run_cli(runner, "plan", CONFIGS / "tiny.yaml", "--cost-model", f"{part}@{model}",
                         "--search", "greedy", "-o", plan)
        assert result.exit_code == 0, result.stderr
        name = json.loads(plan.read_text())["predicted"]["cost_model"]
        assert ("learned" in name) == (part == "learned"), name


def test_a_missing_model_file_is_one_line(runner, tmp_path):
    result = run_cli(runner, "plan", CONFIGS / "tiny.yaml", "--cost-model", f"learned@{tmp_path}/none.json",
                     "-o", tmp_path / "p.json")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "--cost-model learned@" in result.stderr
    assert not (tmp_path / "p.json").exists()


def test_the_calibrate_preset_pins_terms_first_and_measures_comm_before_the_budgeted_kernels():
    from shardopt.profile.sweep import build_sweep

    sweep = build_sweep("calibrate", "cpu")
    assert sweep.comm_first and sweep.comm
    singles = [p for p in sweep.tbe[:24] if len(p["tables"]) == 1]
    assert len(singles) == 24  # the pinning points come first
    assert len(sweep.tbe) > 1000  # then more rank-shaped kernels than any budget measures
    assert all(len(p["tables"]) >= 3 for p in sweep.tbe[24:])


def test_a_deadline_stops_the_kernel_points(tmp_path):
    from shardopt.profile.sweep import run_sweep

    done = run_sweep(str(tmp_path / "p"), preset="unit", progress=False, deadline=time.perf_counter())
    kinds = [json.loads(line).get("kind") for line in (tmp_path / "p" / "points.jsonl").read_text().splitlines()]
    assert kinds and all(k == "a2a" for k in kinds)  # comm measured, no kernel point past the deadline
    assert done.measured == len(kinds)


@pytest.mark.parametrize("args, says", [
    (["--budget", "5"], "--budget"),
    (["--budget", "nan"], "--budget"),
    (["--device", "tpu"], "--device"),
    (["--backend", "torch"], "--backend"),
])
def test_bad_options_are_one_line_and_write_nothing(runner, tmp_path, args, says, fake_sweep):
    out = tmp_path / "model.json"
    result = run_cli(runner, "calibrate", *args, "-o", out)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr
    assert not out.exists() and not fake_sweep


def test_outputs_that_cannot_be_written_are_refused_before_measuring(runner, tmp_path, fake_sweep):
    (tmp_path / "a-file").write_text("x")
    for args, says in (
        (["-o", tmp_path], "--output"),
        (["-o", tmp_path / "model.yaml"], "--output"),
        (["--keep-profile", tmp_path / "a-file", "-o", tmp_path / "m.json"], "--keep-profile"),
    ):
        result = run_cli(runner, "calibrate", *args)
        assert result.exit_code == 2, args
        assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not fake_sweep  # nothing was measured
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_budget_too_short_for_the_fit_says_so(runner, tmp_path, monkeypatch):
    def run_sweep(folder, **_):
        _copy_points(Path(folder), 10)

        class Result:
            measured, skipped = 10, 0
        return Result()

    monkeypatch.setattr("shardopt.profile.sweep.run_sweep", run_sweep)
    result = run_cli(runner, "calibrate", "--budget", "60", "-o", tmp_path / "m.json")
    assert result.exit_code == 2
    assert "--budget 60: only 10 kernel points" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_calibrate_says_which_model_it_kept_and_base_none_fits_only_here(runner, tmp_path, fake_sweep):
    out = tmp_path / "model.json"
    result = run_cli(runner, "calibrate", "--budget", "60", "-o", out)
    assert result.exit_code == 0
    report = json.loads(out.read_text())["report"]
    assert report["model"] in report["candidates"] and f"kept: {report['model']}" in result.stdout
    own = tmp_path / "own.json"
    assert run_cli(runner, "calibrate", "--budget", "60", "--base", "none", "-o", own).exit_code == 0
    assert "candidates" not in json.loads(own.read_text())["report"]


@pytest.mark.parametrize("base, says", [("missing.json", "--base"), ("model.json", "--output")])
def test_a_bad_base_is_one_line_before_measuring(runner, tmp_path, fake_sweep, base, says):
    (tmp_path / "model.json").write_text("{}")
    before = (tmp_path / "model.json").read_text()
    result = run_cli(runner, "calibrate", "--budget", "60", "--base", tmp_path / base, "-o", tmp_path / "model.json")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert says in result.stderr
    assert not fake_sweep and (tmp_path / "model.json").read_text() == before


def _hot_workload_file(tmp_path) -> Path:
    from shardopt.bench.regimes import regime_task
    from shardopt.core.workload import workload_to_dict, workload_yaml

    path = tmp_path / "hot.yaml"
    path.write_text(workload_yaml(workload_to_dict(regime_task("hot", 1000).workload)))
    return path


def test_calibrate_for_a_workload_measures_its_own_tables_and_its_ranks_kernels(runner, tmp_path, fake_sweep,
                                                                              monkeypatch):
    from shardopt.core.workload import read_workload
    from shardopt.costmodel.registry import resolve_cost_model

    path = _hot_workload_file(tmp_path)
    out = tmp_path / "model.json"
    workload, _ = read_workload(path)
    fake = FakeMachine(resolve_cost_model("analytic", workload)[0])
    monkeypatch.setattr("shardopt.measure.refine.replay_side_by_side", fake.replay)
    result = run_cli(runner, "calibrate", "--workload", path, "--budget", "60", "-o", out)
    assert result.exit_code == 0, result.stderr
    # then its own plans, measured and corrected: the file is for the analytic part
    refined = json.loads(out.read_text())
    # each round, then the finalists (where there are two or more); its replicas apart
    assert 1 <= len(refined["report"]["refine"]["rounds"]) <= fake.calls <= len(refined["report"]["refine"]["rounds"]) + 1
    replicas = refined["report"]["refine"]["replicas"]["replicas"]
    assert replicas > 0 and "alone" not in refined["report"]["refine"]
    assert refined["calibration"]["table_factors"] and "analytic@" in result.stdout
    assert f"calibrate --workload: each table it may replicate measured as a replica ({replicas} of them)" in result.stderr
    assert "calibrate --workload: round 1: measured step" in result.stderr
    call = fake_sweep[0]
    assert call["preset"] == "workload"
    singles = [k["tables"][0] for k in call["kernels"] if len(k["tables"]) == 1]
    # every table alone at its own pooling (the hot ones, pooled 100-300, too) and dimension
    for table in workload.tables:
        assert any(t["pooling_factor"] == round(table.pooling_factor, 3) and t["dim"] == table.embedding_dim
                   for t in singles), table.name
    assert max(t["pooling_factor"] for t in singles) > 200
    fused = [k for k in call["kernels"] if len(k["tables"]) > 1]
    assert len(fused) >= workload.topology.world_size  # the ranks of its plans
    assert json.loads(out.read_text())["report"]["calibrate"]["workload"] == str(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hot.yaml", "model.json"]


def test_workload_kernels_are_the_same_for_the_same_workload_and_seed():
    from shardopt.bench.regimes import regime_task
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.planner.workload_points import workload_kernels

    workload = regime_task("hot", 1000).workload
    model = resolve_cost_model("analytic", workload)[0]
    assert workload_kernels(workload, model, False, 0) == workload_kernels(workload, model, False, 0)


def test_calibrate_refuses_a_workload_for_another_device(runner, tmp_path, fake_sweep):
    out = tmp_path / "model.json"
    result = run_cli(runner, "calibrate", "--workload", CONFIGS / "h100-16.yaml", "--budget", "60", "-o", out)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "topology.compute_device" in lines[0] and "h100-16.yaml" in lines[0]
    assert not out.exists() and not fake_sweep


def test_a_probe_rescales_the_packaged_model_within_twenty_seconds(runner, tmp_path, fake_sweep, monkeypatch):
    from shardopt.profile.dataset import CPU_ID_VARIABLE

    measured_on = json.loads((PACKAGED_PROFILE / "manifest.json").read_text())["cpu_id"]
    monkeypatch.setenv(CPU_ID_VARIABLE, measured_on)  # the stand-in points' machine is this one
    out = tmp_path / "probe.json"
    result = run_cli(runner, "calibrate", "--probe", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert fake_sweep[0]["preset"] == "probe" and 0 < fake_sweep[0]["deadline_in"] <= 20
    data = json.loads(out.read_text())
    assert data["report"]["model"] == "packaged model, rescaled"
    # the file speaks for the machine the probe measured, which --robust auto then trusts
    assert data["calibration"]["trained_on"]["cpu_id"] == measured_on
    plan = tmp_path / "p.json"
    result = run_cli(runner, "plan", CONFIGS / "tiny.yaml", "--cost-model", f"learned@{out}", "--search", "greedy",
                     "-o", plan)
    assert result.exit_code == 0 and "robust: off" in result.stdout
    again = tmp_path / "q.json"
    run_cli(runner, "plan", CONFIGS / "tiny.yaml", "--cost-model", f"learned@{out}", "--search", "greedy", "-o", again)
    assert plan.read_bytes() == again.read_bytes()


def test_a_probe_for_a_workload_measures_its_replicas_and_prices_no_table_alone(runner, tmp_path, fake_sweep,
                                                                              monkeypatch):
    from shardopt.core.workload import read_workload
    from shardopt.costmodel.registry import resolve_cost_model

    path = _hot_workload_file(tmp_path)
    workload, _ = read_workload(path)
    fake = FakeMachine(resolve_cost_model("analytic", workload)[0])
    monkeypatch.setattr("shardopt.measure.refine.replay_side_by_side", fake.replay)
    monkeypatch.setattr("shardopt.measure.refine.replica_factors", fake.replicas)
    out = tmp_path / "probe.json"
    result = run_cli(runner, "calibrate", "--probe", "--workload", path, "-o", out)
    assert result.exit_code == 0, result.stderr
    # the sweep (the workload's own kernels among its points) leaves room for the replicas, all within 20 s
    assert fake_sweep[0]["preset"] == "probe" and 0 < fake_sweep[0]["deadline_in"] <= 10
    data = json.loads(out.read_text())
    replicas = data["report"]["replicas"]["replicas"]
    assert fake.calls == 0 and replicas > 0 and "refine" not in data["report"]  # no plan, no table alone measured
    factors = data["calibration"]["table_factors"]
    assert len(factors) == replicas and {f["kernel"] for f in factors} == {"dense"}
    assert f"The {replicas} tables it may replicate measured as replicas" in result.stdout and "analytic@" in result.stdout
    plans = []
    for name in ("p.json", "q.json"):
        assert run_cli(runner, "plan", path, "--cost-model", f"analytic@{out}", "-o", tmp_path / name).exit_code == 0
        plans.append((tmp_path / name).read_bytes())
    assert plans[0] == plans[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hot.yaml", "p.json", "probe.json", "q.json"]


def test_calibrate_for_a_2d_workload_says_its_plans_were_not_measured(runner, tmp_path, fake_sweep, monkeypatch):
    from shardopt.bench.regimes import regime_task
    from shardopt.core.workload import workload_to_dict, workload_yaml

    data = workload_to_dict(regime_task("hot", 1000).workload)
    data["parallelism"] = {"sharding_group_size": 2, "sync_every": 10}
    path = tmp_path / "grouped.yaml"
    path.write_text(workload_yaml(data))
    monkeypatch.setattr("shardopt.measure.refine.replay_side_by_side", None)  # never reached
    out = tmp_path / "model.json"
    result = run_cli(runner, "calibrate", "--workload", path, "--budget", "60", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "Its plans were not measured: a 2D workload" in result.stdout
    model = json.loads(out.read_text())
    assert "table_factors" not in model["calibration"] and "skipped" in model["report"]["refine"]
    probe = tmp_path / "probe.json"
    result = run_cli(runner, "calibrate", "--probe", "--workload", path, "-o", probe)
    assert result.exit_code == 0, result.stderr
    assert "Its replicas were not measured: a 2D workload" in result.stdout
    model = json.loads(probe.read_text())
    assert "table_factors" not in model["calibration"] and "skipped" in model["report"]["replicas"]


def test_a_calibration_with_no_plan_measured_still_says_its_replicas_were_measured():
    """A large workload: its replicas measured, no time left for a plan's round. The summary says
    both (the replicas' factors are in the file)."""
    from shardopt.cli.calibrate_workload import refine_line

    replicas = {"replicas": 3, "seconds": 1.5}
    line = refine_line({"refine": {"replicas": replicas, "rounds": []}})
    assert "The 3 tables it may replicate measured as replicas in 1.5 s." in line
    one = refine_line({"refine": {"replicas": {"replicas": 1, "seconds": 0.7}, "rounds": []}})
    assert one.startswith(" The 1 table it may replicate measured as a replica in 0.7 s.")
    assert line.endswith("No time was left to measure its plans: give --budget more seconds.")
    assert refine_line({"refine": {"rounds": []}}) == " No time was left to measure its plans: give --budget more seconds."
    none = refine_line({"refine": {"replicas": {"replicas": 0, "seconds": 0.0}, "rounds": []}})
    assert none.startswith(" None of its tables may be replicated")
    # Where the first plan's round was guessed and fell short, the line says by how much.
    assert refine_line({"refine": {"replicas": replicas, "rounds": [], "short_s": 57}}).endswith(
        "No time was left to measure its plans: give --budget about 57 s more.")
