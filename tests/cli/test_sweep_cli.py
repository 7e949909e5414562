"""shardopt sweep and plan --explain on the command line."""

from __future__ import annotations

import json

import pytest

from conftest import CONFIGS, run_cli

ROOT = CONFIGS.parent


def test_sweep_writes_a_table_data_and_a_plot_and_names_the_smallest_cluster(runner, tmp_path):
    out = tmp_path / "sweep"
    result = run_cli(runner, "sweep", CONFIGS / "tiny.yaml", "--world-sizes", "4,1,2", "--hbm-caps", "12MB,6MB",
                     "--target-step", "100", "--time-limit", "0.5", "--jobs", "2", "-o", out)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "sweep.json").read_text())
    points = data["points"]
    assert [(p["world_size"], p["hbm_cap"]) for p in points] == [
        (1, 12_000_000), (1, 6_000_000), (2, 12_000_000), (2, 6_000_000), (4, 12_000_000), (4, 6_000_000)]
    # One rank cannot hold tiny's 16 MiB of tables: a row with its reason, not a failed sweep.
    assert not points[0]["feasible"] and "fits in memory" in points[0]["reason"]
    feasible = [p for p in points if p["feasible"]]
    assert feasible and all(p["step_ms"] > 0 and 0 <= p["headroom"] <= 1 for p in feasible)
    assert all(p["efficiency"] > 0 for p in feasible)
    assert data["smallest_meeting_target"]["world_size"] == min(p["world_size"] for p in feasible)
    assert "the smallest cluster meeting 100 ms: 2 ranks" in result.stdout
    assert (out / "sweep.png").stat().st_size > 1000 and "| ranks |" in (out / "sweep.md").read_text()


def test_an_interrupted_sweep_resumes_from_its_finished_points(runner, tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    args = ["sweep", CONFIGS / "tiny.yaml", "--world-sizes", "2,4", "--time-limit", "0.5", "--jobs", "1", "-o", out]
    assert run_cli(runner, *args).exit_code == 0
    first = (out / "sweep.json").read_text()
    import shardopt.planner.sweep as sweep

    def never(*_):
        raise AssertionError("a finished point was planned again")

    monkeypatch.setattr(sweep, "plan_point", never)
    (out / "sweep.md").unlink()
    assert run_cli(runner, *args).exit_code == 0
    assert (out / "sweep.json").read_text() == first and (out / "sweep.md").exists()
    # Other options are another sweep: its points are planned again, not read back.
    monkeypatch.undo()
    from shardopt.contracts import PlanConfig
    from shardopt.core.workload import read_workload

    sweep.sweep(read_workload(CONFIGS / "tiny.yaml")[0], [2], [None], PlanConfig(time_limit_s=0.5), out, 1, key="other")
    assert json.loads((out / "points" / "w2-capdefault.json").read_text())["key"] == "other"


@pytest.mark.parametrize("args, words", [
    (["--world-sizes", "2,x"], "--world-sizes: 'x' is not a whole number"),
    (["--world-sizes", "0"], "--world-sizes: 0 is out of range"),
    (["--world-sizes", "2", "--hbm-caps", "lots"], "--hbm-caps: 'lots': must be a size such as 80GB"),
    (["--world-sizes", "2", "--target-step", "-1"], "--target-step"),
])
def test_bad_sweep_options_are_one_line_and_write_nothing(runner, tmp_path, args, words):
    out = tmp_path / "sweep"
    result = run_cli(runner, "sweep", CONFIGS / "tiny.yaml", *args, "-o", out)
    assert result.exit_code == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_a_sweep_never_writes_into_its_inputs(runner, tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text((CONFIGS / "tiny.yaml").read_text())
    result = run_cli(runner, "sweep", workload, "--world-sizes", "2", "-o", tmp_path / "w.yaml")
    assert result.exit_code == 2 and workload.read_text() == (CONFIGS / "tiny.yaml").read_text()


def test_plan_explain_lists_the_conflicting_requirements(runner, tmp_path):
    import yaml

    data = yaml.safe_load((ROOT / "examples" / "placement.yaml").read_text())
    data["placement"] = [{"kind": "pin", "tables": ["t000", "t001", "t002"], "ranks": [3]},
                         {"kind": "apart", "tables": ["t005", "t006"]}]
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump(data))
    out = tmp_path / "p.json"
    result = run_cli(runner, "plan", workload, "--time-limit", "0.5", "-o", out, "--explain")
    assert result.exit_code == 3 and not out.exists()
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "rank 3 needs" in lines[-1] and "apart" not in lines[-1]
    assert [line for line in lines if line.startswith("conflict: ")] == [
        "conflict: the 6.68 MiB for shards of rank 3",
        "conflict: pin of t000, t001, t002 to rank 3 (to relax: unpin t000, t001, t002 (placement[0]))"]
    plain = run_cli(runner, "plan", workload, "--time-limit", "0.5", "-o", out)
    assert plain.exit_code == 3 and len(plain.stderr.strip().splitlines()) == 1


def test_the_example_plans_with_its_rules_and_validate_names_a_broken_one(runner, tmp_path):
    out = tmp_path / "p.json"
    example = ROOT / "examples" / "placement.yaml"
    result = run_cli(runner, "plan", example, "--time-limit", "0.5", "-o", out)
    assert result.exit_code == 0 and "placement: 4 rules kept" in result.stdout
    assert run_cli(runner, "validate", example, out).exit_code == 0
    plan = json.loads(out.read_text())
    for tp in plan["tables"]:
        if tp["name"] == "t000":
            tp["shards"][0]["rank"] = 0
    out.write_text(json.dumps(plan))
    result = run_cli(runner, "validate", example, out)
    assert result.exit_code == 1 and "placement[0] (pin of t000 to rank 3): table 't000' has a shard on rank 0" in result.output
