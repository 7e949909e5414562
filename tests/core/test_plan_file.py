"""The plan file: round trip, unusable files (exit 2) and invalid plans (exit 1, every violation)."""

import copy
import json
import os

import pytest
import yaml

from conftest import DATA, run_cli
from shardopt.core.files import write_atomic
from shardopt.core.errors import ShardoptError
from shardopt.core.plan import PLAN_VERSION, plan_from_dict, plan_to_json, read_plan
from shardopt.arithmetic.checks import check_plan
from shardopt.core.workload import read_workload

BAD = DATA / "bad_plans"
EXPECTED = yaml.safe_load((BAD / "expected.yaml").read_text())
GOOD_WORKLOAD = DATA / "good.yaml"
GOOD_PLAN = DATA / "good_plan.json"


def test_good_plan_round_trips_byte_for_byte():
    text = GOOD_PLAN.read_text().replace('"version": 1', f'"version": {PLAN_VERSION}')
    assert plan_to_json(plan_from_dict(json.loads(text))) == text


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_plan_is_read_as_the_current_version(version):
    old = json.loads(GOOD_PLAN.read_text())
    assert old["version"] == 1
    old["version"] = version
    plan = plan_from_dict(old)
    assert plan.version == PLAN_VERSION == 3
    assert all(t.cache_load_factor is None for t in plan.tables)
    assert plan.predicted.search is None and plan.predicted.sensitivity is None


SENSITIVITY = {"compute_scales": [0.333333, 1.0, 3.0], "steps_ms": [0.2, 0.4, 1.0],
               "expected_ms": [0.38, 0.4, 0.45], "table_error": 0.2, "basis": "fitted elsewhere",
               "extrapolated": ["t1"]}


def test_version_3_sensitivity_round_trips_and_a_version_2_file_may_not_carry_it():
    data = json.loads(GOOD_PLAN.read_text())
    data["version"] = 3
    data["predicted"]["sensitivity"] = SENSITIVITY
    text = plan_to_json(plan_from_dict(data))
    again = plan_from_dict(json.loads(text))
    assert plan_to_json(again) == text
    assert again.predicted.sensitivity.extrapolated == ("t1",)
    data["version"] = 2
    with pytest.raises(ShardoptError, match="predicted.sensitivity: not a version 2 field"):
        plan_from_dict(data)


@pytest.mark.parametrize("change, words", [
    (lambda s: s.update(steps_ms=[0.2, 0.4]), "one step per compute scale"),
    (lambda s: s.update(expected_ms=[0.5, 0.4, 0.45]), "in that order"),
    (lambda s: s.update(compute_scales=[0.0, 1.0, 3.0]), "compute_scales"),
])
def test_an_inconsistent_sensitivity_is_refused(change, words):
    data = json.loads(GOOD_PLAN.read_text())
    data["version"] = 3
    sens = copy.deepcopy(SENSITIVITY)
    change(sens)
    data["predicted"]["sensitivity"] = sens
    with pytest.raises(ShardoptError, match=words):
        plan_from_dict(data, "p.json")


def test_version_2_fields_round_trip():
    data = json.loads(GOOD_PLAN.read_text())
    data["version"] = 2
    data["tables"][0].update(compute_kernel="fused_uvm_caching", cache_load_factor=0.35)
    data["predicted"]["search"] = {
        "algorithm": "ilp+repair", "status": "OPTIMAL", "solver_bound_ms": 0.4,
        "variables": 12, "repair_moves": 0,
    }
    text = plan_to_json(plan_from_dict(data))
    again = plan_from_dict(json.loads(text))
    assert plan_to_json(again) == text
    assert again.tables[0].cache_load_factor == 0.35
    assert again.predicted.search.status == "OPTIMAL"


def test_good_plan_is_valid(runner):
    result = run_cli(runner, "validate", GOOD_WORKLOAD, GOOD_PLAN)
    assert result.exit_code == 0
    assert "valid plan" in result.stdout
    assert result.stderr == ""


def test_every_bad_plan_has_an_expectation():
    files = {p.name for p in BAD.glob("*.json")}
    assert files == set(EXPECTED)
    assert len(files) >= 12


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_plan_fails_cleanly(runner, name):
    result = run_cli(runner, "validate", GOOD_WORKLOAD, BAD / name)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {BAD / name}: ")
    assert EXPECTED[name] in lines[0]


def test_unusable_workload_in_validate_exits_2(runner):
    result = run_cli(runner, "validate", DATA / "bad_workloads" / "zero_batch.yaml", GOOD_PLAN)
    assert result.exit_code == 2
    assert "batch_size" in result.stderr


def _good():
    return json.loads(GOOD_PLAN.read_text())


def _violations(data):
    workload, sha = read_workload(GOOD_WORKLOAD)
    return check_plan(workload, plan_from_dict(data), sha)


def test_invalid_plans_list_every_violation():
    data = _good()
    data["tables"][0]["shards"][0]["rank"] = 7  # rank out of range
    data["tables"][2]["shards"][0]["sizes"] = [200, 16]  # country: rows 200..300 uncovered
    report = _violations(data)
    assert not report.valid
    joined = "\n".join(report.violations)
    assert "tables[0].shards[0].rank: 7 is not below world_size 2" in joined
    assert "tables[2].shards[0].sizes: a table_wise shard holds the whole table 300 x 16" in joined
    assert "rows [200, 300) x cols [0, 16) not covered" in joined


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["tables"].pop(), "workload table 'country' is missing from the plan"),
        (lambda d: d["tables"].append(copy.deepcopy(d["tables"][0])), "planned twice"),
        (lambda d: d["tables"][0].update(name="nope"), "no table 'nope' in the workload"),
        (lambda d: d.update(world_size=4), "world_size: plan has 4, workload topology has 2"),
        (
            lambda d: d["tables"][2].update(sharding_type="row_wise"),
            "row_wise is not in the table's sharding_types",
        ),
        (
            lambda d: d["tables"][0].update(
                sharding_type="row_wise",
                shards=[
                    {"rank": 0, "offsets": [0, 0], "sizes": [15000, 64]},
                    {"rank": 1, "offsets": [10000, 0], "sizes": [10000, 64]},
                ],
            ),
            "rows [10000, 15000) x cols [0, 64) covered more than once",
        ),
        (
            lambda d: d["tables"][0].update(
                sharding_type="column_wise",
                shards=[
                    {"rank": 0, "offsets": [0, 0], "sizes": [20000, 32]},
                    {"rank": 1, "offsets": [0, 40], "sizes": [20000, 24]},
                ],
            ),
            "rows [0, 20000) x cols [32, 40) not covered",
        ),
        (
            lambda d: d["tables"][0]["shards"][0].update(sizes=[20001, 64]),
            "leave the table's 20000 x 64",
        ),
        (
            lambda d: d["tables"][0]["shards"].append(
                {"rank": 1, "offsets": [0, 0], "sizes": [20000, 64]}
            ),
            "a table_wise table has one shard, got 2",
        ),
        (
            lambda d: d["tables"][2].update(
                sharding_type="data_parallel",
                shards=[
                    {"rank": 1, "offsets": [0, 0], "sizes": [300, 16]},
                    {"rank": 1, "offsets": [0, 0], "sizes": [300, 16]},
                ],
            ),
            "a data_parallel table lists a rank twice",
        ),
        (
            lambda d: d["tables"][0].update(compute_kernel="fused_uvm"),
            "fused_uvm needs a cuda compute_device",
        ),
        (
            lambda d: d.update(version=2) or d["tables"][1].update(cache_load_factor=0.3),
            "tables[1].cache_load_factor: only a fused_uvm_caching table has a cache",
        ),
    ],
)
def test_single_violation(mutate, message):
    data = _good()
    mutate(data)
    report = _violations(data)
    assert not report.valid
    assert any(message in v for v in report.violations), report.violations


def test_memory_over_cap_is_a_violation(runner, tmp_path):
    workload_text = GOOD_WORKLOAD.read_text().replace("hbm_cap: 64MB", "hbm_cap: 5MB")
    (tmp_path / "w.yaml").write_text(workload_text)
    result = run_cli(runner, "validate", tmp_path / "w.yaml", GOOD_PLAN)
    assert result.exit_code == 1
    assert "memory: rank 1 holds" in result.stdout and "over hbm_cap" in result.stdout
    assert "warning:" in result.stderr and "another version of this workload" in result.stderr


def test_data_parallel_plan_is_valid():
    data = _good()
    data["tables"][2].update(
        sharding_type="data_parallel",
        shards=[
            {"rank": 0, "offsets": [0, 0], "sizes": [300, 16]},
            {"rank": 1, "offsets": [0, 0], "sizes": [300, 16]},
        ],
    )
    assert _violations(data).valid


def test_hash_mismatch_is_only_a_warning(runner, tmp_path):
    data = _good()
    data["workload"]["sha256"] = "0" * 64
    plan_path = tmp_path / "p.json"
    plan_path.write_text(json.dumps(data))
    result = run_cli(runner, "validate", GOOD_WORKLOAD, plan_path)
    assert result.exit_code == 0
    assert "warning:" in result.stderr


def test_atomic_write_leaves_the_old_file_when_interrupted(tmp_path, monkeypatch):
    target = tmp_path / "plan.json"
    target.write_text("old")

    def boom(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_written_plan_has_the_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "plan.json", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "plan.json").stat().st_mode & 0o777 == 0o644


def test_read_plan_of_directory_is_an_input_error(tmp_path):
    from shardopt.core.errors import ShardoptError

    with pytest.raises(ShardoptError, match="is a folder, not a plan file"):
        read_plan(tmp_path)
