"""shardopt replan and check-moves on the command line: files, the manifest, and one-line errors."""

from __future__ import annotations

import json

import pytest

from conftest import CONFIGS, run_cli


@pytest.fixture
def grown(tmp_path):
    """tiny.yaml's old plan on 2 ranks, and the workload on 4."""
    old = tmp_path / "old.json"
    text = (CONFIGS / "tiny.yaml").read_text()
    new = tmp_path / "tiny4.yaml"
    new.write_text(text.replace("world_size: 2, local_world_size: 2", "world_size: 4, local_world_size: 4"))
    return old, new


def _plan(runner, old):
    assert run_cli(runner, "plan", CONFIGS / "tiny.yaml", "--time-limit", "0.5", "-o", old).exit_code == 0


def test_replan_writes_a_plan_and_an_exact_manifest(runner, tmp_path, grown):
    old, new = grown
    _plan(runner, old)
    out, moves = tmp_path / "new.json", tmp_path / "moves.json"
    result = run_cli(runner, "replan", old, new, "--old-workload", CONFIGS / "tiny.yaml", "--max-move", "1MB",
                     "--time-limit", "0.5", "-o", out, "--moves", moves)
    assert result.exit_code == 0
    assert "replan: step" in result.stdout and "x a fresh plan's" in result.stdout
    manifest = json.loads(moves.read_text())
    assert manifest["moved_bytes"] <= 1_000_000
    assert json.loads(out.read_text())["world_size"] == 4
    assert run_cli(runner, "validate", new, out).exit_code == 0
    assert run_cli(runner, "check-moves", new, old, out, moves).exit_code == 0
    manifest["moves"] = manifest["moves"][1:] if manifest["moves"] else [
        {"table": "t000", "rows": [0, 1], "cols": [0, 1], "from_rank": 0, "to_rank": 3, "bytes": 1}]
    moves.write_text(json.dumps(manifest))
    result = run_cli(runner, "check-moves", new, old, out, moves)
    assert result.exit_code == 1 and "problem" in result.stderr


def test_the_frontier_prints_and_plots(runner, tmp_path, grown):
    old, new = grown
    _plan(runner, old)
    result = run_cli(runner, "replan", old, new, "--frontier", "--plot", tmp_path / "f.png", "--time-limit", "0.3")
    assert result.exit_code == 0
    assert "| budget | moved |" in result.stdout
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, says, code", [
    (["--max-move", "lots"], "--max-move", 2),
    (["--plot", "f.png"], "--plot", 2),
    (["--moves", "m.json"], "--moves", 2),
    ([], "--output", 2),
])
def test_bad_options_are_one_line(runner, tmp_path, grown, args, says, code):
    old, new = grown
    _plan(runner, old)
    extra = ["-o", tmp_path / "n.json"] if args and args[0] == "--max-move" else []
    result = run_cli(runner, "replan", old, new, *args, *extra)
    assert result.exit_code == code
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr
    assert not (tmp_path / "n.json").exists()


def test_an_old_plan_for_another_workload_is_refused(runner, tmp_path, grown):
    old, new = grown
    _plan(runner, old)
    result = run_cli(runner, "replan", old, new, "--old-workload", CONFIGS / "dlrm-medium.yaml", "-o", tmp_path / "n.json")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "the plan is of workload 'tiny', not 'dlrm-medium' (--old-workload" in result.stderr
    assert not (tmp_path / "n.json").exists()


def test_a_shrink_below_its_forced_bytes_and_an_impossible_world_say_so(runner, tmp_path, grown):
    old4, tiny4 = tmp_path / "old4.json", grown[1]
    assert run_cli(runner, "plan", tiny4, "--time-limit", "0.5", "-o", old4).exit_code == 0
    result = run_cli(runner, "replan", old4, CONFIGS / "tiny.yaml", "--max-move", "0", "-o", tmp_path / "n.json")
    assert result.exit_code == 2 and "the change forces" in result.stderr
    one = tmp_path / "tiny1.yaml"
    one.write_text((CONFIGS / "tiny.yaml").read_text().replace(
        "world_size: 2, local_world_size: 2, compute_device: cpu, hbm_cap: 12MB",
        "world_size: 2, local_world_size: 2, compute_device: cpu, hbm_cap: 4MB"))
    result = run_cli(runner, "replan", old4, one, "-o", tmp_path / "n.json")
    assert result.exit_code == 3, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "n.json").exists()


def test_the_output_may_not_be_an_input(runner, tmp_path, grown):
    old, new = grown
    _plan(runner, old)
    before = old.read_bytes()
    result = run_cli(runner, "replan", old, new, "-o", old)
    assert result.exit_code == 2 and "--output" in result.stderr
    assert old.read_bytes() == before
