"""The shell command end to end: plan then validate every config, determinism, help, synth."""

import os
import subprocess
import sys

import pytest
import yaml

from conftest import CONFIGS, DATA, ROOT, run_cli
from shardopt import __version__

COMMANDS = ["plan", "validate", "synth"]


def test_version(runner):
    result = run_cli(runner, "--version")
    assert result.exit_code == 0 and __version__ in result.stdout


@pytest.mark.parametrize("command", [[]] + [[c] for c in COMMANDS])
def test_help_everywhere(runner, command):
    result = run_cli(runner, *command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.stdout


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_plan_then_validate_every_config(runner, tmp_path, config):
    out = tmp_path / "plan.json"
    result = run_cli(runner, "plan", config, "-o", out)
    assert result.exit_code == 0
    assert "bottleneck: rank" in result.stdout and "lower bound" in result.stdout
    assert "planned in" in result.stdout
    result = run_cli(runner, "validate", config, out)
    assert result.exit_code == 0, result.stdout
    assert result.stderr == ""


def test_same_input_same_plan_byte_for_byte(tmp_path):
    """Two processes with different hash seeds write identical plans."""
    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"plan{seed}.json"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run(
            [sys.executable, "-m", "shardopt", "plan", str(CONFIGS / "dlrm-medium.yaml"), "-o", str(out), "-q"],
            check=True,
            env=env,
            capture_output=True,
        )
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


def test_default_output_path(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli(runner, "plan", DATA / "good.yaml", "-q")
    assert result.exit_code == 0
    assert (tmp_path / "plans" / "good.json").is_file()
    assert result.stdout.strip() == os.path.join("plans", "good.json")


def test_missing_output_folder_is_an_input_error(runner, tmp_path):
    result = run_cli(runner, "plan", DATA / "good.yaml", "-o", tmp_path / "no" / "p.json")
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_impossible_memory_writes_nothing(runner, tmp_path):
    out = tmp_path / "p.json"
    result = run_cli(runner, "plan", DATA / "bad_workloads" / "impossible_memory.yaml", "-o", out)
    assert result.exit_code == 3  # no plan fits
    assert "no plan fits in memory" in result.stderr and "Possible fixes" in result.stderr
    assert "the roomiest, rank 0 on host 0, has" in result.stderr
    assert not out.exists()


def test_synth_is_reproducible_and_valid(runner, tmp_path):
    args = ["synth", "--name", "s", "--tables", "12", "--world-size", "4", "--rows-scale", "0.001"]
    run_cli(runner, *args, "--seed", "5", "-o", tmp_path / "a.yaml")
    run_cli(runner, *args, "--seed", "5", "-o", tmp_path / "b.yaml")
    run_cli(runner, *args, "--seed", "6", "-o", tmp_path / "c.yaml")
    a, b, c = ((tmp_path / f"{n}.yaml").read_text() for n in "abc")
    body = lambda text: text.split("\n", 1)[1]  # noqa: E731  (the header names the command)
    assert body(a) == body(b) and body(a) != body(c)
    result = run_cli(runner, "plan", tmp_path / "a.yaml", "-o", tmp_path / "a.json")
    assert result.exit_code == 0


@pytest.mark.parametrize(
    "dims, message",
    [("16,x", "--dims"), ("30", "--dims: must be a positive multiple of 4, got 30")],
)
def test_synth_rejects_options_that_make_no_valid_workload(runner, tmp_path, dims, message):
    out = tmp_path / "s.yaml"
    result = run_cli(
        runner, "synth", "--name", "s", "--tables", "2", "--world-size", "2", "--dims", dims, "-o", out
    )
    assert result.exit_code == 2
    assert message in result.stderr
    assert not out.exists()


def test_outputs_get_the_umask_mode_not_mkstemps_0600(runner, tmp_path):
    """A plan and a report PNG are readable by others, as any file the user's tools write."""
    old = os.umask(0o022)
    try:
        plan = tmp_path / "p.json"
        assert run_cli(runner, "plan", DATA / "good.yaml", "-o", plan, "--search", "greedy").exit_code == 0
        png = tmp_path / "bars.png"
        assert run_cli(runner, "report", plan, "-o", png).exit_code == 0
    finally:
        os.umask(old)
    assert plan.stat().st_mode & 0o777 == 0o644
    assert png.stat().st_mode & 0o777 == 0o644
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bars.png", "p.json"]


def test_default_output_folder_is_made_only_when_the_plan_is_written(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli(runner, "plan", DATA / "bad_workloads" / "impossible_memory.yaml")
    assert result.exit_code == 3
    assert list(tmp_path.iterdir()) == []  # no stray plans/ folder


def test_exit_codes_are_in_the_help(runner):
    result = run_cli(runner, "--help")
    assert "Exit codes: 0 ok; 1 invalid plan" in " ".join(result.stdout.split())


def test_make_plans_path_creates_the_plans_folder(runner, tmp_path, monkeypatch):
    """`make plan` passes -o plans/<stem>.json on a fresh checkout, where plans/ does not exist."""
    monkeypatch.chdir(tmp_path)
    result = run_cli(runner, "plan", DATA / "good.yaml", "-o", "plans/good.json", "--search", "greedy")
    assert result.exit_code == 0
    assert (tmp_path / "plans" / "good.json").is_file()


def test_bare_command_shows_the_help(runner):
    result = run_cli(runner)
    assert result.exit_code == 2
    assert result.stderr.startswith("Usage: shardopt [OPTIONS] COMMAND")
    assert "Commands:" in result.stderr.splitlines()


def test_the_default_job_plans_a_gpu_cluster_and_names_the_constants_that_priced_it(runner, tmp_path):
    """`make plan`'s workload is a GPU cluster (issue 22); its summary says which constants priced it."""
    import re

    default = re.search(r"^WORKLOAD \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    workload = yaml.safe_load((ROOT / default).read_text())
    assert workload["topology"]["compute_device"] == "cuda"
    assert workload["topology"]["world_size"] > workload["topology"]["local_world_size"]  # several hosts
    result = run_cli(runner, "plan", ROOT / default, "--search", "greedy", "-o", tmp_path / "p.json")
    assert result.exit_code == 0
    hardware = workload["topology"]["hardware"]
    assert f"compute: priced from hardware profile '{hardware}'" in result.stdout
    assert "shardopt/data/hardware.yaml" in result.stdout
    assert f"priced from hardware profile '{hardware}' links" in result.stdout
