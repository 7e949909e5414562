"""shardopt stats --from-batches: a dataloader's batches measured into the workload, then planned."""

from __future__ import annotations

import pytest
import yaml

from conftest import run_cli

pytest.importorskip("torchrec")


def _workload(runner, tmp_path):
    out = tmp_path / "m.yaml"
    result = run_cli(runner, "from-torchrec", "examples.torchrec_planner:model", "--world-size", "4",
                     "--device", "cpu", "--batch-size", "64", "--hbm-cap", "1GB", "-o", out)
    assert result.exit_code == 0, result.stderr
    return out


def test_measured_statistics_go_into_the_workload_and_plan(runner, tmp_path):
    from examples.synthetic_batches import FEATURES

    workload = _workload(runner, tmp_path)
    out = tmp_path / "measured.yaml"
    result = run_cli(runner, "stats", "--from-batches", "examples.synthetic_batches:loader", "--workload", workload,
                     "--batches", "40", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "3 tables measured from 40 batches" in result.stdout
    assert "hottest 0.1% / 1% / 10% of rows" in result.stdout and "item " in result.stdout
    tables = {t["name"]: t for t in yaml.safe_load(out.read_text())["tables"]}
    for name, (_, _, pooling) in FEATURES.items():
        assert tables[name]["pooling_factor"] == pytest.approx(pooling, rel=0.03)
        assert tables[name]["access"]["distribution"] == "histogram" and tables[name]["access"]["batches"] == 40
    result = run_cli(runner, "plan", out, "-o", tmp_path / "p.json", "--time-limit", "0.5")
    assert result.exit_code == 0 and "statistics: 3 tables measured from 40 batches" in result.stdout


BAD = {
    "raises": ("def make():\n    raise RuntimeError('no data here')\n", "calling it raised RuntimeError: no data here"),
    "not_iterable": ("def make():\n    return 5\n", "returned int, not an iterable of KeyedJaggedTensors"),
    "empty": ("def make():\n    return []\n", "yielded no batch"),
    "mid_stream": ("def make():\n    yield from ()\n    raise ValueError('disk gone')\n", "reading its batches raised ValueError: disk gone"),
    "not_kjt": ("def make():\n    return [[1, 2]]\n", "reading its batches raised AttributeError"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_factory_that_fails_is_one_line_and_writes_nothing(runner, tmp_path, monkeypatch, case):
    source, says = BAD[case]
    workload = _workload(runner, tmp_path)
    (tmp_path / f"bad_{case}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run_cli(runner, "stats", "--from-batches", f"bad_{case}:make", "--workload", workload, "-o", "o.yaml")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], lines
    assert not (tmp_path / "o.yaml").exists()


def test_options_that_do_not_go_together_are_refused(runner, tmp_path):
    result = run_cli(runner, "stats", "--from-batches", "examples.synthetic_batches:loader", "-o", tmp_path / "o.yaml")
    assert result.exit_code == 2 and "--workload: --from-batches needs" in result.stderr
    result = run_cli(runner, "stats", "-o", tmp_path / "o.yaml")
    assert result.exit_code == 2 and "TRACE: give an index trace" in result.stderr


def test_compare_names_the_tables_whose_pooling_or_skew_moved(runner, tmp_path):
    workload = _workload(runner, tmp_path)
    first = tmp_path / "first.yaml"
    assert run_cli(runner, "stats", "--from-batches", "examples.synthetic_batches:loader", "--workload", workload,
                   "--batches", "40", "-o", first).exit_code == 0
    same = run_cli(runner, "stats", "--from-batches", "examples.synthetic_batches:loader", "--workload", workload,
                   "--batches", "40", "--compare", first, "-o", tmp_path / "same.yaml")
    assert same.exit_code == 0 and "0 of 3 tables drifted beyond 10%" in same.stdout
    moved = run_cli(runner, "stats", "--from-batches", "examples.synthetic_batches:shifted", "--workload", workload,
                    "--batches", "40", "--compare", first, "-o", tmp_path / "moved.yaml")
    assert moved.exit_code == 1, moved.output
    assert "2 of 3 tables drifted" in moved.stdout
    assert "item: pooling 20 -> 30" in moved.stdout and "user: hottest 1% of rows" in moved.stdout
    result = run_cli(runner, "stats", "--from-batches", "examples.synthetic_batches:loader", "--workload", workload,
                     "--compare", tmp_path / "nope.yaml", "-o", tmp_path / "x.yaml")
    assert result.exit_code == 2 and result.stderr.startswith("error: --compare:") and not (tmp_path / "x.yaml").exists()
