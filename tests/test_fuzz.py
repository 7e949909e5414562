"""Every bad input, of every kind, ends the README's way; the cases live in ``fuzz_cases.py``.

For each case: the documented exit code, exactly one line on stderr (``error: ...`` naming the
file and field, the option or the TorchRec table), no traceback, every input byte-identical
afterwards and no file created or left behind (a temp file included).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from fuzz_cases import Sandbox, all_cases

CASES = all_cases()


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file (hidden ones too) and folder under ``root``, with its bytes or link target."""
    out: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                out[rel] = "<dir>"
            else:
                out[rel] = path.read_bytes()
    return out


def test_the_table_is_large_and_covers_every_input_kind():
    kinds = {c.kind for c in CASES}
    assert {"workload", "plan", "trace", "cost-model", "profile", "output", "option", "torchrec"} <= kinds
    assert len(CASES) >= 150
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fuzz_case(case, runner, tmp_path, monkeypatch):
    box = Sandbox(tmp_path / "box")
    box.root.mkdir()
    argv = [str(a) for a in case.build(box)]
    if "__chdir__" in argv:
        argv.remove("__chdir__")
        monkeypatch.chdir(box.root)
        monkeypatch.syspath_prepend(str(box.root))
    before = snapshot(box.root)
    result = run_cli(runner, *argv)
    after = snapshot(box.root)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exit_code == case.code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    if case.code in (0, 1):
        assert not [line for line in lines if line.startswith("error:")], lines
    else:
        assert len(lines) == 1, lines
        assert lines[0].startswith("error: "), lines
        assert result.stdout == ""
    assert case.expect in result.stderr + result.stdout, (case.expect, result.stderr)
    created = set(after) - set(before)
    assert created <= set(case.outputs), f"stray files: {sorted(created - set(case.outputs))}"
    for name, content in before.items():
        assert after.get(name) == content, f"input {name} changed"
    if case.code != 0:
        assert created == set(), sorted(created)
