"""FlexShard hot rows: split tables, plan checks, memory, the planner's choice, and replay."""

import json

import pytest

from shardopt.arithmetic.access import row_buckets
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.arithmetic.hotrows import expand, hot_row_counts, split_table
from shardopt.arithmetic.memory import plan_memory
from shardopt.core.layout import shard_bytes
from shardopt.core.plan import PLAN_VERSION, plan_from_dict, plan_to_json
from shardopt.arithmetic.checks import check_plan
from shardopt.planner import plan_workload
from shardopt.search.ilp import IlpSearch
from shardopt.core.workload import workload_from_dict


def _skewed(device="cuda", world=8, batch=4096):
    """A dominant zipf table over 4 hosts of 2 ranks: replicas of its hot rows save the inter-host
    all-to-all. (On one NVSwitch host at the h200's published 370 GB/s, table-row-wise is cheaper.)"""
    tables = [{"name": "big", "num_embeddings": 2_000_000, "embedding_dim": 128, "pooling_factor": 1000,
               "access": {"distribution": "zipf", "alpha": 1.2}}]
    tables += [{"name": f"s{i}", "num_embeddings": 100_000, "embedding_dim": 64, "pooling_factor": 2}
               for i in range(8)]
    return workload_from_dict({"version": 1, "name": "hot", "batch_size": batch,
                               "topology": {"world_size": world, "hbm_cap": "8GB", "compute_device": device,
                                            "local_world_size": 2},
                               "tables": tables})


def test_split_keeps_rows_and_lookups():
    table = _skewed().tables[0]
    hot_rows = hot_row_counts(table)
    assert hot_rows and all(h <= 0.05 * table.num_embeddings for h in hot_rows)
    h = hot_rows[0]
    hot, cold = split_table(table, h)
    assert hot.num_embeddings + cold.num_embeddings == table.num_embeddings
    share = row_buckets(table).top_share(h)
    assert share >= 0.5 - 1e-6
    assert hot.pooling_factor + cold.pooling_factor == pytest.approx(table.pooling_factor)
    assert hot.pooling_factor == pytest.approx(table.pooling_factor * share)
    # The cold part is the tail: its hottest row is no hotter than the head's coldest.
    assert row_buckets(cold).probs[0] * (1 - share) <= row_buckets(hot).probs[-1] * share + 1e-12


def test_planner_replicates_hot_rows_of_a_dominant_skewed_table_and_the_plan_checks_out():
    workload = _skewed()
    plan = plan_workload(workload, cost_model=AnalyticCostModel(), search=IlpSearch(candidates="all"))
    big = next(t for t in plan.tables if t.name == "big")
    assert big.replicated_rows and big.sharding_type == "row_wise"
    assert check_plan(workload, plan).valid
    assert min(s.offsets[0] for s in big.shards) == big.replicated_rows
    # Every rank holds the replica on top of its shards.
    hbm, _ = plan_memory(workload, plan.tables)
    replica = shard_bytes(workload.optimizer, big_table := workload.tables[0], big.replicated_rows, 128)
    without = plan_memory(workload, [t for t in plan.tables if t.name != "big"])[0]
    for rank in range(8):
        cold_rows = sum(s.sizes[0] for s in big.shards if s.rank == rank)
        assert hbm[rank] == without.get(rank, 0) + replica + shard_bytes(
            workload.optimizer, big_table, cold_rows, 128)
    # Round trip through the file.
    assert plan_to_json(plan_from_dict(json.loads(plan_to_json(plan)))) == plan_to_json(plan)


@pytest.mark.parametrize("mutate, message", [
    (lambda t: t.update(sharding_type="table_wise"), "hot rows are replicated beside a row_wise cut"),
    (lambda t: t["shards"][0]["offsets"].__setitem__(0, 0), "rows below"),
    (lambda t: t.update(replicated_rows=t["replicated_rows"] - 5), "not covered"),
])
def test_broken_hot_row_plans_are_violations(mutate, message):
    workload = _skewed()
    data = json.loads(plan_to_json(plan_workload(workload, cost_model=AnalyticCostModel(), search=IlpSearch(candidates="all"))))
    big = next(t for t in data["tables"] if t["name"] == "big")
    mutate(big)
    report = check_plan(workload, plan_from_dict(data))
    assert any(message in v for v in report.violations), report.violations


def test_expand_turns_a_hot_row_table_into_a_replicated_head_and_a_row_wise_tail():
    workload = _skewed()
    plan = plan_workload(workload, cost_model=AnalyticCostModel(), search=IlpSearch(candidates="all"))
    wl2, tables2 = expand(workload, plan.tables)
    names = {t.name: t for t in tables2}
    assert "big" not in names and {"big:hot", "big:cold"} <= set(names)
    assert names["big:hot"].sharding_type == "data_parallel" and len(names["big:hot"].shards) == 8
    assert min(s.offsets[0] for s in names["big:cold"].shards) == 0
    assert check_plan(wl2, plan.__class__(**{**plan.__dict__, "tables": tables2, "predicted": None})).valid


def test_replay_measures_a_hot_row_plan():
    from shardopt.core.plan import Plan, Shard, TablePlan
    from shardopt.measure.replay import replay_plan
    from shardopt.search.candidates import table_candidates

    workload = workload_from_dict({
        "version": 1, "name": "hot", "batch_size": 64,
        "topology": {"world_size": 2, "hbm_cap": "1GB", "compute_device": "cpu"},
        "tables": [{"name": "big", "num_embeddings": 20_000, "embedding_dim": 32, "pooling_factor": 20,
                    "access": {"distribution": "zipf", "alpha": 1.2}},
                   {"name": "small", "num_embeddings": 5_000, "embedding_dim": 32}],
    })
    hot = next(c for c in table_candidates(workload, workload.tables[0]) if c.replicated_rows)
    plan = Plan(format="shardopt-plan", version=PLAN_VERSION, workload={"name": "hot"}, world_size=2, tables=(
        TablePlan(name="big", sharding_type="row_wise", replicated_rows=hot.replicated_rows,
                  shards=tuple(Shard(rank=i, offsets=(p.row_offset, 0), sizes=(p.rows, p.cols))
                               for i, p in enumerate(hot.pieces))),
        TablePlan(name="small", sharding_type="table_wise",
                  shards=(Shard(rank=1, offsets=(0, 0), sizes=(5_000, 32)),)),
    ))
    assert check_plan(workload, plan).valid
    result = replay_plan(workload, plan, warmup=0, iters=1)
    assert len(result.per_rank) == 2 and all(r.total_ms > 0 for r in result.per_rank)
    # Rank 0 runs the cold block's kernel and the hot replica's (data-parallel) kernel.
    assert result.ranks[0].kernels == 2


def test_torchrec_candidates_leave_hot_rows_out_and_conversion_refuses_them():
    from shardopt.search.ilp import IlpSearch
    from shardopt.torchrec.sharding_plan import to_sharding_plan

    from shardopt.core.errors import ShardoptError

    workload = _skewed()
    plan = plan_workload(workload, cost_model=AnalyticCostModel(),
                         search=IlpSearch(time_limit_s=2, candidates="torchrec"))
    assert not any(t.replicated_rows for t in plan.tables)
    hot = plan_workload(workload, cost_model=AnalyticCostModel(), search=IlpSearch(candidates="all"))
    assert any(t.replicated_rows for t in hot.tables)
    with pytest.raises(ShardoptError, match="table 'big': hot-row replication"):
        to_sharding_plan(hot, workload)


def test_cli_candidates_option(runner, tmp_path):
    import yaml

    from conftest import run_cli
    from shardopt.core.plan import read_plan

    path = tmp_path / "hot.yaml"
    tables = [{"name": "big", "num_embeddings": 2_000_000, "embedding_dim": 128, "pooling_factor": 1000,
               "access": {"distribution": "zipf", "alpha": 1.2}}]
    tables += [{"name": f"s{i}", "num_embeddings": 100_000, "embedding_dim": 64, "pooling_factor": 2}
               for i in range(8)]
    path.write_text(yaml.safe_dump({"version": 1, "name": "hot", "batch_size": 4096, "tables": tables,
                                    "topology": {"world_size": 8, "hbm_cap": "8GB", "compute_device": "cuda",
                                                 "hardware": "h200", "local_world_size": 2}}))
    for option, expect in (("torchrec", False), ("all", True)):
        out = tmp_path / f"{option}.json"
        result = run_cli(runner, "plan", path, "-o", out, "--candidates", option, "--cost-model", "analytic-v0",
                         "--robust", "off")  # the nominal step's choice: robust, the replica's all-reduce may outweigh it
        assert result.exit_code == 0, result.stderr
        assert any(t.replicated_rows for t in read_plan(out).tables) is expect


@pytest.mark.parametrize("rows,alpha", [(2**34, 1.05), (50_000_000, 2.5), (4_000_000_000, 1.6)])
def test_split_of_extreme_tables_stays_within_the_workload_bounds(rows, alpha):
    """A tail whose coldest rows draw < 1e-9 of the weight, or a bucket of > 1e9 rows, once made
    the split table fail the workload's own bounds (dlrm-large with --candidates all crashed)."""
    table = workload_from_dict({
        "version": 1, "name": "x", "batch_size": 512, "topology": {"world_size": 8, "hbm_cap": "1TB"},
        "tables": [{"name": "t", "num_embeddings": rows, "embedding_dim": 64, "pooling_factor": 20,
                    "access": {"distribution": "zipf", "alpha": alpha}}]}).tables[0]
    full = row_buckets(table)
    for h in hot_row_counts(table) or [16]:
        hot, cold = split_table(table, h)
        assert hot.num_embeddings + cold.num_embeddings == rows
        _, tail = full.split(h)
        got = row_buckets(cold)
        # the rescaling keeps the distribution: per-row probabilities up to the floor
        kept = tail.probs / float((tail.counts * tail.probs).sum()) > 1e-15
        assert got.probs[kept] == pytest.approx(tail.probs[kept] / float((tail.counts * tail.probs).sum()), rel=1e-6)
