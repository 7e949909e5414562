"""The benchmarks' deliberately wrong models (benchmarks/planner_ab.py, robust.py) price every kind
of shard the analytic model does: an override that fell behind its signature stopped robust.py at
its first plan (replicas' dense constants, 2026-12-06)."""

import sys
from pathlib import Path

import pytest

from conftest import CONFIGS
from shardopt.contracts import ShardSpec
from shardopt.core.workload import read_workload
from shardopt.costmodel.registry import resolve_cost_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from planner_ab import ScaledCompute  # noqa: E402
from robust import TableNoise  # noqa: E402


@pytest.mark.parametrize("kernel", ["fused", "dense"])
def test_scaled_and_noisy_models_price_fused_and_replica_shards(kernel):
    workload, _ = read_workload(CONFIGS / "tiny.yaml")
    base, _ = resolve_cost_model("analytic", workload)
    table = workload.tables[0]
    spec = ShardSpec(table=table, rows=table.num_embeddings, cols=table.embedding_dim,
                     sharding_type="data_parallel" if kernel == "dense" else "table_wise", compute_kernel=kernel)
    nominal = base.shard_cost(workload, spec)
    scaled = ScaledCompute(base, 4.0).shard_cost(workload, spec)
    noisy = TableNoise(base, 0.3).shard_cost(workload, spec)
    assert nominal.fwd_compute_ms > 0 and nominal.bwd_compute_ms > 0
    assert scaled.fwd_compute_ms > 2 * nominal.fwd_compute_ms and scaled.bwd_compute_ms > 2 * nominal.bwd_compute_ms
    factor = noisy.fwd_compute_ms / nominal.fwd_compute_ms
    assert factor != pytest.approx(1.0) and noisy.bwd_compute_ms / nominal.bwd_compute_ms == pytest.approx(factor)
