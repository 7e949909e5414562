"""Repeats within an iteration that miss the last level: a forward term the fit weighs, and
version 2 model files (which priced every repeat as a hit) read as they were fitted."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardopt.costmodel.registry import embedded_model_path, resolve_cost_model
from shardopt.costmodel.store import load_model
from shardopt.costmodel.terms import FWD_TERMS, hardware_coefficients, shard_terms
from shardopt.core.hardware import hardware_for
from shardopt.core.plan import plan_to_json
from shardopt.core.workload import Table, workload_from_dict
from shardopt.planner.factory import plan_with

REPEAT = FWD_TERMS.index("repeat_miss_bytes")


def _cpu():
    return hardware_for(workload_from_dict(_workload_dict()).topology)


def _workload_dict(rows=2_000_000, pooling=40.0, dim=64):
    table = {"name": "t", "num_embeddings": rows, "embedding_dim": dim, "pooling_factor": pooling}
    return {"version": 1, "name": "w", "batch_size": 2048,
            "topology": {"world_size": 2, "hbm_cap": "4GB", "compute_device": "cpu"}, "tables": [table]}


def _terms(rows, pooling, batch=8192, dim=64):
    table = Table(name="t", num_embeddings=rows, embedding_dim=dim, pooling_factor=pooling)
    return shard_terms(_cpu(), table, rows, dim, lookups=batch * pooling, samples=batch)[0]


def test_a_table_far_over_the_last_level_drawn_several_times_a_row_misses_on_its_repeats():
    fwd = _terms(rows=1_000_000, pooling=400)  # 3.3 draws a row, 256 MB of rows: 16x the last level
    lookups, row_bytes = 8192 * 400, 64 * 4
    repeats = lookups - 1_000_000 * -np.expm1(-lookups / 1_000_000)
    assert 0.8 * repeats * row_bytes < fwd[REPEAT] <= repeats * row_bytes


def test_a_table_the_last_level_holds_misses_on_no_repeat():
    assert _terms(rows=2_000, pooling=40)[REPEAT] == 0.0


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(100, 3_000_000), pooling=st.floats(0.1, 300), batch=st.integers(1, 16384))
def test_repeat_misses_are_at_most_the_repeats(rows, pooling, batch):
    fwd = _terms(rows, pooling, batch)
    lookups = batch * pooling
    assert 0.0 <= fwd[REPEAT] <= max(0.0, lookups - rows * -np.expm1(-lookups / rows)) * 64 * 4 * (1 + 1e-9)


def test_published_constants_keep_repeats_hits():
    """A hardware profile's constants say nothing of the term: only a fit gives it a price."""
    fwd, _ = hardware_coefficients(_cpu())
    assert fwd[REPEAT] == 0.0


def _version_2(data: dict) -> dict:
    cal = dict(data["calibration"])
    cal["fwd"] = cal["fwd"][:REPEAT]
    if cal.get("dense"):
        cal["dense"] = {**cal["dense"], "fwd": cal["dense"]["fwd"][:REPEAT]}
    return {**data, "version": 2, "calibration": cal}


def test_a_version_2_model_file_plans_as_the_same_file_with_no_repeat_constant(tmp_path):
    data = json.loads(embedded_model_path("cpu").read_text())
    assert data["version"] == 3 and data["calibration"]["fwd"][REPEAT] > 0
    old = tmp_path / "v2.json"
    old.write_text(json.dumps(_version_2(data)))
    zeroed = json.loads(json.dumps(data))
    zeroed["calibration"]["fwd"][REPEAT] = 0.0
    if zeroed["calibration"].get("dense"):
        zeroed["calibration"]["dense"]["fwd"][REPEAT] = 0.0
    same = tmp_path / "v3.json"
    same.write_text(json.dumps(zeroed))
    parts, _ = load_model(old)
    assert parts.calibration.fwd[REPEAT] == 0.0
    workload = workload_from_dict(_workload_dict(rows=400_000))
    plans = []
    for path in (old, same):
        model, _ = resolve_cost_model(f"analytic@{path}", workload)
        plans.append(plan_to_json(plan_with(workload, cost_model=model)).replace(str(path), "MODEL"))
    assert plans[0] == plans[1]


def test_the_repeat_constant_raises_the_price_of_a_large_table_drawn_several_times_a_row(tmp_path):
    data = json.loads(embedded_model_path("cpu").read_text())
    old = tmp_path / "v2.json"
    old.write_text(json.dumps(_version_2(data)))
    workload = workload_from_dict(_workload_dict(rows=400_000, pooling=300))  # 3 draws a row, 102 MB
    from shardopt.contracts import ShardSpec

    spec = ShardSpec(workload.tables[0], "table_wise", 400_000, 64)
    now = resolve_cost_model(f"analytic@{embedded_model_path('cpu')}", workload)[0].shard_cost(workload, spec)
    before = resolve_cost_model(f"analytic@{old}", workload)[0].shard_cost(workload, spec)
    assert now.fwd_compute_ms > 1.05 * before.fwd_compute_ms
    assert now.bwd_compute_ms == pytest.approx(before.bwd_compute_ms)
