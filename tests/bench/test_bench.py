"""The benchmark suite, its baselines, report, and the CI gate on plan quality."""

import json

import pytest

from shardopt.contracts import Breakdown
from shardopt.bench.baselines import RandomTableWise, TableWiseGreedy
from shardopt.bench.gate import baseline_data, check
from shardopt.bench.suite import run_suite
from shardopt.bench.suites import suite_tasks
from shardopt.bench.tasks import sampled_tasks, table_pool
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.arithmetic.memory import plan_memory
from shardopt.arithmetic.checks import check_plan
from shardopt.planner import plan_workload

from conftest import run_cli


@pytest.fixture(scope="module")
def unit_run():
    tasks = suite_tasks("unit")
    entries, plans = run_suite(tasks, ("shardopt", "size-greedy"))
    return tasks, entries, plans


def test_tasks_follow_the_protocol_and_are_deterministic():
    train, test = table_pool(0)
    assert len(train) == len(test) and not {json.dumps(t, sort_keys=True) for t in train} & {
        json.dumps(t, sort_keys=True) for t in test}
    tasks = sampled_tasks(6, seed=0)
    assert all(10 <= len(t.workload.tables) <= 60 for t in tasks)
    assert [t.workload for t in tasks] == [t.workload for t in sampled_tasks(6, seed=0)]
    assert {t.workload.topology.world_size for t in tasks} == {4}


@pytest.mark.parametrize("planner", ["size-greedy", "dim-greedy", "lookup-greedy", "size-lookup-greedy"])
def test_greedy_baselines_place_whole_tables_within_memory(planner):
    task = sampled_tasks(1, seed=3)[0]
    plan = plan_workload(task.workload, cost_model=AnalyticCostModel(), search=TableWiseGreedy(planner))
    assert check_plan(task.workload, plan).valid
    assert {t.sharding_type for t in plan.tables} == {"table_wise"}


def test_size_greedy_balances_bytes_better_than_random():
    task = sampled_tasks(1, seed=4)[0]
    spread = {}
    for name, search in (("size", TableWiseGreedy("size-greedy")), ("random", RandomTableWise(0))):
        plan = plan_workload(task.workload, cost_model=AnalyticCostModel(), search=search)
        hbm, _ = plan_memory(task.workload, plan.tables)
        spread[name] = max(hbm.values()) - min(hbm.values())
    assert spread["size"] < spread["random"]


def test_gate_passes_on_the_same_planner_and_fails_on_a_worse_setting(unit_run):
    tasks, entries, _ = unit_run
    baseline = baseline_data(entries, "unit")
    ok, table = check(entries, baseline)
    assert ok, table
    # A deliberately worse planner setting: shardopt replaced by dimension-greedy placement.
    worse, _ = run_suite(tasks, ("shardopt",), searches={"shardopt": TableWiseGreedy("dim-greedy")})
    ok, table = check(worse, baseline)
    assert not ok
    assert "FAIL: worse by more than 2%" in table
    # An invalid or missing plan fails too.
    broken = [e.__class__(**{**e.__dict__, "valid": False, "note": "memory"}) if e.planner == "shardopt" else e
              for e in entries]
    ok, table = check(broken, baseline)
    assert not ok and "FAIL: no valid plan (memory)" in table


def test_gate_names_a_changed_cost_model_instead_of_diffing_its_predictions(unit_run):
    _, entries, _ = unit_run
    baseline = {**baseline_data(entries, "unit"), "cost_model": "cpu.json@000000000000"}
    ok, message = check(entries, baseline)
    assert not ok
    assert message.startswith("cost_model: the baseline was predicted with cpu.json@000000000000")
    assert "--update" in message and "\n" not in message


def test_gate_checks_steps_and_names_a_baseline_of_bottlenecks(unit_run):
    _, entries, _ = unit_run
    baseline = baseline_data(entries, "unit")
    assert baseline["metric"] == "critical-path"
    mine = {e.task: e for e in entries if e.planner == "shardopt"}
    assert baseline["tasks"] == {t: round(e.predicted_step_ms, 6) for t, e in mine.items()}
    # Every step is at least its bottleneck (a phase's slowest rank is at least as slow as any).
    assert all(e.predicted_step_ms >= e.predicted_ms - 1e-9 for e in entries if e.valid)
    old = {k: v for k, v in baseline.items() if k != "metric"}  # written before steps were gated
    ok, message = check(entries, old)
    assert not ok and message.startswith("metric: the baseline holds each task's predicted bottleneck")
    assert "\n" not in message


def test_bench_cli_gate_and_report(runner, tmp_path, unit_run):
    base = tmp_path / "baseline.json"
    result = run_cli(runner, "bench", "--suite", "unit", "--check", base, "--update")
    assert result.exit_code == 0 and base.is_file()
    result = run_cli(runner, "bench", "--suite", "unit", "--check", base, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.stdout
    assert "plan-quality gate passed" in result.stdout
    assert (tmp_path / "out" / "report.md").is_file() and (tmp_path / "out" / "rank_bars.png").is_file()
    data = json.loads(base.read_text())
    data["tasks"] = {k: v * 0.5 for k, v in data["tasks"].items()}  # a baseline twice as good
    base.write_text(json.dumps(data))
    result = run_cli(runner, "bench", "--suite", "unit", "--check", base)
    assert result.exit_code == 1 and "FAIL: worse" in result.stdout


def test_report_draws_any_plan(runner, tmp_path, unit_run):
    from shardopt.core.plan import write_plan

    tasks, _, plans = unit_run
    plan = plans[tasks[0].name, "shardopt"]
    write_plan(plan, tmp_path / "p.json")
    result = run_cli(runner, "report", tmp_path / "p.json", "-o", tmp_path / "bars.png")
    assert result.exit_code == 0
    assert (tmp_path / "bars.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bare = json.loads((tmp_path / "p.json").read_text())
    bare.pop("predicted")
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    result = run_cli(runner, "report", tmp_path / "bare.json", "-o", tmp_path / "x.png")
    assert result.exit_code == 2 and "pass --workload" in result.stderr
    assert not (tmp_path / "x.png").exists()


def test_replayed_rounds_keep_every_round_and_take_per_rank_medians_first():
    task = suite_tasks("unit")[0]
    entries, plans = run_suite([task], ("size-greedy", "random"), rounds=2)
    for e in entries:
        assert len(e.replayed_runs) == 2
        per_rank = plans[task.name, e.planner, "replayed"]
        assert e.replayed_ms == Breakdown.of(per_rank).bottleneck_ms
        # The max of per-rank centres (means, with two rounds) is never above the mean of the
        # per-round maxima: noise on several ranks does not inflate it.
        assert e.replayed_ms <= sum(e.replayed_runs) / 2 + 1e-9


def test_replay_windows_hold_every_rank_once_within_the_memory_budget():
    from shardopt.measure.replay import rank_windows

    assert rank_windows([5, 5, 5, 5], 100) == [[0, 1, 2, 3]]  # the bench's tasks: one window
    assert rank_windows([5, 5, 5, 5], 10) == [[0, 1], [2, 3]]
    # A rank over the budget still gets a window of its own, so every rank is replayed.
    assert rank_windows([50, 5, 5], 10) == [[0], [1, 2]]
    assert rank_windows([], 10) == []
