"""`shardopt stats` recovers the pooling factor and histogram of a trace it is given."""

import gzip

import numpy as np
import pytest
import torch
import yaml

from conftest import run_cli
from shardopt.traces.stats import count_bins, trace_stats


def _write_trace(path, tables, gz=True):
    """tables: list of per-sample id lists (all the same batch), in the dlrm_datasets format."""
    batch = len(tables[0])
    lengths = torch.tensor([[len(bag) for bag in t] for t in tables], dtype=torch.int64)
    flat = [i for t in tables for bag in t for i in bag]
    indices = torch.tensor(flat, dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths.flatten(), 0)])
    assert lengths.shape == (len(tables), batch)
    opener = gzip.open if gz else open
    with opener(path, "wb") as handle:
        torch.save((indices, offsets, lengths), handle)


def test_count_bins_follow_the_dataset_edges():
    assert count_bins(np.array([1, 2, 3, 4, 5, 8, 9, 32768, 32769, 10**9])).tolist() == [
        0, 1, 2, 2, 3, 3, 4, 15, 16, 16,
    ]


def test_stats_recover_pooling_and_histogram(tmp_path, runner):
    rng = np.random.default_rng(0)
    batch = 64
    # Table 0: row 7 read 40 times, rows 100..119 read 3 times each, rows 200..259 once.
    ids0 = [7] * 40 + [r for r in range(100, 120) for _ in range(3)] + list(range(200, 260))
    rng.shuffle(ids0)
    cuts = np.sort(rng.choice(len(ids0), batch - 1, replace=True))
    bags0 = [list(map(int, b)) for b in np.split(np.array(ids0), cuts)]
    # Table 1: every sample reads rows 0 and 1.
    bags1 = [[0, 1] for _ in range(batch)]
    path = tmp_path / "trace.pt.gz"
    _write_trace(path, [bags0, bags1])

    b, per_table = trace_stats(path)
    assert b == batch
    t0, t1 = per_table
    assert t0.pooling_factor == len(ids0) / batch  # exactly
    assert t0.rows_touched == 81
    uniq = np.zeros(17)
    acc = np.zeros(17)
    uniq[0], acc[0] = 60 / 81, 60 / 160  # once
    uniq[2], acc[2] = 20 / 81, 60 / 160  # 3 times: bin (2, 4]
    uniq[6], acc[6] = 1 / 81, 40 / 160  # 40 times: bin (32, 64]
    assert np.allclose(t0.unique_frac, uniq, atol=1e-6)
    assert np.allclose(t0.access_frac, acc, atol=1e-6)
    assert t1.pooling_factor == 2.0 and t1.rows_touched == 2
    assert t1.unique_frac[6] == 1.0 and t1.access_frac[6] == 1.0  # 64 reads each: bin (32, 64]
    out = tmp_path / "w.yaml"
    result = run_cli(runner, "stats", path, "--dim", "16", "--world-size", "2", "-o", out)
    assert result.exit_code == 0
    data = yaml.safe_load(out.read_text())
    assert data["batch_size"] == batch
    assert data["tables"][0]["pooling_factor"] == pytest.approx(len(ids0) / batch)
    assert data["tables"][0]["access"]["rows_touched"] == 81
    assert run_cli(runner, "plan", out, "-o", tmp_path / "p.json").exit_code == 0


def test_stats_with_a_base_workload_keeps_its_tables(tmp_path, runner):
    path = tmp_path / "trace.pt"
    _write_trace(path, [[[1, 2], [3]], [[0], [0, 0]]], gz=False)
    base = tmp_path / "base.yaml"
    base.write_text(
        "version: 1\nname: b\nbatch_size: 2\ntopology: {world_size: 2, hbm_cap: 1GB}\n"
        "tables:\n  - {name: user, num_embeddings: 10, embedding_dim: 32}\n"
        "  - {name: item, num_embeddings: 5, embedding_dim: 16}\n"
    )
    out = tmp_path / "w.yaml"
    assert run_cli(runner, "stats", path, "--base", base, "-o", out).exit_code == 0
    data = yaml.safe_load(out.read_text())
    assert [t["name"] for t in data["tables"]] == ["user", "item"]
    assert data["tables"][0]["pooling_factor"] == 1.5
    assert data["tables"][1]["access"]["unique_frac"][2] == 1.0  # row 0 read 3 times: (2, 4]
    assert data["tables"][1]["num_embeddings"] == 5 and data["tables"][1]["embedding_dim"] == 16


def test_stats_rejects_a_file_that_is_no_trace(tmp_path, runner):
    bad = tmp_path / "x.pt"
    torch.save({"a": torch.zeros(2)}, bad)
    result = run_cli(runner, "stats", bad, "-o", tmp_path / "w.yaml")
    assert result.exit_code == 2
    assert "a trace holds (indices, offsets, lengths)" in result.stderr
    assert not (tmp_path / "w.yaml").exists()
