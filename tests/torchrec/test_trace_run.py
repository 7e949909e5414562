"""A DMP training on CPU with gloo, traced by torch.profiler, then ingested and reported."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli
from shardopt.contracts import PlanConfig
from shardopt.core.plan import write_plan
from shardopt.core.workload import workload_from_dict, workload_yaml
from shardopt.planner import plan_with


def _workload(world: int) -> dict:
    tables = [
        {"name": "big", "num_embeddings": 20_000, "embedding_dim": 32, "pooling_factor": 12.0},
        {"name": "wide", "num_embeddings": 4_000, "embedding_dim": 64, "pooling_factor": 6.0,
         "sharding_types": ["column_wise"]},
        {"name": "two", "num_embeddings": 3_000, "embedding_dim": 16, "pooling_factor": 4.0,
         "feature_names": ["two_a", "two_b"]},
        {"name": "small", "num_embeddings": 200, "embedding_dim": 16, "pooling_factor": 2.0,
         "sharding_types": ["data_parallel"]},
    ]
    return {"version": 1, "name": f"traced{world}", "batch_size": 64,
            "topology": {"world_size": world, "compute_device": "cpu", "hbm_cap": "1GB"}, "tables": tables}


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_a_traced_dmp_training_is_ingested_and_reported(world, tmp_path, runner):
    from shardopt.torchrec.trace_run import traced_training

    data = _workload(world)
    workload = workload_from_dict(data)
    (tmp_path / "w.yaml").write_text(workload_yaml(data))
    plan = plan_with(workload, PlanConfig(candidates="torchrec", time_limit_s=1.0))
    write_plan(plan, tmp_path / "p.json")
    paths = traced_training(workload, plan, tmp_path / "traces", steps=6)
    assert [p.name for p in paths] == [f"rank{r}.json" for r in range(world)]

    report = run_cli(runner, "trace", "report", tmp_path / "traces", "--workload", tmp_path / "w.yaml",
                     "--plan", tmp_path / "p.json", "--json")
    assert report.exit_code == 0
    got = json.loads(report.stdout)
    assert [r["rank"] for r in got["ranks"]] == list(range(world))
    holders = {s.rank for tp in plan.tables if tp.sharding_type != "data_parallel" for s in tp.shards}
    for r in got["ranks"]:
        traced = r["fwd_compute_ms"]["traced"] + r["bwd_compute_ms"]["traced"]
        assert traced > 0  # every rank runs the data-parallel table's dense kernel at least
        if r["rank"] in holders:
            assert r["fwd_comm_ms"]["traced"] > 0 and r["bwd_comm_ms"]["traced"] > 0
    assert got["step_ms"] >= got["critical_path_ms"]["traced"] > 0

    model = tmp_path / "m.json"
    ingest = run_cli(runner, "trace", "ingest", tmp_path / "traces", "--workload", tmp_path / "w.yaml",
                     "--plan", tmp_path / "p.json", "-o", model)
    assert ingest.exit_code == 0 and model.is_file()
    saved = json.loads(model.read_text())
    links = saved["report"]["links"]  # the harness traces with record_shapes: the all-to-alls' sizes are known
    assert links["class"] == "intra-host" and links["collectives"] > 0 and links["latency_us"] >= 0
    assert str(world) in saved["calibration"]["comm"]
    planned = run_cli(runner, "plan", tmp_path / "w.yaml", "--cost-model", f"learned@{model}",
                      "--candidates", "torchrec", "-o", tmp_path / "again.json")
    assert planned.exit_code == 0
    if world == 2:  # a second traced plan of the same workload: the fit rests on both, and says each one's factor
        other = plan_with(workload, PlanConfig(candidates="torchrec", search="greedy"))
        write_plan(other, tmp_path / "p2.json")
        traced_training(workload, other, tmp_path / "traces2", steps=6)
        both = run_cli(runner, "trace", "ingest", tmp_path / "traces", "--workload", tmp_path / "w.yaml",
                       "--plan", tmp_path / "p.json", "--also", tmp_path / "p2.json", tmp_path / "traces2",
                       "-o", tmp_path / "m2.json")
        assert both.exit_code == 0 and "of 2 plan(s)" in both.stdout
        assert len(json.loads((tmp_path / "m2.json").read_text())["report"]["per_plan_factor"]) == 2
    # the fitted model sets the traces' own ranks within the traces' spread, where each rank had a
    # core of its own: with more ranks than cores a rank's traced time is its share of the machine
    # (1.3-2.2x apart per rank at 4 ranks on 2 cores, benchmarks/results/trace_fit.md), which no
    # model of the kernels follows; the fitted error there was 0.46-0.56 on an AVX2 2-core machine
    fitted = run_cli(runner, "trace", "report", tmp_path / "traces", "--workload", tmp_path / "w.yaml",
                     "--plan", tmp_path / "p.json", "--cost-model", f"learned@{model}", "--json")
    assert fitted.exit_code == 0 and json.loads(fitted.stdout)["compute_mape"] >= 0
    if world <= (os.cpu_count() or 1):
        assert json.loads(fitted.stdout)["compute_mape"] < 0.5
