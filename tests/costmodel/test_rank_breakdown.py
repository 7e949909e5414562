"""The repair re-scores one rank at a time: the one-rank answer must be the whole plan's entry."""

import dataclasses

from hypothesis import given, settings, strategies as st

from shardopt.bench.baselines import RandomTableWise
from shardopt.bench.regimes import regime_task
from shardopt.bench.suites import suite_tasks
from shardopt.contracts import PlanConfig
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.planner import plan_with
from shardopt.planner import resolve_model
from shardopt.profile.dataset import CPU_ID_VARIABLE

TASKS = [*suite_tasks("unit"), regime_task("comm", 0), regime_task("hot", 0)]


@settings(max_examples=12, deadline=None)
@given(task=st.sampled_from(TASKS), seed=st.integers(0, 10_000))
def test_one_rank_equals_its_entry_in_the_whole_breakdown(task, seed):
    workload = task.workload
    tables = RandomTableWise(seed).search(workload, AnalyticCostModel()).tables
    for model in (AnalyticCostModel(), resolve_model(PlanConfig(), workload)[0]):
        whole = model.breakdown(workload, tables)
        for rank in range(workload.topology.world_size):
            assert model.rank_breakdown(workload, tables, rank) == whole[rank]


def test_one_rank_of_a_plan_with_every_cut_equals_its_entry(monkeypatch):
    """Row-wise subsets, column and table-row cuts, replicas: the plan shardopt makes over every
    candidate, with four tables held to one kind each so the plan has every cut whatever the
    model's constants rate best (since kinds are kernels of their own, hot task 6 keeps every
    table whole). Planned robust and for a CPU other than the packaged model's."""
    monkeypatch.setenv(CPU_ID_VARIABLE, "GenuineIntel/6/85/7 avx2")
    workload = regime_task("hot", 6).workload
    held = {"t00": ("row_wise",), "t01": ("column_wise",), "t02": ("table_row_wise",), "t03": ("data_parallel",)}
    workload = dataclasses.replace(workload, tables=tuple(
        dataclasses.replace(t, sharding_types=held[t.name]) if t.name in held else t for t in workload.tables))
    plan = plan_with(workload, PlanConfig(candidates="all", time_limit_s=1.0, robust="on"))
    model = AnalyticCostModel()
    whole = model.breakdown(workload, plan.tables)
    assert {t.sharding_type for t in plan.tables} >= {"row_wise", "column_wise", "table_row_wise", "data_parallel"}
    for rank in range(workload.topology.world_size):
        assert model.rank_breakdown(workload, plan.tables, rank) == whole[rank]
