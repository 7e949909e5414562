"""What issue 37 found, each a test: replan takes no old plan on trust, and the messages say what
happened (the other output named as an output, a zero cap as a zero cap, --base named, an
interrupted sweep's kept points)."""

from __future__ import annotations

import json

import yaml

from conftest import CONFIGS, run_cli


def _workload(world: int, name: str = "mv", device: str = "cpu") -> dict:
    return {"version": 1, "name": name, "batch_size": 128,
            "topology": {"world_size": world, "local_world_size": world, "compute_device": device, "hbm_cap": "8MB"},
            "tables": [{"name": f"t{i}", "num_embeddings": 2000 + 500 * i, "embedding_dim": 16, "pooling_factor": 2.0}
                       for i in range(4)]}


def _files(tmp_path, runner):
    (tmp_path / "w3.yaml").write_text(yaml.safe_dump(_workload(3)))
    (tmp_path / "w2.yaml").write_text(yaml.safe_dump(_workload(2)))
    assert run_cli(runner, "plan", tmp_path / "w3.yaml", "-o", tmp_path / "p3.json", "--time-limit", "0.5").exit_code == 0
    return json.loads((tmp_path / "p3.json").read_text())


def _replan(runner, tmp_path, old, new, *extra):
    return run_cli(runner, "replan", old, new, "-o", tmp_path / "out.json", "--time-limit", "0.5", *extra)


def test_replan_refuses_an_old_plan_that_lists_a_table_twice(runner, tmp_path):
    plan = _files(tmp_path, runner)
    plan["tables"].append(plan["tables"][0])
    (tmp_path / "twice.json").write_text(json.dumps(plan))
    result = _replan(runner, tmp_path, tmp_path / "twice.json", tmp_path / "w2.yaml")
    assert result.exit_code == 2 and "is listed twice" in result.stderr and "twice.json" in result.stderr
    assert not (tmp_path / "out.json").exists()


def test_replan_refuses_an_old_plan_of_another_workload_unless_told_what_it_was(runner, tmp_path):
    _files(tmp_path, runner)
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(_workload(2, name="other")))
    result = _replan(runner, tmp_path, tmp_path / "p3.json", tmp_path / "other.yaml")
    assert result.exit_code == 2
    assert "workload.name: the plan is of workload 'mv', not 'other'" in result.stderr and "--old-workload" in result.stderr
    told = _replan(runner, tmp_path, tmp_path / "p3.json", tmp_path / "other.yaml", "--old-workload", tmp_path / "w3.yaml")
    assert told.exit_code == 0, told.stderr  # the same model, renamed: a change replan makes
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(_workload(2, device="cuda")))
    device = _replan(runner, tmp_path, tmp_path / "p3.json", tmp_path / "gpu.yaml", "--old-workload", tmp_path / "w3.yaml")
    assert device.exit_code == 2 and "topology.compute_device: cuda" in device.stderr


def test_replan_names_the_other_output_as_an_output(runner, tmp_path):
    _files(tmp_path, runner)
    result = run_cli(runner, "replan", tmp_path / "p3.json", tmp_path / "w2.yaml", "-o", tmp_path / "x.json",
                     "--moves", tmp_path / "x.json")
    assert result.exit_code == 2
    assert "--moves" in result.stderr and "is also the --output output" in result.stderr and "input" not in result.stderr


def test_a_zero_cap_is_said_to_be_zero(runner, tmp_path):
    result = run_cli(runner, "sweep", CONFIGS / "tiny.yaml", "--world-sizes", "2", "--hbm-caps", "0", "-o", tmp_path / "s")
    assert result.exit_code == 2 and "--hbm-caps: '0': must be a positive size" in result.stderr


def test_calibrate_names_base_when_its_file_is_bad(runner, tmp_path):
    (tmp_path / "m.json").write_text('{"x": 1}')
    result = run_cli(runner, "calibrate", "--base", tmp_path / "m.json", "-o", tmp_path / "out.json")
    assert result.exit_code == 2 and result.stderr.startswith(f"error: --base {tmp_path / 'm.json'}: ")


def test_an_interrupted_sweep_says_what_it_kept_and_how_to_resume(runner, tmp_path, monkeypatch):
    import shardopt.planner.sweep as sweep_module

    real = sweep_module.sweep

    def one_point_then_interrupt(workload, worlds, caps, config, folder, jobs, progress=None, key="", groups=(None,)):
        real(workload, worlds[:1], caps, config, folder, 1, progress, key, groups)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "sweep", one_point_then_interrupt)
    out = tmp_path / "s"
    args = ["sweep", CONFIGS / "tiny.yaml", "--world-sizes", "1,2", "--time-limit", "0.5", "-o", out]
    result = run_cli(runner, *args)
    assert result.exit_code == 130
    assert f"interrupted: kept 1 finished points of 2 in {out / 'points'}; run the same command again to resume" \
        in result.stderr
    assert not (out / "sweep.md").exists()

    def interrupt_at_once(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "sweep", interrupt_at_once)
    early = tmp_path / "early"
    result = run_cli(runner, "sweep", CONFIGS / "tiny.yaml", "--world-sizes", "1,2", "-o", early)
    assert result.exit_code == 130 and "no point had finished; nothing was written" in result.stderr
    assert not early.exists()  # the folder this run made, removed: nothing left behind
