"""Candidates from the research: row-wise subsets, data-parallel small tables, RecShard tiers."""

from hypothesis import given, settings
from hypothesis import strategies as st

from shardopt.arithmetic.access import row_buckets
from shardopt.core.layout import shard_bytes
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.search.candidates import table_candidates
from shardopt.search.tiers import HOT_SHARES, cache_load_factors
from shardopt.search.ilp import IlpSearch
from shardopt.core.workload import workload_from_dict


def _workload(tables, device="cuda", world=8, cap="1GB", batch=256, ddr=None):
    topo = {"world_size": world, "hbm_cap": cap, "compute_device": device}
    if ddr:
        topo["ddr_cap"] = ddr
    return workload_from_dict({"version": 1, "name": "c", "batch_size": batch, "topology": topo,
                               "tables": tables})


def test_small_tables_may_be_replicated_and_big_ones_not():
    wl = _workload([
        {"name": "small", "num_embeddings": 500, "embedding_dim": 64},
        {"name": "big", "num_embeddings": 500_000, "embedding_dim": 64},
    ])
    kinds = {t.name: {c.sharding_type for c in table_candidates(wl, t)} for t in wl.tables}
    assert "data_parallel" in kinds["small"]  # 500 rows <= the 2048-sample global batch
    assert "data_parallel" not in kinds["big"]
    dp = next(c for c in table_candidates(wl, wl.tables[0]) if c.sharding_type == "data_parallel")
    assert dp.placement == "fixed" and len(dp.pieces) == 8


def test_row_wise_subsets_for_tables_too_big_for_a_rank_share():
    wl = _workload([{"name": "huge", "num_embeddings": 2_000_000, "embedding_dim": 64}], cap="1GB")
    assert shard_bytes("rowwise_adagrad", wl.tables[0], 2_000_000, 64) > 1e9 / 4
    cands = table_candidates(wl, wl.tables[0])
    subsets = [c for c in cands if c.sharding_type == "row_wise" and c.placement == "free"]
    assert [len(c.pieces) for c in subsets] == [2, 4]
    full = [c for c in cands if c.sharding_type == "row_wise" and c.placement == "fixed"]
    assert len(full) == 1 and len(full[0].pieces) == 8
    for cand in subsets:
        assert sum(p.rows for p in cand.pieces) == 2_000_000


def test_recshard_tiers_only_on_gpus_with_load_factors_from_the_access_cdf():
    table = {"name": "skewed", "num_embeddings": 4_000_000, "embedding_dim": 128,
             "access": {"distribution": "zipf", "alpha": 1.2}}
    gpu = _workload([table], device="cuda", cap="8GB", ddr="64GB")
    cpu = _workload([table], device="cpu", cap="8GB")
    tiered = [c for c in table_candidates(gpu, gpu.tables[0]) if c.compute_kernel == "fused_uvm_caching"]
    no_ddr = _workload([table], device="cuda", cap="8GB")
    assert tiered
    for other in (cpu, no_ddr):  # no UVM tier on a CPU, nor without host memory declared
        assert not [c for c in table_candidates(other, other.tables[0])
                    if c.compute_kernel == "fused_uvm_caching"]
    factors = cache_load_factors(gpu.tables[0])
    assert [c.cache_load_factor for c in tiered] == factors
    buckets = row_buckets(gpu.tables[0])
    rows = gpu.tables[0].num_embeddings
    for factor in factors:
        # The cache holds the rows that draw one of the target shares of the lookups.
        assert any(buckets.top_share(factor * rows) >= share - 1e-9 for share in HOT_SHARES)
        assert 0 < factor <= 0.5


def test_uniform_tables_get_no_tiers():
    wl = _workload([{"name": "flat", "num_embeddings": 4_000_000, "embedding_dim": 128}], cap="8GB")
    assert cache_load_factors(wl.tables[0]) == []  # 80% of lookups need 80% of rows: keep in HBM


@settings(max_examples=100, deadline=None)
@given(st.floats(0.5, 1.6), st.integers(100, 10**7), st.floats(0.01, 0.999))
def test_rows_for_share_inverts_top_share(alpha, rows, share):
    wl = _workload([{"name": "z", "num_embeddings": rows, "embedding_dim": 4,
                     "access": {"distribution": "zipf", "alpha": alpha}}])
    buckets = row_buckets(wl.tables[0])
    k = buckets.rows_for_share(share)
    assert 0 <= k <= rows + 1e-6
    assert abs(buckets.top_share(k) - share) < 1e-6


def _tiered_workload(ddr_cap):
    tables = [{"name": f"t{i}", "num_embeddings": 1_000_000, "embedding_dim": 64, "pooling_factor": 8,
               "access": {"distribution": "zipf", "alpha": 1.2}} for i in range(4)]
    return workload_from_dict({
        "version": 1, "name": "tiers", "batch_size": 512,
        "topology": {"world_size": 2, "hbm_cap": "300MB", "ddr_cap": ddr_cap, "compute_device": "cuda"},
        "tables": tables,
    })


def test_memory_bound_gpu_plan_uses_hot_cold_tiers_within_host_memory():
    from shardopt.arithmetic.memory import plan_memory
    from shardopt.arithmetic.checks import check_plan
    from shardopt.planner import plan_workload
    from shardopt.search.ilp import IlpSearch

    wl = _tiered_workload("600MB")  # 4 x 260 MB of tables on 2 x 300 MB of HBM
    for search in (IlpSearch(candidates="all"), IlpSearch(candidates="all", time_limit_s=2)):
        plan = plan_workload(wl, search=search)
        assert check_plan(wl, plan).valid
        tiered = [t for t in plan.tables if t.compute_kernel == "fused_uvm_caching"]
        assert tiered and all(0 < t.cache_load_factor <= 0.5 for t in tiered)
        _, ddr = plan_memory(wl, plan.tables)
        assert max(ddr.values()) <= 600e6


def test_host_memory_limit_makes_tiers_infeasible_with_a_clear_error():
    import pytest

    from shardopt.core.errors import ShardoptError
    from shardopt.planner import plan_workload

    with pytest.raises(ShardoptError, match="fits in memory"):
        plan_workload(_tiered_workload("400MB"), source="tiers.yaml", search=IlpSearch(candidates="all"))


def _hot_workload(device="cuda", world=8, cold=15):
    """A table small in memory but pooled 150 times (a large share of the lookups), and cold ones."""
    hot = {"name": "hot", "num_embeddings": 60_000, "embedding_dim": 64, "pooling_factor": 150}
    cold = [{"name": f"c{i}", "num_embeddings": 40_000 + 3_000 * i, "embedding_dim": 64, "pooling_factor": 5}
            for i in range(cold)]
    return _workload([hot, *cold], device=device, world=world, cap="1GB")


def test_a_hot_table_small_in_memory_gets_every_cut_that_spreads_it():
    """Issue 21: a table small in bytes but carrying most lookups was kept whole; now its cost
    decides, and the ILP chooses among row-wise subsets, column cuts and replicas."""
    from shardopt.costmodel.analytic import AnalyticCostModel
    from shardopt.search.candidates import workload_candidates

    wl = _hot_workload(cold=47)  # six tables a rank: a cold one is far below a quarter of a rank's load
    plain = {c.label for c in table_candidates(wl, wl.table("hot"))}
    cands, costs = workload_candidates(wl, AnalyticCostModel(), "all")
    labels = {c.label for c in cands["hot"]}
    assert {"row_wisex2", "table_row_wisex8", "data_parallelx8"} <= labels - plain
    assert {"row_wisex4", "row_wisex8", "column_wisex2"} <= labels
    assert len(costs["hot"]) == len(cands["hot"])
    # Cold tables are not hot: their candidates are table_candidates' alone.
    assert {c.label for c in cands["c0"]} == {c.label for c in table_candidates(wl, wl.table("c0"))}
    # TorchRec's cuts only: no row-wise subsets, which TorchRec cannot run.
    cands, _ = workload_candidates(wl, AnalyticCostModel(), "torchrec")
    assert not any(c.sharding_type == "row_wise" and c.placement == "free" for c in cands["hot"])


def test_the_bound_knows_the_cuts_a_table_allows_not_only_those_offered():
    from shardopt.costmodel.analytic import AnalyticCostModel
    from shardopt.search.bound import balance_lower_bound
    from shardopt.search.candidates import piece_costs

    model = AnalyticCostModel()
    wl = _hot_workload(device="cpu", world=4)
    offered = {t.name: [c for c in table_candidates(wl, t, "torchrec") if c.sharding_type == "table_wise"]
               for t in wl.tables}
    costs = {n: [piece_costs(wl, model, c) for c in cs] for n, cs in offered.items()}
    assert balance_lower_bound(wl, model, offered, costs, possible=True) < \
        0.9 * balance_lower_bound(wl, model, offered, costs)
    # Tables allowed only table-wise have no finer cut: the bound is the same.
    only = [dict(name=t.name, num_embeddings=t.num_embeddings, embedding_dim=t.embedding_dim,
                 pooling_factor=t.pooling_factor, sharding_types=["table_wise"]) for t in wl.tables]
    wl = _workload(only, device="cpu", world=4)
    offered = {t.name: table_candidates(wl, t, "torchrec") for t in wl.tables}
    costs = {n: [piece_costs(wl, model, c) for c in cs] for n, cs in offered.items()}
    assert balance_lower_bound(wl, model, offered, costs, possible=True) == \
        balance_lower_bound(wl, model, offered, costs)


def test_kernels_that_ask_for_a_replica_or_plain_uvm_get_one_whatever_the_pruning():
    """TorchRec's compute_kernels=["dense"] means a replica, ["fused_uvm"] plain UVM: both are
    planned as asked even where shardopt would not offer them on its own (a table too big to
    gain by a replica, a skewed table whose hot rows would earn a cached tier instead)."""
    wl = _workload([
        {"name": "replica", "num_embeddings": 500_000, "embedding_dim": 64, "compute_kernels": ["dense"]},
        {"name": "uvm", "num_embeddings": 4_000_000, "embedding_dim": 64, "compute_kernels": ["fused_uvm"],
         "access": {"distribution": "zipf", "alpha": 1.1}},
    ], cap="8GB", ddr="64GB")
    replica, uvm = (table_candidates(wl, t) for t in wl.tables)
    assert {(c.sharding_type, c.compute_kernel) for c in replica} == {("data_parallel", "dense")}
    assert {c.compute_kernel for c in uvm} == {"fused_uvm"}
    plan = IlpSearch(time_limit_s=0.5).search(wl, AnalyticCostModel())
    assert {tp.name: tp.sharding_type for tp in plan.tables}["replica"] == "data_parallel"


def test_kernels_held_to_uvm_without_host_memory_name_the_missing_ddr_cap():
    import pytest

    from shardopt.core.errors import ShardoptError

    table = {"name": "uvm", "num_embeddings": 4_000_000, "embedding_dim": 64, "compute_kernels": ["fused_uvm"]}
    without, with_ddr, cpu = (_workload([table], cap="8GB"), _workload([table], cap="8GB", ddr="64GB"),
                              _workload([table], device="cpu", cap="8GB"))
    with pytest.raises(ShardoptError, match=r"'uvm'.*UVM keeps rows in host memory: declare topology.ddr_cap$"):
        table_candidates(without, without.tables[0])
    assert {c.compute_kernel for c in table_candidates(with_ddr, with_ddr.tables[0])} == {"fused_uvm"}
    with pytest.raises(ShardoptError, match=r"with a ddr_cap, and dense for data_parallel\)$"):
        table_candidates(cpu, cpu.tables[0])  # CPU ranks run no UVM kernel at all


def test_a_min_partition_is_the_narrowest_column_shard_as_in_torchrec():
    """TorchRec reads min_partition as the narrowest column shard (its own default is 128 columns);
    shardopt's default floor is 32, and a user's min_partition replaces it, narrower or wider, with
    TorchRec's own cut (the least multiple of 4 from min_partition up dividing the width) offered."""
    from shardopt.search.candidates import column_splits

    def table(dim, min_partition=None):
        extra = {"min_partition": min_partition} if min_partition else {}
        return workload_from_dict({"version": 1, "name": "w", "batch_size": 512, "topology": {
            "world_size": 8, "compute_device": "cuda", "hbm_cap": "80GB"}, "tables": [
                {"name": "t", "num_embeddings": 1000, "embedding_dim": dim, **extra}]}).tables[0]

    assert column_splits(table(84), 8) == [2]
    assert column_splits(table(84, 8), 8) == [2, 4, 7, 8]  # 7 x 12: TorchRec's cut
    assert column_splits(table(84, 8), 4) == [2, 4]  # no more pieces than ranks
    assert column_splits(table(128, 64), 8) == [2]
    assert column_splits(table(256), 8) == [2, 4, 8]
