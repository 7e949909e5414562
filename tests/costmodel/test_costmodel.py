"""The analytic model responds to its inputs the way the hardware would."""

import dataclasses

import pytest

from shardopt.contracts import ShardSpec
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.core.hardware import hardware_for, hardware_profiles
from shardopt.core.plan import Shard, TablePlan
from shardopt.core.workload import workload_from_dict


def _workload(world=4, local=None, pooling=10.0, access=None, rows=100_000, **topology):
    table = {"name": "t", "num_embeddings": rows, "embedding_dim": 64, "pooling_factor": pooling}
    if access:
        table["access"] = access
    topo = {"world_size": world, "hbm_cap": "1GB", "compute_device": "cpu", **topology}
    if local:
        topo["local_world_size"] = local
    return workload_from_dict(
        {"version": 1, "name": "w", "batch_size": 256, "topology": topo, "tables": [table]}
    )


def _cost(workload, kind="table_wise", rows=100_000, cols=64):
    return AnalyticCostModel().shard_cost(workload, ShardSpec(workload.tables[0], kind, rows, cols))


def test_more_pooling_costs_more_compute():
    assert _cost(_workload(pooling=20)).fwd_compute_ms > _cost(_workload(pooling=5)).fwd_compute_ms


def test_skew_makes_lookups_cheaper():
    skewed = _workload(access={"distribution": "zipf", "alpha": 1.2})
    assert _cost(skewed).fwd_compute_ms < _cost(_workload()).fwd_compute_ms
    assert _cost(skewed).bwd_compute_ms < _cost(_workload()).bwd_compute_ms


def test_row_wise_shard_sees_its_share_of_lookups():
    w = _workload()
    whole = _cost(w, "row_wise", 100_000)
    quarter = _cost(w, "row_wise", 25_000)
    assert quarter.fwd_compute_ms < whole.fwd_compute_ms / 2
    assert quarter.hbm_bytes * 4 == whole.hbm_bytes


def test_a_row_pieces_backward_reads_the_gradient_of_its_own_ids_only():
    """The forward writes a partial sum for every bag; the backward reads the output gradient per
    id it holds, so four quarters pay what the whole table pays (measured: cut_pieces.md)."""
    from shardopt.arithmetic.traffic import shard_lookups, shard_samples
    from shardopt.costmodel.terms import BWD_TERMS, FWD_TERMS, shard_terms

    w = _workload(world=4, local=4, compute_device="cuda", hardware="h200")
    table, hw = w.tables[0], hardware_for(w.topology)

    def terms(kind, rows):
        return shard_terms(hw, table, rows, 64, lookups=shard_lookups(w, table, kind, rows),
                           samples=shard_samples(w, kind))

    (whole_fwd, whole_bwd), (quarter_fwd, quarter_bwd) = terms("table_wise", 100_000), terms("row_wise", 25_000)
    assert quarter_fwd[FWD_TERMS.index("out_bytes")] == whole_fwd[FWD_TERMS.index("out_bytes")]
    out = BWD_TERMS.index("out_bytes")
    assert quarter_bwd[out] == pytest.approx(whole_bwd[out] / 4)
    assert whole_bwd[out] == w.batch_size * 4 * 64 * 4  # every bag's row, whole


def test_column_shards_each_see_every_lookup():
    w = _workload(rows=5_000)  # in cache either way: only the per-lookup work differs
    half = _cost(w, "column_wise", rows=5_000, cols=32)
    whole = _cost(w, "table_wise", rows=5_000)
    assert half.fwd_compute_ms > whole.fwd_compute_ms / 2  # per-lookup overheads repeat


def test_one_rank_has_no_communication():
    cost = _cost(_workload(world=1))
    assert cost.fwd_comm_ms == 0 and cost.bwd_comm_ms == 0


def test_cross_host_traffic_is_slower():
    one_host = _cost(_workload(world=8, local=8))
    two_hosts = _cost(_workload(world=8, local=4))
    assert two_hosts.fwd_comm_ms > one_host.fwd_comm_ms


def test_topology_bandwidth_overrides_the_profile():
    fast = _cost(_workload(intra_host_bw=100.0))
    slow = _cost(_workload(intra_host_bw=1.0))
    assert slow.fwd_comm_ms > 10 * fast.fwd_comm_ms
    assert hardware_for(_workload(intra_host_bw=100.0).topology).intra_host_bw_gbps == 100.0


def test_data_parallel_pays_an_allreduce_in_backward():
    cost = _cost(_workload(), "data_parallel")
    assert cost.fwd_comm_ms == 0 and cost.bwd_comm_ms > 0


def _two_halves_on_rank0(rows):
    return [
        TablePlan(
            name="t",
            sharding_type="column_wise",
            shards=(Shard(rank=0, offsets=(0, 0), sizes=(rows, 32)),
                    Shard(rank=0, offsets=(0, 32), sizes=(rows, 32))),
        )
    ]


def test_breakdown_sums_shards_and_overheads():
    w = _workload(world=2, rows=5_000)  # both halves fit in the caches together
    model = AnalyticCostModel()
    per_rank = model.breakdown(w, _two_halves_on_rank0(5_000))
    piece = _cost(w, "column_wise", rows=5_000, cols=32)
    overhead = model.rank_overhead_ms(w, {"column_wise"})
    assert per_rank[0].total_ms == pytest.approx(2 * piece.total_ms + overhead)
    assert per_rank[0].hbm_bytes == 2 * piece.hbm_bytes
    assert per_rank[1].total_ms == 0 and per_rank[1].hbm_bytes == 0


def test_shards_sharing_a_rank_share_its_cache():
    """Two halves that each fit in the last-level cache alone but not together miss more when
    fused on one rank than their floors (each with the cache to itself) add up to."""
    w = _workload(world=2, rows=60_000)
    model = AnalyticCostModel()
    hw = model.hardware(w)
    half_bytes = 60_000 * (128 + 64)  # rows and optimizer state of a 32-column half
    assert half_bytes < hw.llc_bytes < 2 * half_bytes
    per_rank = model.breakdown(w, _two_halves_on_rank0(60_000))
    floor = model.shard_floor(w, ShardSpec(w.tables[0], "column_wise", 60_000, 32))
    compute = per_rank[0].fwd_compute_ms + per_rank[0].bwd_compute_ms
    overhead = model.compute_overhead_ms(w, {"column_wise"})
    assert compute > 1.05 * (2 * (floor.fwd_compute_ms + floor.bwd_compute_ms) + overhead)


def test_every_profile_states_its_origin():
    for hw in hardware_profiles().values():
        assert hw.origin.strip() and hw.mem_bw_gbps > 0
        assert dataclasses.asdict(hw)["cache_bytes"] > 0


def test_cpu_model_warns_when_this_machine_is_another_cpu(monkeypatch):
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.profile import dataset
    from shardopt.core.workload import read_workload

    from conftest import CONFIGS

    workload, _ = read_workload(CONFIGS / "tiny.yaml")
    monkeypatch.setattr(dataset, "cpu_fingerprint", lambda: "GenuineIntel/6/85/7 avx2")
    _, warnings = resolve_cost_model("analytic", workload)
    assert any("calibrated on CPU" in w and "GenuineIntel/6/85/7 avx2" in w for w in warnings)


def test_declared_links_win_over_the_curves_measured_here():
    """A workload that declares its links describes the cluster it will run on; the packaged CPU
    model's all-to-all curves were measured on this machine (issue 19: a 1000x slower declared link
    gave the same prediction)."""
    from shardopt.costmodel.registry import resolve_cost_model

    base = {"version": 1, "name": "links", "batch_size": 512,
            "topology": {"world_size": 4, "hbm_cap": "4GB", "compute_device": "cpu"},
            "tables": [{"name": f"t{i}", "num_embeddings": 50_000, "embedding_dim": 64, "pooling_factor": 8}
                       for i in range(8)]}
    plain = workload_from_dict(base)
    slow = workload_from_dict({**base, "topology": {**base["topology"], "intra_host_bw": 0.01}})
    model, _ = resolve_cost_model("analytic", plain)
    assert model.comm_curves(plain) is not None and model.comm_curves(slow) is None
    tables = [TablePlan(name=f"t{i}", sharding_type="table_wise",
                        shards=(Shard(rank=i % 4, offsets=(0, 0), sizes=(50_000, 64)),)) for i in range(8)]
    comm = [sum(r.fwd_comm_ms + r.bwd_comm_ms for r in model.breakdown(w, tables)) for w in (plain, slow)]
    assert comm[1] > 10 * comm[0]


def _replica(workload, kernel, model=None):
    table = workload.tables[0]
    spec = ShardSpec(table, "data_parallel", table.num_embeddings, table.embedding_dim, kernel)
    return (model or AnalyticCostModel()).shard_cost(workload, spec)


def test_a_data_parallel_replica_steps_over_every_row_of_its_table():
    # TorchRec's dense kernel: a gradient as large as the table and Adagrad over every row, where
    # the fused kernel updates the rows looked up. At the same lookups, more rows cost the dense
    # replica more in backward, and never its forward.
    small, large = _workload(rows=2_000, pooling=50.0), _workload(rows=2_000_000, pooling=50.0)
    for w in (small, large):
        assert _replica(w, "dense").fwd_compute_ms == pytest.approx(_replica(w, "fused").fwd_compute_ms)
    grow_dense = _replica(large, "dense").bwd_compute_ms / _replica(small, "dense").bwd_compute_ms
    grow_fused = _replica(large, "fused").bwd_compute_ms / _replica(small, "fused").bwd_compute_ms
    assert grow_dense > 5 * grow_fused
    # a small table looked up often: one pass over the ids (no sort) costs less than the fused two
    hot = _workload(rows=500, pooling=300.0)
    assert _replica(hot, "dense").bwd_compute_ms < _replica(hot, "fused").bwd_compute_ms


def test_a_tables_measured_factor_prices_its_fused_kernel_not_its_dense_replica():
    from conftest import ROOT
    from shardopt.costmodel.store import load_model
    from shardopt.costmodel.table_factors import TableFactor

    w = _workload(rows=5_000)
    cal = load_model(ROOT / "shardopt" / "data" / "models" / "cpu.json")[0].calibration
    factored = AnalyticCostModel(calibration=dataclasses.replace(
        cal, table_factors=(TableFactor("t", 5_000, 64, 10.0, 2.0, 3.0),)))
    base = AnalyticCostModel(calibration=dataclasses.replace(cal, table_factors=()))
    whole = ShardSpec(w.tables[0], "table_wise", 5_000, 64)
    assert factored.shard_cost(w, whole).bwd_compute_ms == pytest.approx(3.0 * base.shard_cost(w, whole).bwd_compute_ms)
    assert _replica(w, "dense", factored).bwd_compute_ms == pytest.approx(_replica(w, "dense", base).bwd_compute_ms)
    # the replica's own factor (measured as a replica) prices the replica, and only it
    replica = AnalyticCostModel(calibration=dataclasses.replace(
        cal, table_factors=(TableFactor("t", 5_000, 64, 10.0, 1.0, 0.5, "dense"),)))
    assert _replica(w, "dense", replica).bwd_compute_ms == pytest.approx(0.5 * _replica(w, "dense", base).bwd_compute_ms)
    assert replica.shard_cost(w, whole).bwd_compute_ms == pytest.approx(base.shard_cost(w, whole).bwd_compute_ms)
