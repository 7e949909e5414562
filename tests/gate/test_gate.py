"""The users' gate: a baseline made with --update passes unchanged; edits that make a plan worse
fail naming the workload and metric; committed plans go stale and --fix refreshes them; a changed
model is one line; JUnit and Markdown come out right; bad input is exit 2."""

import json
import shutil

import pytest
import yaml
from conftest import CONFIGS, run_cli

LIMIT = ("--time-limit", "1")
HEAVIEST = 14  # beta's table with the most lookups and the widest rows


def _synth(name, tables, world=4, cap="256MB"):
    return {"version": 1, "name": name, "batch_size": 256,
            "topology": {"world_size": world, "hbm_cap": cap, "compute_device": "cpu"},
            "tables": [{"name": f"{name}_t{i}", "num_embeddings": 20_000 + 7_000 * i, "embedding_dim": 32 * (1 + i % 3),
                        "pooling_factor": 2.0 + i % 5} for i in range(tables)]}


@pytest.fixture
def repo(tmp_path, runner, monkeypatch):
    """Three workloads and a baseline written with --update."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(CONFIGS / "tiny.yaml", "tiny.yaml")
    for name, n in (("alpha", 10), ("beta", 16)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(_synth(name, n)))
    result = run_cli(runner, "gate", "tiny.yaml", "alpha.yaml", "beta.yaml", "--baseline", "gate.json", "--update", *LIMIT)
    assert result.exit_code == 0
    return tmp_path


def _gate(runner, *extra):
    return run_cli(runner, "gate", "tiny.yaml", "alpha.yaml", "beta.yaml", "--baseline", "gate.json", *LIMIT, *extra)


def _edit(path, change):
    data = yaml.safe_load(open(path))
    change(data)
    open(path, "w").write(yaml.safe_dump(data))


def test_an_unchanged_repository_passes(repo, runner):
    result = _gate(runner)
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output and result.output.count(" ok ") >= 12


@pytest.mark.parametrize("edit, metric", [
    (lambda d: d["tables"][HEAVIEST].update(pooling_factor=d["tables"][HEAVIEST]["pooling_factor"] * 4), "step"),
    (lambda d: d["tables"][HEAVIEST].update(embedding_dim=d["tables"][HEAVIEST]["embedding_dim"] * 2), "step"),
    (lambda d: d["topology"].update(hbm_cap="128MB"), "headroom"),
    (lambda d: d["tables"].append({"name": "huge", "num_embeddings": 200_000, "embedding_dim": 64,
                                   "pooling_factor": 20.0}), "step"),
], ids=["pooling-x4", "dim-x2", "hbm-cap-halved", "new-large-table"])
def test_each_edit_fails_naming_the_workload_and_metric(repo, runner, edit, metric):
    _edit(repo / "beta.yaml", edit)
    result = _gate(runner)
    assert result.exit_code == 1, result.output
    failed = [line for line in result.output.splitlines() if " FAIL " in line]
    assert failed and all(line.startswith("beta") for line in failed)
    assert any(line.split()[1] == metric for line in failed), failed
    assert "the workload changed since the baseline" in result.output


def test_a_stale_committed_plan_is_found_and_fixed(repo, runner):
    (repo / "plans").mkdir()
    assert _gate(runner, "--plans", "plans", "--fix").exit_code == 0  # writes the missing plans
    assert _gate(runner, "--plans", "plans").exit_code == 0
    _edit(repo / "alpha.yaml", lambda d: d["tables"].append(
        {"name": "new", "num_embeddings": 30_000, "embedding_dim": 64, "pooling_factor": 4.0}))
    stale = _gate(runner, "--plans", "plans")
    assert stale.exit_code == 1 and "stale: no longer a valid plan" in stale.output
    fixed = _gate(runner, "--plans", "plans", "--fix", "--update")
    assert "wrote a fresh plan" in fixed.output and "alpha: step" in fixed.output
    assert json.loads((repo / "plans" / "alpha.json").read_text())["tables"][-1]["name"] == "new"
    again = _gate(runner, "--plans", "plans")
    assert again.exit_code == 0, again.output


def test_a_plan_a_fresh_one_beats_is_stale(repo, runner):
    (repo / "plans").mkdir()
    _gate(runner, "--plans", "plans", "--fix")
    plan = json.loads((repo / "plans" / "beta.json").read_text())
    whole = [t for t in plan["tables"] if t["sharding_type"] == "table_wise"][:6]
    for t in whole:  # six tables piled on rank 0: still within memory, but slow
        t["shards"][0]["rank"] = 0
    (repo / "plans" / "beta.json").write_text(json.dumps(plan))
    result = _gate(runner, "--plans", "plans")
    assert result.exit_code == 1, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("beta") and " plan " in line)
    assert "FAIL" in line and "plans/beta.json: re-plan: fresh plan is" in line and "faster" in line


def test_a_changed_cost_model_is_one_finding_per_workload(repo, runner):
    data = json.loads((repo / "gate.json").read_text())
    for entry in data["workloads"].values():
        entry["cost_model"] = "analytic-calibrated-cpu@000000000000"
    (repo / "gate.json").write_text(json.dumps(data))
    result = _gate(runner)
    assert result.exit_code == 1
    failed = [line for line in result.output.splitlines() if " FAIL " in line]
    assert len(failed) == 3 and all("cost model changed" in line and " cost-model " in line for line in failed)


def test_junit_and_markdown(repo, runner):
    junitparser = pytest.importorskip("junitparser")
    _edit(repo / "alpha.yaml", lambda d: d["topology"].update(hbm_cap="96MB"))
    result = _gate(runner, "--junit", "gate.xml", "--summary", "summary.md")
    assert result.exit_code == 1
    xml = junitparser.JUnitXml.fromfile(str(repo / "gate.xml"))
    cases = [(case.classname, case.name, bool(case.result)) for suite in xml for case in suite]
    assert len(cases) == 12 and {c[1] for c in cases} == {"valid", "step", "bottleneck", "headroom"}
    assert {c[0] for c in cases if c[2]} == {"shardopt-gate.alpha"}
    summary = (repo / "summary.md").read_text()
    assert "| workload | check | before | after | verdict | detail |" in summary and "**FAIL**" in summary
    assert "![alpha](alpha-ranks.png)" in summary and (repo / "alpha-ranks.png").stat().st_size > 1000


@pytest.mark.parametrize("args, words", [
    (("--baseline", "missing.json"), "no such file"),
    (("--baseline", "gate.json", "--tolerance", "ten"), "--tolerance"),
    (("--baseline", "gate.json", "--fix"), "--fix: needs --plans"),
    (("--baseline", "tiny.yaml", "--update"), "--baseline"),
])
def test_bad_input_is_exit_2_in_one_line(repo, runner, args, words):
    result = run_cli(runner, "gate", "tiny.yaml", *args)
    assert result.exit_code == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_replay_reports_the_measured_step_without_gating_it(repo, runner):
    result = run_cli(runner, "gate", "tiny.yaml", "--baseline", "gate.json", *LIMIT, "--replay")
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if " replayed " in line)
    assert "replayed step" in line and "not gated" in line


def test_a_2d_workload_is_gated_on_its_step_with_the_sync(tmp_path, runner, monkeypatch):
    """The gate scores a 2D plan as plan does: the group's critical path plus the replicas' sync;
    a rarer sync in the edited workload shows as a shorter step, a more frequent one fails."""
    monkeypatch.chdir(tmp_path)
    source = CONFIGS.parent / "tests" / "data" / "grouped.yaml"
    data = yaml.safe_load(source.read_text())
    data["parallelism"] = {"sharding_group_size": 8, "sync_every": 10}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(data))
    assert run_cli(runner, "gate", "g.yaml", "--baseline", "gate.json", "--update", *LIMIT).exit_code == 0
    state = json.loads((tmp_path / "gate.json").read_text())["workloads"]["grouped"]
    assert run_cli(runner, "plan", "g.yaml", "-o", "p.json", *LIMIT).exit_code == 0
    assert state["step_ms"] == pytest.approx(json.loads((tmp_path / "p.json").read_text())["parallelism"]["step_ms"],
                                             abs=1e-5)
    assert run_cli(runner, "gate", "g.yaml", "--baseline", "gate.json", *LIMIT).exit_code == 0
    _edit("g.yaml", lambda d: d["parallelism"].update(sync_every=1))
    result = run_cli(runner, "gate", "g.yaml", "--baseline", "gate.json", *LIMIT)
    assert result.exit_code == 1 and "grouped" in result.stdout and "step" in result.stdout
