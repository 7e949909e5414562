"""2D workloads on the command line: plan (auto and a given size), validate, evaluate, sweep."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from conftest import run_cli

GROUPED = Path(__file__).parents[1] / "data" / "grouped.yaml"


def _with(tmp_path, **parallelism) -> Path:
    data = yaml.safe_load(GROUPED.read_text())
    data["parallelism"] = {**data["parallelism"], **parallelism}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_auto_plans_each_size_and_keeps_the_fastest_step_with_its_sync(runner, tmp_path):
    out = tmp_path / "p.json"
    result = run_cli(runner, "plan", GROUPED, "-o", out, "--time-limit", "0.5")
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    block = plan["parallelism"]
    assert plan["version"] == 4 and plan["world_size"] == block["sharding_group_size"]
    planned = [c for c in block["choices"] if "step_ms" in c]
    assert block["step_ms"] == min(c["step_ms"] for c in planned) and len(planned) >= 2
    assert block["chosen_by"] == "auto" and "2D:" in result.stdout and "group sizes weighed" in result.stdout
    # Too small to hold the tables: weighed and refused with what it would need.
    assert any("the tables need" in c.get("refused", "") for c in block["choices"])
    assert run_cli(runner, "validate", GROUPED, out).exit_code == 0
    assert run_cli(runner, "evaluate", GROUPED, out).exit_code == 0


def test_a_given_size_is_planned_for_and_a_plan_for_another_size_or_a_1d_workload_is_invalid(runner, tmp_path):
    given = _with(tmp_path, sharding_group_size=8)
    out = tmp_path / "p8.json"
    assert run_cli(runner, "plan", given, "-o", out, "--time-limit", "0.5").exit_code == 0
    block = json.loads(out.read_text())["parallelism"]
    assert block["sharding_group_size"] == 8 and block["chosen_by"] == "workload" and block["sync_ms"] > 0
    other = tmp_path / "w4.yaml"
    other.write_text(given.read_text().replace("sharding_group_size: 8", "sharding_group_size: 16"))
    result = run_cli(runner, "validate", other, out)
    assert result.exit_code == 1 and "parallelism.sharding_group_size: plan has 8, workload has 16" in result.stdout
    flat = tmp_path / "flat.yaml"
    data = yaml.safe_load(given.read_text())
    del data["parallelism"]
    flat.write_text(yaml.safe_dump(data))
    result = run_cli(runner, "validate", flat, out)
    assert result.exit_code == 1 and "declares no parallelism block" in result.stdout


def test_a_group_too_small_for_the_tables_is_refused_with_the_memory_it_needs(runner, tmp_path):
    result = run_cli(runner, "plan", _with(tmp_path, sharding_group_size=2), "-o", tmp_path / "p.json")
    assert result.exit_code == 3, result.output
    assert "parallelism.sharding_group_size: a group of 2 ranks holds" in result.stderr
    assert "the tables need" in result.stderr and not (tmp_path / "p.json").exists()


def test_sweep_over_group_sizes_shows_the_trade(runner, tmp_path):
    out = tmp_path / "sweep"
    result = run_cli(runner, "sweep", GROUPED, "--group-sizes", "all", "--time-limit", "0.5", "--jobs", "1", "-o", out)
    assert result.exit_code == 0, result.output
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert [p["group_size"] for p in points] == [1, 2, 4, 8, 16]
    feasible = [p for p in points if p["feasible"]]
    assert feasible[-1]["group_size"] == 16 and feasible[-1]["sync_ms"] == 0.0  # one group: nothing to sync
    assert all(p["sync_ms"] > 0 for p in feasible[:-1])
    assert "(best)" in (out / "sweep.md").read_text() and (out / "sweep.png").stat().st_size > 1000
    # The size auto chose is the sweep's best.
    plan_out = tmp_path / "p.json"
    run_cli(runner, "plan", GROUPED, "-o", plan_out, "--time-limit", "0.5")
    best = min(feasible, key=lambda p: p["step_ms"])
    assert json.loads(plan_out.read_text())["parallelism"]["sharding_group_size"] == best["group_size"]


def test_bad_group_sizes_are_one_line(runner, tmp_path):
    result = run_cli(runner, "sweep", GROUPED, "--group-sizes", "3", "-o", tmp_path / "s")
    assert result.exit_code == 2 and "--group-sizes: 3 at 16 ranks: must divide world_size 16" in result.stderr
    assert not (tmp_path / "s").exists()


def test_commands_that_weigh_1d_plans_refuse_a_2d_one_in_one_line(runner, tmp_path):
    given = _with(tmp_path, sharding_group_size=8)
    plan = tmp_path / "p.json"
    assert run_cli(runner, "plan", given, "-o", plan, "--time-limit", "0.5").exit_code == 0
    result = run_cli(runner, "replan", plan, given, "-o", tmp_path / "r.json")
    assert result.exit_code == 2 and "replan re-shards 1D plans only" in result.stderr
    assert not (tmp_path / "r.json").exists()
    result = run_cli(runner, "compare", given)
    assert result.exit_code == 2 and "compare weighs 1D plans" in result.stderr


def _wide(tmp_path, world: int, device: str = "cuda") -> Path:
    """Six wide tables pooled once at a large batch: a 1D plan's step is mostly all-to-all."""
    data = {"version": 1, "name": "wide", "batch_size": 16384,
            "topology": {"world_size": world, "local_world_size": world // 2, "compute_device": device,
                         "hbm_cap": "2GB", **({"hardware": "h100"} if device == "cuda" else {})},
            "tables": [{"name": f"t{i}", "num_embeddings": 500_000, "embedding_dim": 256, "pooling_factor": 1.0}
                       for i in range(6)]}
    path = tmp_path / f"wide{world}{device}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_1d_gpu_plan_with_more_ranks_than_tables_waiting_on_comm_points_to_groups(runner, tmp_path):
    result = run_cli(runner, "plan", _wide(tmp_path, 16), "-o", tmp_path / "p.json", "--time-limit", "0.5")
    assert result.exit_code == 0, result.output
    hint = [line for line in result.stdout.splitlines() if line.startswith("2D not weighed")]
    assert len(hint) == 1 and "16 ranks for 6 tables" in hint[0] and "sharding_group_size: auto" in hint[0]
    # Grouped in fact (sync every 100 steps), the same tables plan faster: the hint is not idle talk.
    data = yaml.safe_load(_wide(tmp_path, 16).read_text())
    data["parallelism"] = {"sharding_group_size": "auto", "sync_every": 100}
    grouped = tmp_path / "grouped.yaml"
    grouped.write_text(yaml.safe_dump(data))
    out = tmp_path / "g.json"
    assert run_cli(runner, "plan", grouped, "-o", out, "--time-limit", "0.5").exit_code == 0
    ranks = json.loads((tmp_path / "p.json").read_text())["predicted"]["per_rank"]
    flat_step = sum(max(r[phase] for r in ranks) for phase in ("fwd_compute_ms", "bwd_compute_ms",
                                                                "fwd_comm_ms", "bwd_comm_ms"))
    assert json.loads(out.read_text())["parallelism"]["step_ms"] < flat_step
    # Fewer ranks than tables, or CPU ranks (no DMPCollection): no hint.
    for path in (_wide(tmp_path, 4), _wide(tmp_path, 16, "cpu")):
        result = run_cli(runner, "plan", path, "-o", tmp_path / "q.json", "--time-limit", "0.5")
        assert result.exit_code in (0, 3) and "2D not weighed" not in result.stdout
