"""Mutated shipped configs: a plan that validates, or exit 2/3 with one line; nothing else.

Hypothesis deletes, duplicates and retypes keys of the configs users copy, and puts extreme
numbers in them; whatever it makes, ``shardopt plan`` must either write a plan that ``validate``
accepts or refuse with the one-line error of exit 2 (bad input) or 3 (no plan fits).
"""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CONFIGS

CONFIG_DATA = {p.name: yaml.safe_load(p.read_text()) for p in sorted(CONFIGS.glob("*.yaml"))}
ODD_VALUES = [None, True, False, "x", "12", "80GB", [], {}, [1], 0, -1, 1, 3, 0.5, 1e-300, 1e308, -1e308,
              2**70, 10**400, float("nan"), float("inf"), -float("inf"), "a" * 300, "../..", {"distribution": "zipf"}]


def _paths(data, prefix=()):
    """Every key path into the config (tables: only the first two, to keep the space small)."""
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            out.append(prefix + (key,))
            out.extend(_paths(value, prefix + (key,)))
    elif isinstance(data, list):
        for i, value in enumerate(data[:2]):
            out.append(prefix + (i,))
            out.extend(_paths(value, prefix + (i,)))
    return out


@st.composite
def mutated_config(draw):
    name = draw(st.sampled_from(sorted(CONFIG_DATA)))
    data = copy.deepcopy(CONFIG_DATA[name])
    text = None
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        op = draw(st.sampled_from(["delete", "retype", "extreme", "duplicate"]))
        if op == "delete":
            del parent[path[-1]]
        elif op in ("retype", "extreme"):
            parent[path[-1]] = draw(st.sampled_from(ODD_VALUES))
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))  # a duplicate table
        else:  # a key written twice in the file
            dumped = yaml.safe_dump(data, sort_keys=False)
            key_line = next((line for line in dumped.splitlines()
                             if line.strip().startswith(f"{path[-1]}:") and not line.startswith(" ")), None)
            if key_line is not None:
                text = dumped + key_line + "\n"
    return name, (text if text is not None else yaml.safe_dump(data, sort_keys=False))


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutated_config())
def test_mutated_config_plans_or_fails_in_one_line(runner, tmp_path, case):
    from shardopt.cli import main

    name, text = case
    workload = tmp_path / "w.yaml"
    workload.write_text(text)
    out = tmp_path / "p.json"
    out.unlink(missing_ok=True)
    result = runner.invoke(main, ["plan", str(workload), "-o", str(out), "--search", "greedy",
                                  "--time-limit", "0.2", "--cost-model", "analytic-v0", "-q"])
    assert "Traceback" not in result.output
    assert workload.read_text() == text
    if result.exit_code == 0:
        checked = runner.invoke(main, ["validate", str(workload), str(out)])
        assert checked.exit_code == 0, (name, text[:500], checked.output)
    else:
        assert result.exit_code in (2, 3), (name, result.exit_code, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
        assert not out.exists()
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("w.yaml", "p.json"))
    assert leftovers == []


@pytest.mark.parametrize("name", sorted(CONFIG_DATA))
def test_unmutated_configs_plan(runner, tmp_path, name):
    from shardopt.cli import main

    result = runner.invoke(main, ["plan", str(CONFIGS / name), "-o", str(tmp_path / "p.json"), "--search", "greedy",
                                  "--time-limit", "0.2", "--cost-model", "analytic-v0", "-q"])
    assert result.exit_code == 0, result.stderr
