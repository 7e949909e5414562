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


# --- the Python API: ShardoptPlanner refuses what the CLI refuses, as a one-line ValueError --------


def _ebc():
    import torch
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    return EmbeddingBagCollection(device=torch.device("meta"), tables=[
        EmbeddingBagConfig(name="t0", embedding_dim=16, num_embeddings=1000, feature_names=["f0"]),
        EmbeddingBagConfig(name="user", embedding_dim=32, num_embeddings=5000, feature_names=["f1"])])


API_CASES = [
    ("batch-zero", {"batch_size": 0}, "batch_size: must be a positive integer, got 0"),
    ("batch-negative", {"batch_size": -8}, "batch_size: must be a positive integer"),
    ("batch-float", {"batch_size": 8.5}, "batch_size: must be a positive integer"),
    ("time-limit-zero", {"time_limit_s": 0}, "time_limit_s: must be a finite number in (0, 3600]"),
    ("time-limit-negative", {"time_limit_s": -1.0}, "time_limit_s"),
    ("time-limit-nan", {"time_limit_s": float("nan")}, "time_limit_s"),
    ("time-limit-inf", {"time_limit_s": float("inf")}, "time_limit_s"),
    ("search-annealing", {"search": "annealing"}, "search: must be 'ilp' or 'greedy', got 'annealing'"),
    ("objective-unknown", {"objective": "fastest"}, "objective: must be one of critical-path, bottleneck"),
    ("cost-model-int", {"cost_model": 5}, "cost_model: must be a name or a path"),
]


@pytest.mark.parametrize("name, options, expect", API_CASES, ids=[c[0] for c in API_CASES])
def test_planner_api_refuses_bad_options(name, options, expect):
    pytest.importorskip("torchrec")
    from shardopt.core.errors import ShardoptError
    from shardopt.torchrec import ShardoptPlanner

    with pytest.raises(ValueError) as info:
        ShardoptPlanner(**options)
    assert isinstance(info.value, ShardoptError)
    assert expect in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("constraints, expect", [
    ({"usr": None}, "constraints['usr']: the model has no table of that name; did you mean 'user'?"),
    ({"t9": None}, "constraints['t9']: the model has no table of that name"),
], ids=["typo", "unknown"])
def test_planner_api_refuses_constraints_on_unknown_tables(constraints, expect):
    pytest.importorskip("torchrec")
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import ParameterConstraints, Topology

    from shardopt.core.errors import ShardoptError
    from shardopt.torchrec import ShardoptPlanner

    given = {k: ParameterConstraints(sharding_types=["table_wise"]) for k in constraints}
    planner = ShardoptPlanner(Topology(world_size=2, compute_device="cuda"), batch_size=8, constraints=given)
    with pytest.raises(ShardoptError, match=expect.replace("[", r"\[").replace("]", r"\]").replace("?", r"\?")):
        planner.plan(_ebc(), [EmbeddingBagCollectionSharder()])


def test_planner_api_names_the_torchrec_table_not_a_file():
    pytest.importorskip("torchrec")
    import torch
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import Topology
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from shardopt.core.errors import ShardoptError
    from shardopt.torchrec import ShardoptPlanner

    model = EmbeddingBagCollection(device=torch.device("meta"), tables=[
        EmbeddingBagConfig(name="huge", embedding_dim=16, num_embeddings=2**45, feature_names=["f0"])])
    with pytest.raises(ShardoptError) as info:
        ShardoptPlanner(Topology(world_size=2, compute_device="cuda"), batch_size=8).plan(
            model, [EmbeddingBagCollectionSharder()])
    assert str(info.value).startswith("TorchRec table 'huge' (module (root)): num_embeddings:")
    assert "<workload>" not in str(info.value)


def test_from_torchrec_error_is_one_line_in_a_fresh_process(tmp_path):
    """TorchRec's import-time warnings must not turn a factory's error into two lines."""
    import subprocess
    import sys

    (tmp_path / "fac.py").write_text("def make():\n    raise RuntimeError('boom')\n")
    done = subprocess.run([sys.executable, "-m", "shardopt", "from-torchrec", "fac:make", "--world-size", "2",
                           "--batch-size", "8", "-o", str(tmp_path / "w.yaml")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: FACTORY 'fac:make': calling it raised RuntimeError: boom"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fac.py"]  # no stray __pycache__ either


def test_planner_api_ignores_constraints_on_tables_no_sharder_shards():
    """As TorchRec: a constraint for a table of a module the given sharders skip is not a typo."""
    pytest.importorskip("torchrec")
    import torch
    from torchrec.distributed.planner.types import ParameterConstraints, Topology
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from shardopt.core.errors import ShardoptError
    from shardopt.torchrec import workload_from_module

    class Mine(EmbeddingBagCollection):
        pass

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sharded = Mine(device=torch.device("meta"), tables=[
                EmbeddingBagConfig(name="t0", embedding_dim=16, num_embeddings=1000, feature_names=["f0"])])
            self.skipped = EmbeddingBagCollection(device=torch.device("meta"), tables=[
                EmbeddingBagConfig(name="side", embedding_dim=16, num_embeddings=100, feature_names=["f9"])])

    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    class MineSharder(EmbeddingBagCollectionSharder):
        @property
        def module_type(self):
            return Mine

    topology = Topology(world_size=2, compute_device="cuda")
    constraints = {"side": ParameterConstraints(sharding_types=["table_wise"])}
    workload, _ = workload_from_module(Model(), topology, 8, constraints, [MineSharder()])
    assert [t.name for t in workload.tables] == ["t0"]  # "side" is not planned, and not an error
    with pytest.raises(ShardoptError, match="constraints\\['sid'\\]: the model has no table of that name; did you mean 'side'"):
        workload_from_module(Model(), topology, 8, {"sid": constraints["side"]}, [MineSharder()])
