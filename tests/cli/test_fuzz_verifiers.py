"""A fuzz table over the files the verifiers read (issue 37): the gate's baseline, the migration
manifest (``check-moves``) and a sweep's finished points. Each field is retyped, made negative or
out of range, deleted or duplicated; versions are changed; shapes of another plan are given.

Every case ends in its documented exit code: 2 with one ``error:`` line naming the file and the
field for a file that is not what it claims to be, 1 where the file parses but claims what is not
so. ``check-moves`` fails every tampering that changes what the manifest claims. Inputs are never
changed and nothing is left behind.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from conftest import CONFIGS, run_cli
from test_fuzz import snapshot

DELETE = object()


def _workload(world: int, rows=(3000, 2000, 5000, 800, 1200, 4000)) -> dict:
    return {"version": 1, "name": "mv", "batch_size": 128, "optimizer": "rowwise_adagrad",
            "topology": {"world_size": world, "local_world_size": world, "compute_device": "cpu", "hbm_cap": "8MB"},
            "tables": [{"name": f"t{i}", "num_embeddings": r, "embedding_dim": d, "pooling_factor": 2.0 + i}
                       for i, (r, d) in enumerate(zip(rows, (16, 32, 64, 16, 32, 64)))]}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """Valid files of each kind, made once: a gate baseline of tiny, a re-shard 3 -> 2 ranks with a
    grown table (moves and initialised rows), the same with rank 1 lost (restored pieces), and a
    sweep of tiny at 1 and 2 ranks (its finished points)."""
    from click.testing import CliRunner

    from shardopt.arithmetic.migration import migration
    from shardopt.arithmetic.movement import OldLayout
    from shardopt.contracts import PlanConfig
    from shardopt.core.plan import write_plan
    from shardopt.core.workload import workload_from_dict
    from shardopt.planner import plan_with
    from shardopt.planner.replan import replan_with

    root = tmp_path_factory.mktemp("verifiers")
    runner = CliRunner()
    shutil.copy(CONFIGS / "tiny.yaml", root / "tiny.yaml")
    assert run_cli(runner, "gate", root / "tiny.yaml", "--baseline", root / "gate.json", "--update",
                   "--time-limit", "1").exit_code == 0
    quick = PlanConfig(time_limit_s=0.5, cost_model="analytic-v0")
    old_data, new_data = _workload(3), _workload(2, rows=(3000, 2000, 7000, 800, 1200, 4000))
    (root / "old.yaml").write_text(yaml.safe_dump(old_data))
    (root / "new.yaml").write_text(yaml.safe_dump(new_data))
    old_wl, new_wl = workload_from_dict(old_data), workload_from_dict(new_data)
    old = plan_with(old_wl, quick)
    write_plan(old, root / "old.json")
    for name, lost in (("", ()), ("lost-", (1,))):
        result = replan_with(old, new_wl, quick, lost_ranks=lost)
        write_plan(result.plan, root / f"{name}new.json")
        manifest = migration(new_wl, OldLayout.of(old, lost), result.plan.tables, result.old_of)
        (root / f"{name}moves.json").write_text(json.dumps(manifest, indent=1))
    assert json.loads((root / "moves.json").read_text())["moves"] and json.loads((root / "moves.json").read_text())["initialised"]
    assert json.loads((root / "lost-moves.json").read_text())["restored"]
    assert run_cli(runner, "sweep", root / "tiny.yaml", "--world-sizes", "1,2", "--jobs", "1", "--time-limit", "0.5",
                   "-o", root / "sweep").exit_code == 0
    return root


@dataclass(frozen=True)
class Case:
    id: str
    file: str  # the file mutated, relative to the sandbox
    change: Callable[[Any], Any]  # the parsed file -> the mutated one (or raw text -> text)
    code: int
    expect: str  # a fragment of the error line (exit 2) or of the problems printed (exit 1)
    raw: bool = False


def _set(path: str, value: Any) -> Callable[[Any], Any]:
    """A mutation setting ``moves.0.bytes`` (a callable value gets the old one; DELETE deletes)."""
    def change(data: Any) -> Any:
        out = copy.deepcopy(data)
        keys = path.split(".")
        node = out
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        last = int(keys[-1]) if isinstance(node, list) else keys[-1]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value(node[last]) if callable(value) else value
        return out
    return change


def _with(change: Callable[[dict], None]) -> Callable[[Any], Any]:
    def run(data: Any) -> Any:
        out = copy.deepcopy(data)
        change(out)
        return out
    return run


GATE, MOVES, LOST, POINT = "gate.json", "moves.json", "lost-moves.json", "sweep/points/w2-capdefault.json"
W = "workloads.tiny"
T = f"{W}.tables.t000"  # tiny's first table

GATE_CASES = [
    Case("gate-step-string", GATE, _set(f"{W}.step_ms", "abc"), 2, "workloads.tiny.step_ms"),
    Case("gate-step-negative", GATE, _set(f"{W}.step_ms", -1.0), 2, "workloads.tiny.step_ms"),
    Case("gate-step-bool", GATE, _set(f"{W}.step_ms", True), 2, "workloads.tiny.step_ms"),
    Case("gate-bottleneck-null", GATE, _set(f"{W}.bottleneck_ms", None), 2, "workloads.tiny.bottleneck_ms"),
    Case("gate-headroom-above-one", GATE, _set(f"{W}.headroom", 2.0), 2, "workloads.tiny.headroom"),
    Case("gate-valid-string", GATE, _set(f"{W}.valid", "yes"), 2, "workloads.tiny.valid"),
    Case("gate-robust-int", GATE, _set(f"{W}.robust", 1), 2, "workloads.tiny.robust"),
    Case("gate-sha-short", GATE, _set(f"{W}.workload_sha256", "abc"), 2, "workloads.tiny.workload_sha256"),
    Case("gate-cost-model-number", GATE, _set(f"{W}.cost_model", 5), 2, "workloads.tiny.cost_model"),
    Case("gate-tables-deleted", GATE, _set(f"{W}.tables", DELETE), 2, "workloads.tiny.tables"),
    Case("gate-tables-list", GATE, _set(f"{W}.tables", []), 2, "workloads.tiny.tables"),
    Case("gate-step-deleted", GATE, _set(f"{W}.step_ms", DELETE), 2, "workloads.tiny.step_ms"),
    Case("gate-ranks-string", GATE, _set(f"{T}.ranks", "0"), 2, "tables.t000.ranks"),
    Case("gate-ranks-negative", GATE, _set(f"{T}.ranks", [-1]), 2, "tables.t000.ranks"),
    Case("gate-ranks-empty", GATE, _set(f"{T}.ranks", []), 2, "tables.t000.ranks"),
    Case("gate-sharding-type", GATE, _set(f"{T}.sharding_type", "diagonal"), 2, "tables.t000.sharding_type"),
    Case("gate-cost-negative", GATE, _set(f"{T}.cost_ms", -0.5), 2, "tables.t000.cost_ms"),
    Case("gate-extra-field", GATE, _set(f"{W}.note", "x"), 2, "workloads.tiny.note"),
    Case("gate-workloads-list", GATE, _set("workloads", []), 2, "workloads"),
    Case("gate-workloads-deleted", GATE, _set("workloads", DELETE), 2, "workloads"),
    Case("gate-tolerance-string", GATE, _set("tolerance", "x"), 2, "tolerance"),
    Case("gate-shardopt-deleted", GATE, _set("shardopt", DELETE), 2, "shardopt"),
    Case("gate-version-2", GATE, _set("version", 2), 2, "version"),
    Case("gate-version-string", GATE, _set("version", "1"), 2, "version"),
    Case("gate-version-true", GATE, _set("version", True), 2, "version"),
    Case("gate-format", GATE, _set("format", "shardopt-plan"), 2, "format"),
    Case("gate-top-level-list", GATE, lambda data: [data], 2, "format"),
    Case("gate-key-twice", GATE, lambda text: text.replace('"step_ms":', '"step_ms": 1.0, "step_ms":', 1), 2,
         "'step_ms' is given twice", raw=True),
    Case("gate-rank-beyond-the-world", GATE, _set(f"{T}.ranks", [99]), 2,
         "workloads.tiny.tables.t000.ranks: rank 99 is outside tiny's world"),
    Case("gate-another-shardopt", GATE, _set("shardopt", "9.9.9"), 1, "written by shardopt 9.9.9"),
]

_M0 = "moves.0"
MOVES_SCHEMA = [
    Case("moves-mapping", MOVES, _set("moves", {}), 2, "moves"),
    Case("moves-entry-string", MOVES, _set(_M0, "x"), 2, "moves[0]"),
    Case("moves-bytes-string", MOVES, _set(f"{_M0}.bytes", "12"), 2, "moves[0].bytes"),
    Case("moves-bytes-negative", MOVES, _set(f"{_M0}.bytes", -1), 2, "moves[0].bytes"),
    Case("moves-bytes-float", MOVES, _set(f"{_M0}.bytes", 1.5), 2, "moves[0].bytes"),
    Case("moves-from-negative", MOVES, _set(f"{_M0}.from_rank", -1), 2, "moves[0].from_rank"),
    Case("moves-from-string", MOVES, _set(f"{_M0}.from_rank", "1"), 2, "moves[0].from_rank"),
    Case("moves-to-huge", MOVES, _set(f"{_M0}.to_rank", 10**9), 2, "moves[0].to_rank"),
    Case("moves-rows-backwards", MOVES, _set(f"{_M0}.rows", lambda r: [r[1], r[0]]), 2, "moves[0]"),
    Case("moves-rows-one", MOVES, _set(f"{_M0}.rows", [1]), 2, "moves[0].rows"),
    Case("moves-cols-string", MOVES, _set(f"{_M0}.cols", "0:16"), 2, "moves[0].cols"),
    Case("moves-table-deleted", MOVES, _set(f"{_M0}.table", DELETE), 2, "moves[0].table"),
    Case("moves-extra-field", MOVES, _set(f"{_M0}.note", 1), 2, "moves[0].note"),
    Case("moves-total-string", MOVES, _set("moved_bytes", "x"), 2, "moved_bytes"),
    Case("moves-total-negative", MOVES, _set("moved_bytes", -5), 2, "moved_bytes"),
    Case("moves-ranks-list", MOVES, _set("ranks", []), 2, "ranks"),
    Case("moves-ranks-key", MOVES, _set("ranks", {"a": 0}), 2, "ranks"),
    Case("moves-ranks-value", MOVES, _set("ranks.0", "1"), 2, "ranks"),
    Case("moves-ranks-one-old-twice", MOVES, _with(lambda m: m["ranks"].update({"1": m["ranks"]["0"]})), 2,
         "two new ranks are the same old rank"),
    Case("moves-deleted", MOVES, _set("moves", DELETE), 2, "moves"),
    Case("moves-ranks-deleted", MOVES, _set("ranks", DELETE), 2, "ranks"),
    Case("moves-initialised-deleted", MOVES, _set("initialised", DELETE), 2, "initialised"),
    Case("moves-initialised-rank", MOVES, _set("initialised.0.rank", -2), 2, "initialised[0].rank"),
    Case("moves-digest-deleted", MOVES, _set("old_plan", DELETE), 2, "old_plan"),
    Case("moves-digest-short", MOVES, _set("new_plan", "abc"), 2, "new_plan"),
    Case("moves-version-99", MOVES, _set("version", 99), 2, "version"),
    Case("moves-version-string", MOVES, _set("version", "2"), 2, "version"),
    Case("moves-version-1-with-digests", MOVES, _set("version", 1), 2, "version"),
    Case("moves-format", MOVES, _set("format", "shardopt-gate"), 2, "format"),
    Case("moves-top-level-list", MOVES, lambda data: [data], 2, "(top level)"),
    Case("moves-key-twice", MOVES, lambda text: text.replace('"moved_bytes":', '"moved_bytes": 0, "moved_bytes":', 1),
         2, "'moved_bytes' is given twice", raw=True),
    Case("lost-ranks-twice", LOST, _set("lost_ranks", lambda r: r + r), 2, "lost_ranks"),
    Case("lost-restored-without-lost", LOST, _set("lost_ranks", []), 2, "restored"),
    Case("lost-restored-bytes-deleted", LOST, _set("restored_bytes", DELETE), 2, "restored_bytes"),
    Case("lost-restored-to-negative", LOST, _set("restored.0.to_rank", -1), 2, "restored[0].to_rank"),
]


def _dup_first(key: str) -> Callable[[Any], Any]:
    return _with(lambda m: m[key].insert(0, copy.deepcopy(m[key][0])))


def _first_move_initialised(m: dict) -> None:
    first = m["moves"][0]
    m["initialised"].append({"table": first["table"], "rows": first["rows"], "cols": first["cols"],
                             "rank": first["to_rank"]})


def _other_holder(m: dict) -> None:
    """The first move claimed from an old rank that did not hold it (3 old ranks: one of the others)."""
    first = m["moves"][0]
    holders = {x["from_rank"] for x in m["moves"] if x["table"] == first["table"] and x["rows"] == first["rows"]}
    first["from_rank"] = next(r for r in range(3) if r not in holders and r != first["to_rank"])


def _swap_ranks(m: dict) -> None:
    m["ranks"]["0"], m["ranks"]["1"] = m["ranks"]["1"], m["ranks"]["0"]


def _other_table(m: dict) -> None:
    m["moves"][0]["table"] = next(f"t{i}" for i in range(6) if f"t{i}" != m["moves"][0]["table"])


def _restored_as_send_from_lost(m: dict) -> None:
    piece = m["restored"].pop(0)
    m["moves"].append({**piece, "from_rank": 1})
    m["restored_bytes"] -= piece["bytes"]


# Tamperings: the file parses, its claims are false. check-moves must exit 1 on every one.
MOVES_TAMPERED = [
    Case("tamper-bytes-plus-one", MOVES, _set(f"{_M0}.bytes", lambda b: b + 1), 1, "moves[0].bytes"),
    Case("tamper-bytes-zero", MOVES, _set(f"{_M0}.bytes", 0), 1, "moves[0].bytes"),
    Case("tamper-total-plus-one", MOVES, _set("moved_bytes", lambda b: b + 1), 1, "moved_bytes"),
    Case("tamper-total-zero", MOVES, _set("moved_bytes", 0), 1, "moved_bytes"),
    Case("tamper-from-a-rank-that-did-not-hold-it", MOVES, _with(_other_holder), 1, "did not hold"),
    Case("tamper-to-another-rank", MOVES, _set(f"{_M0}.to_rank", lambda r: 1 - r), 1, "rank"),
    Case("tamper-a-move-twice", MOVES, _dup_first("moves"), 1, "do not rebuild"),
    Case("tamper-a-move-dropped", MOVES, _with(lambda m: m["moves"].pop(0)), 1, "do not rebuild"),
    Case("tamper-moved-and-initialised", MOVES, _with(_first_move_initialised), 1, "initialised rows"),
    Case("tamper-initialised-dropped", MOVES, _with(lambda m: m["initialised"].pop(0)), 1, "initialised rows"),
    Case("tamper-initialised-twice", MOVES, _dup_first("initialised"), 1, "initialised rows"),
    Case("tamper-rows-shifted", MOVES, _set(f"{_M0}.rows", lambda r: [r[0] + 1, r[1] + 1]), 1, "moves[0]"),
    Case("tamper-another-table", MOVES, _with(_other_table), 1, "moves[0]"),
    Case("tamper-ranks-swapped", MOVES, _with(_swap_ranks), 1, "do not rebuild"),
    Case("tamper-new-rank-outside", MOVES, _with(lambda m: m["ranks"].update({"5": 2})), 1, "outside the new plan"),
    Case("tamper-old-digest", MOVES, _set("old_plan", "0" * 64), 1, "another old plan"),
    Case("tamper-new-digest", MOVES, _set("new_plan", "f" * 64), 1, "another new plan"),
    Case("tamper-restored-bytes", LOST, _set("restored.0.bytes", lambda b: b + 1), 1, "restored[0].bytes"),
    Case("tamper-restored-total", LOST, _set("restored_bytes", lambda b: b + 1), 1, "restored_bytes"),
    Case("tamper-restored-dropped", LOST, _with(lambda m: m["restored"].pop(0)), 1, "do not rebuild"),
    Case("tamper-restored-as-a-send-from-the-lost-rank", LOST, _with(_restored_as_send_from_lost), 1, "was lost"),
    Case("tamper-survivor-mapped-to-the-lost-rank", LOST, _set("ranks.1", 1), 1, "which was lost"),
]

POINT_CASES = [
    Case("point-step-string", POINT, _set("point.step_ms", "abc"), 2, "point.step_ms"),
    Case("point-step-negative", POINT, _set("point.step_ms", -1.0), 2, "point.step_ms"),
    Case("point-world-deleted", POINT, _set("point.world_size", DELETE), 2, "point.world_size"),
    Case("point-feasible-string", POINT, _set("point.feasible", "true"), 2, "point.feasible"),
    Case("point-phases-three", POINT, _set("point.phases_ms", [1.0, 2.0, 3.0]), 2, "point"),
    Case("point-headroom-huge", POINT, _set("point.headroom", 5.0), 2, "point.headroom"),
    Case("point-extra-field", POINT, _set("point.note", 1), 2, "point.note"),
    Case("point-another-world", POINT, _set("point.world_size", 4), 2, "not the point its name says"),
    Case("point-version", POINT, _set("version", 7), 2, "version"),
    Case("point-format-deleted", POINT, _set("format", DELETE), 2, "format"),
    Case("point-not-json", POINT, lambda text: text[: len(text) // 2], 2, "malformed JSON", raw=True),
]

ALL = GATE_CASES + MOVES_SCHEMA + MOVES_TAMPERED + POINT_CASES


def _argv(case: Case, box: Path) -> list:
    if case.file == GATE:
        return ["gate", box / "tiny.yaml", "--baseline", box / GATE, "--time-limit", "1"]
    if case.file == POINT:
        return ["sweep", box / "tiny.yaml", "--world-sizes", "1,2", "--jobs", "1", "--time-limit", "0.5",
                "-o", box / "sweep"]
    prefix = "lost-" if case.file == LOST else ""
    return ["check-moves", box / "new.yaml", box / "old.json", box / f"{prefix}new.json", box / case.file]


def test_the_table_covers_every_file_and_both_outcomes():
    assert {c.file for c in ALL} == {GATE, MOVES, LOST, POINT}
    assert len(MOVES_TAMPERED) >= 20 and len(ALL) >= 90
    assert len({c.id for c in ALL}) == len(ALL)


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.id)
def test_verifier_fuzz_case(case, base, runner, tmp_path):
    box = tmp_path / "box"
    shutil.copytree(base, box)
    target = box / case.file
    if case.raw:
        target.write_text(case.change(target.read_text()))
    else:
        target.write_text(json.dumps(case.change(json.loads(target.read_text())), indent=1))
    before = snapshot(box)
    result = run_cli(runner, *_argv(case, box))
    after = snapshot(box)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exit_code == case.code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    if case.code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
        assert str(target) in lines[0] and case.expect in lines[0], (case.expect, lines)
    else:
        assert not [line for line in lines if line.startswith("error:")], lines
        assert case.expect in result.stdout + result.stderr, (case.expect, result.stdout, result.stderr)
    assert set(after) == set(before), sorted(set(after) ^ set(before))  # nothing made, nothing removed
    assert all(after[name] == content for name, content in before.items())  # no input changed


def test_the_untouched_files_pass(base, runner, tmp_path):
    """The control: unmutated, each verifier passes (so every failure above is the mutation's)."""
    box = tmp_path / "box"
    shutil.copytree(base, box)
    for file in (MOVES, LOST):
        case = Case("control", file, lambda d: d, 0, "")
        result = run_cli(runner, *_argv(case, box))
        assert result.exit_code == 0 and "exactly" in result.stdout, result.stdout
    assert run_cli(runner, *_argv(Case("c", GATE, lambda d: d, 0, ""), box)).exit_code == 0
    assert run_cli(runner, *_argv(Case("c", POINT, lambda d: d, 0, ""), box)).exit_code == 0
