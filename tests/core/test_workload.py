"""The workload file: valid files load; every malformed one fails with one line, exit 2."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import yaml

from conftest import CONFIGS, DATA, run_cli
from shardopt.core.errors import ShardoptError
from shardopt.core.workload import read_workload, workload_from_dict, workload_to_dict

BAD = DATA / "bad_workloads"
EXPECTED = yaml.safe_load((BAD / "expected.yaml").read_text())


def test_good_workload_loads_with_defaults():
    workload, sha = read_workload(DATA / "good.yaml")
    assert len(sha) == 64
    assert workload.topology.ranks_per_host == 2
    assert workload.topology.hbm_cap == 64 * 10**6
    item = workload.table("item_id")
    assert item.features == ("item_id", "item_id_hist")
    assert item.data_type == "fp32" and item.access.distribution == "uniform"
    assert workload.table("country").allowed_sharding_types == ("table_wise", "data_parallel")
    assert workload.optimizer == "rowwise_adagrad"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_configs_load_and_round_trip(path):
    workload, _ = read_workload(path)
    again = workload_from_dict(workload_to_dict(workload), "again")
    assert again == workload


def test_default_config_fits_in_4gb():
    from shardopt.core.layout import shard_bytes

    workload, _ = read_workload(CONFIGS / "dlrm-medium.yaml")
    total = sum(
        shard_bytes(workload.optimizer, t, t.num_embeddings, t.embedding_dim)
        for t in workload.tables
    )
    assert total <= 4 * 10**9
    assert len(workload.tables) >= 50 and workload.topology.world_size == 8


def test_every_bad_workload_has_an_expectation():
    files = {p.name for p in BAD.glob("*.yaml")} - {"expected.yaml"}
    assert files == set(EXPECTED)
    assert len(files) >= 12


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_workload_fails_cleanly(runner, tmp_path, name):
    out = tmp_path / "plan.json"
    out.write_text("previous plan")
    result = run_cli(runner, "plan", BAD / name, "-o", out)
    assert result.exit_code == (3 if name == "impossible_memory.yaml" else 2)  # 3: no plan fits
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {BAD / name}: ")
    assert EXPECTED[name] in lines[0]
    assert "Traceback" not in result.stderr
    assert out.read_text() == "previous plan"  # not overwritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no temp file left


def test_bad_workload_creates_no_output(runner, tmp_path):
    out = tmp_path / "new.json"
    result = run_cli(runner, "plan", BAD / "duplicate_table.yaml", "-o", out)
    assert result.exit_code == 2
    assert not out.exists()


def test_missing_file_is_an_input_error(runner, tmp_path):
    result = run_cli(runner, "plan", tmp_path / "nope.yaml", "-o", tmp_path / "p.json")
    assert result.exit_code == 2
    assert "nope.yaml: no such workload file" in result.stderr


def test_error_is_a_shardopt_error_in_the_api():
    with pytest.raises(ShardoptError, match=r"x.yaml: batch_size: input should be greater than 0"):
        workload_from_dict(
            {
                "version": 1,
                "name": "x",
                "batch_size": 0,
                "topology": {"world_size": 1, "hbm_cap": "1GB"},
                "tables": [{"name": "a", "num_embeddings": 10, "embedding_dim": 4}],
            },
            "x.yaml",
        )


@pytest.mark.parametrize("parser", ["libyaml", "python"])
@pytest.mark.parametrize("depth, ok", [(64, True), (65, False), (5000, False)])
def test_yaml_nesting_is_bounded_at_max_depth_with_either_parser(tmp_path, monkeypatch, parser, depth, ok):
    """The depth limit holds on the composed nodes, whichever parser PyYAML has (libyaml's stops
    at 1000 levels on its own and says so in its words: the user reads ours)."""
    from shardopt.core import loaders

    if parser == "python":
        monkeypatch.setattr(loaders, "_LimitedLoader", type("Python", (loaders._Limits, yaml.SafeLoader), {}))
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n")  # the top mapping is a level
    if ok:
        data, _ = loaders.load_yaml(path, "workload")
        assert list(data) == ["a"]
    else:
        with pytest.raises(ShardoptError, match=r"deep.yaml: malformed YAML: line 1: nested more than 64 levels deep$"):
            loaders.load_yaml(path, "workload")


GOOD_TEXT = ("version: 1\nname: x\nbatch_size: 512\ntopology: {world_size: 2, hbm_cap: 1e9}\n"
             "tables:\n- {name: a, num_embeddings: ROWS, embedding_dim: 64, pooling_factor: 2.5e1}\n")


@pytest.mark.parametrize("rows, expected", [("1e6", 10**6), ("2.0e+4", 20000), ("1_000e3", 10**6), ("12", 12)])
def test_counts_written_with_an_exponent_read_as_integers(tmp_path, rows, expected):
    """PyYAML reads 1e6 as a string: a user's ``num_embeddings: 1e6`` is a million here."""
    path = tmp_path / "w.yaml"
    path.write_text(GOOD_TEXT.replace("ROWS", rows))
    workload, _ = read_workload(path)
    table = workload.table("a")
    assert table.num_embeddings == expected and type(table.num_embeddings) is int
    assert table.pooling_factor == 25.0 and workload.topology.hbm_cap == 10**9


@pytest.mark.parametrize("rows, message", [
    ("2.5e0", "tables[0].num_embeddings: input should be a valid integer, got 2.5"),
    ("1e999999999", "tables[0].num_embeddings: must be a finite number, got inf"),
    ("1e30", "tables[0].num_embeddings: input should be a valid integer, got 1e+30"),
])
def test_exponents_that_are_no_count_fail_in_one_line(runner, tmp_path, rows, message):
    path = tmp_path / "w.yaml"
    path.write_text(GOOD_TEXT.replace("ROWS", rows))
    result = run_cli(runner, "plan", path, "-o", tmp_path / "p.json")
    assert result.exit_code == 2 and result.stderr.strip() == f"error: {path}: {message}"
    assert not (tmp_path / "p.json").exists()


def test_a_quoted_exponent_stays_a_string(tmp_path):
    from shardopt.core.loaders import load_yaml

    path = tmp_path / "x.yaml"
    path.write_text("a: '1e6'\nb: x1e6\nc: 1e6\nd: 1.5e-3\n")
    assert load_yaml(path, "workload")[0] == {"a": "1e6", "b": "x1e6", "c": 10**6, "d": 0.0015}


@given(st.recursive(
    st.none() | st.booleans() | st.integers(-2**62, 2**62) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet="0123456789eE.+-_x ", max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text("abc", min_size=1, max_size=3), inner, max_size=4),
    max_leaves=12))
@settings(max_examples=300, deadline=None)
def test_what_workload_yaml_writes_reads_back_the_same(tmp_path_factory, data):
    """Strings that look like exponent numbers are quoted on the way out, so a table named '1e6'
    survives ``synth``, ``replan`` and ``fit-trace`` writing it (numbers compare equal: a whole
    float written with an exponent, 1.0e+16, reads back as the integer it equals)."""
    from shardopt.core.loaders import load_yaml
    from shardopt.core.workload import workload_yaml

    path = tmp_path_factory.mktemp("rt") / "w.yaml"
    path.write_text(workload_yaml({"data": data}))
    assert load_yaml(path, "workload")[0] == {"data": data}
