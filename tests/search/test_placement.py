"""Placement rules and heterogeneous ranks: honoured by every search, checked by validate, and a
contradictory set explained by its smallest conflicting subset."""

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from shardopt.arithmetic.checks import check_plan
from shardopt.arithmetic.placement import placement_violations
from shardopt.contracts import DEFAULT_CANDIDATES, Breakdown
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.workload import workload_from_dict, workload_to_dict
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.planner import plan_workload
from shardopt.search.conflict import find_conflict
from shardopt.search.greedy import GreedySearch
from shardopt.search.ilp import IlpSearch

MODEL = AnalyticCostModel()
SIZES = [(40_000, 64, 20.0), (30_000, 64, 15.0), (20_000, 32, 10.0), (12_000, 32, 8.0), (8_000, 16, 6.0),
         (6_000, 16, 4.0), (4_000, 16, 3.0), (2_000, 16, 2.0)]


def _workload(placement=(), world=4, local=2, cap="64MB", ranks=None, tables=SIZES, types=None):
    topo = {"world_size": world, "local_world_size": local, "hbm_cap": cap, "compute_device": "cpu"}
    if ranks:
        topo["ranks"] = ranks
    return workload_from_dict({
        "version": 1, "name": "rules", "batch_size": 256, "topology": topo,
        "tables": [{"name": f"t{i}", "num_embeddings": rows, "embedding_dim": dim, "pooling_factor": pool,
                    **({"sharding_types": types} if types else {})}
                   for i, (rows, dim, pool) in enumerate(tables)],
        "placement": list(placement),
    })


def _plan(workload, search=None):
    return plan_workload(workload, cost_model=MODEL, search=search or IlpSearch(time_limit_s=1.0))


def _ranks(plan, name):
    return sorted({s.rank for tp in plan.tables if tp.name == name for s in tp.shards})


def _step(plan):
    return Breakdown.of(plan.predicted.per_rank).step_ms


RULES = {
    "pin to a rank": ({"kind": "pin", "tables": ["t0"], "ranks": [3]}, lambda p: _ranks(p, "t0") == [3]),
    "pin to a host": ({"kind": "pin", "tables": ["t0", "t1"], "hosts": [1]},
                      lambda p: set(_ranks(p, "t0") + _ranks(p, "t1")) <= {2, 3}),
    "restrict to ranks": ({"kind": "pin", "tables": ["t2", "t3", "t4"], "ranks": [0, 1]},
                          lambda p: set(_ranks(p, "t2") + _ranks(p, "t3") + _ranks(p, "t4")) <= {0, 1}),
    "colocate": ({"kind": "colocate", "tables": ["t0", "t1"]}, lambda p: _ranks(p, "t0") == _ranks(p, "t1")),
    "apart": ({"kind": "apart", "tables": ["t2", "t3", "t4", "t5"]},
              lambda p: len({r for n in ("t2", "t3", "t4", "t5") for r in _ranks(p, n)})
              == sum(len(_ranks(p, n)) for n in ("t2", "t3", "t4", "t5"))),
}


@pytest.mark.parametrize("search", ["ilp", "greedy"])
@pytest.mark.parametrize("kind", sorted(RULES))
def test_each_rule_is_honoured_checked_by_validate_and_within_reach(kind, search):
    rule, holds = RULES[kind]
    free, ruled = _workload(), _workload([rule])
    engine = (lambda: IlpSearch(time_limit_s=1.0)) if search == "ilp" else (lambda: GreedySearch(repair_s=0.2))
    base, plan = _plan(free, engine()), _plan(ruled, engine())
    assert holds(plan) and check_plan(ruled, plan).valid
    # The rule binds: the unconstrained plan breaks it, and validate says which rule.
    broken = check_plan(ruled, base)
    assert not holds(base) and not broken.valid and "placement[0]" in broken.violations[0]
    # The plan stays above its bound and near the unconstrained step (these rules cost little).
    assert plan.predicted.lower_bound_ms <= _step(plan) <= 1.3 * _step(base)


def test_per_rank_caps_and_reserved_bytes_are_honoured():
    # Rank 0 keeps only 2 MB for shards: the heaviest tables cannot go there.
    ranks = [{"ranks": [0], "reserved": "62MB"}, {"ranks": [3], "hbm_cap": "16MB"}]
    workload = _workload(ranks=ranks)
    for engine in (IlpSearch(time_limit_s=1.0), GreedySearch(repair_s=0.2)):
        plan = _plan(workload, engine)
        report = check_plan(workload, plan)
        assert report.valid, report.violations
    crowded = dataclasses.replace(plan, tables=tuple(
        dataclasses.replace(tp, shards=tuple(dataclasses.replace(s, rank=0) for s in tp.shards))
        if tp.name == "t0" else tp for tp in plan.tables))
    assert any("rank 0" in v and "its HBM for shards" in v for v in check_plan(workload, crowded).violations)


CONFLICTS = [
    # (rules, topology ranks, words the line must hold)
    ([{"kind": "pin", "tables": [f"t{i}" for i in range(6)], "ranks": [3]}], None,
     ["pin of", "hbm_cap", "rank 3 needs", "unpin", "raise hbm_cap of rank 3 to"]),
    ([{"kind": "pin", "tables": ["t0", "t1", "t2"], "ranks": [0, 1]}, {"kind": "apart", "tables": ["t0", "t1", "t2"]}],
     None, ["pin of t0, t1, t2 to ranks 0, 1", "keeping t0, t1, t2 apart", "conflict"]),
    ([{"kind": "colocate", "tables": ["t0", "t1"]}, {"kind": "apart", "tables": ["t0", "t1"]},
      {"kind": "pin", "tables": ["t5"], "ranks": [1]}], None, ["colocation of t0, t1", "keeping t0, t1 apart"]),
    ([{"kind": "pin", "tables": ["t0"], "ranks": [0]}], [{"ranks": [0], "hbm_cap": "4MB"}],
     ["pin of t0 to rank 0", "the 3.81 MiB for shards of rank 0", "rank 0 needs", "give rank 0"]),
]


@pytest.mark.parametrize("rules, ranks, words", CONFLICTS)
def test_a_contradiction_is_one_line_naming_the_smallest_conflict(rules, ranks, words):
    workload = _workload(rules, ranks=ranks, cap="16MB")
    with pytest.raises(ShardoptError) as info:
        _plan(workload)
    assert info.value.kind == ErrorKind.INFEASIBLE and info.value.exit_code == 3
    line = str(info.value)
    assert "\n" not in line and all(w in line for w in words), line
    assert info.value.details  # the whole set, for --explain
    assert "pin of t5" not in line  # the rule that plays no part is not named


def _reduced(workload, keys):
    """The workload with only the requirements ``keys`` kept: other rules dropped, other tables'
    allow-lists widened, other ranks given room to spare."""
    data = workload_to_dict(workload)
    named_rules = {k[1] for k in keys if k[0] == "rule"}
    data["placement"] = [r for i, r in enumerate(data.get("placement", [])) if i in named_rules]
    for t in data["tables"]:
        if ("allow", t["name"]) not in keys:
            t.pop("sharding_types", None)
    capped = {k[1] for k in keys if k[0] == "hbm"}
    caps = workload.topology.rank_caps
    data["topology"]["ranks"] = [{"ranks": [r], "hbm_cap": caps[r] if r in capped else 2**40}
                                 for r in range(workload.topology.world_size)]
    return workload_from_dict(data)


def _feasible(workload) -> bool:
    try:
        _plan(workload, IlpSearch(time_limit_s=2.0))
        return True
    except ShardoptError as exc:
        assert exc.kind == ErrorKind.INFEASIBLE
        return False


@st.composite
def _rule_sets(draw):
    world = draw(st.sampled_from([2, 4]))
    n = draw(st.integers(3, 5))
    names = [f"t{i}" for i in range(n)]
    rules = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["pin", "colocate", "apart"]))
        tables = draw(st.lists(st.sampled_from(names), min_size=1 if kind == "pin" else 2, max_size=3, unique=True))
        rule = {"kind": kind, "tables": tables}
        if kind == "pin":
            rule["ranks"] = draw(st.lists(st.integers(0, world - 1), min_size=1, max_size=world, unique=True))
        rules.append(rule)
    cap = draw(st.sampled_from(["1MB", "2MB", "4MB", "32MB"]))
    types = draw(st.sampled_from([None, ["table_wise"], ["table_wise", "column_wise"]]))
    # Sometimes one rank unlike the rest: less HBM, bytes held back, slower.
    ranks = draw(st.sampled_from([None, [{"ranks": [0], "reserved": "500KB"}],
                                  [{"ranks": [world - 1], "hbm_cap": "1MB", "speed": 0.5}]]))
    try:
        return _workload(rules, world=world, local=world, cap=cap, tables=SIZES[-n:], types=types, ranks=ranks)
    except ShardoptError:  # a table bigger than the whole cluster: an input error, tested elsewhere
        assume(False)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rule_sets())
def test_random_rules_give_a_plan_that_keeps_them_or_a_minimal_infeasible_explanation(workload):
    try:
        plan = _plan(workload, IlpSearch(time_limit_s=2.0))
    except ShardoptError as exc:
        assert exc.kind == ErrorKind.INFEASIBLE
        conflict = find_conflict(workload, MODEL, DEFAULT_CANDIDATES)  # the planner's candidates
        assert conflict is not None and conflict.minimal
        keys = [m.key for m in conflict.members]
        assert not _feasible(_reduced(workload, keys))  # the named subset alone is infeasible
        for key in keys:  # and each member is needed
            assert _feasible(_reduced(workload, [k for k in keys if k != key])), key
        return
    assert check_plan(workload, plan).valid
    assert not placement_violations(workload, plan.tables)


@pytest.mark.parametrize("search", ["ilp", "greedy"])
def test_a_slower_rank_gets_less_to_look_up_and_is_priced_slower(search):
    workload, even = _workload(ranks=[{"ranks": [0], "speed": 0.25}]), _workload()
    engine = IlpSearch(time_limit_s=1.0) if search == "ilp" else GreedySearch(repair_s=0.2)
    plan = _plan(workload, engine)
    slow, same = MODEL.breakdown(workload, plan.tables), MODEL.breakdown(even, plan.tables)
    # Rank 0's lookups take four times as long; its all-to-all and the other ranks are unchanged.
    assert slow[0].fwd_compute_ms == pytest.approx(4 * same[0].fwd_compute_ms)
    assert slow[0].bwd_comm_ms == pytest.approx(same[0].bwd_comm_ms) and slow[1:] == same[1:]
    compute = [r.fwd_compute_ms + r.bwd_compute_ms for r in same]  # at the profile's speed
    assert compute[0] < 0.5 * sum(compute[1:]) / 3  # the plan gives the slow rank less work
    assert [r.total_ms for r in plan.predicted.per_rank] == [r.total_ms for r in slow]


def test_a_conflict_too_big_to_decide_in_time_is_still_named_by_its_bytes(monkeypatch):
    import shardopt.search.conflict as conflict

    workload = _workload([{"kind": "pin", "tables": [f"t{i}" for i in range(6)], "ranks": [3]}], cap="16MB")
    monkeypatch.setattr(conflict, "SOLVE_WORK", 1e-9)  # no solve decides: the plain count speaks
    found = conflict.find_conflict(workload, MODEL, DEFAULT_CANDIDATES)
    assert found is not None and not found.minimal
    assert [m.key for m in found.members] == [("rule", 0), ("hbm", 3)]
    assert "rank 3 needs at least" in found.line and "raise hbm_cap of rank 3 to at least" in found.line


def test_the_explanation_stops_at_its_budget_and_says_so(monkeypatch):
    """The whole explanation has one budget of solver work: spent, no further solve runs and the
    set found so far is reported as perhaps not minimal (one solve per member took minutes at
    128 ranks)."""
    import shardopt.search.conflict as conflict

    workload = _workload([{"kind": "pin", "tables": [f"t{i}" for i in range(6)], "ranks": [3]}], cap="16MB")
    monkeypatch.setattr(conflict, "EXPLAIN_WORK", 0.0)
    monkeypatch.setattr(conflict.cp_model.CpSolver, "solve", lambda *a, **k: pytest.fail("a solve ran past the budget"))
    found = conflict.find_conflict(workload, MODEL, DEFAULT_CANDIDATES)
    assert found is not None and not found.minimal
    assert "rank 3 needs at least" in found.line


def test_memory_alone_is_explained_by_the_search_without_a_solve(monkeypatch):
    """Without allow-lists or rules the only culprit is memory, which the search's own line names
    with its fix: no conflict search runs (it could only blame the caps)."""
    import shardopt.planner.pipeline as pipeline

    monkeypatch.setattr(pipeline, "find_conflict", lambda *a, **k: pytest.fail("a conflict search ran"))
    with pytest.raises(ShardoptError) as err:
        # 11 MiB in all against 15 MiB of caps, but four columns cannot be cut and no rank holds them
        _plan(_workload(cap="4MB", tables=[(600_000, 4, 1.0)]), GreedySearch())
    assert err.value.kind == ErrorKind.INFEASIBLE and "fits on no rank" in str(err.value)
    assert "row_wise" not in str(err.value)  # TorchRec cuts no rows on a CPU: not a fix to offer there
    data = workload_to_dict(_workload(cap="4MB", tables=[(600_000, 4, 1.0)], types=["table_wise"]))
    data["topology"]["compute_device"] = "cuda"
    with pytest.raises(ShardoptError) as err:  # the search's own words, before any explanation
        GreedySearch().search(workload_from_dict(data), MODEL)
    assert "allow row_wise for table 't0'" in str(err.value)


def test_an_allow_list_conflict_names_only_the_lists_the_user_gave():
    """A table that names only kernels is not said to list every sharding type; UVM kernels on a
    GPU without host memory declared are told where the rows would have gone."""
    data = workload_to_dict(_workload(tables=SIZES[:3]))
    data["topology"]["compute_device"] = "cuda"
    data["tables"][0]["compute_kernels"] = ["fused_uvm", "fused_uvm_caching"]
    with pytest.raises(ShardoptError) as err:
        _plan(workload_from_dict(data))
    line = str(err.value)
    assert "compute_kernels ['fused_uvm', 'fused_uvm_caching'] of t0" in line and "sharding_types" not in line
    assert "allow fused for t0" in line and "declare topology.ddr_cap" in line


@pytest.mark.parametrize("device,lists,reason,fix", [
    ("cpu", {"sharding_types": ["row_wise"]},
     "(none runs in TorchRec on cpu, which allows data_parallel, table_wise, column_wise, table_column_wise)", "allow "),
    ("cpu", {"compute_kernels": ["fused_uvm"]}, "(its sharding_types run with none of its compute_kernels: shardopt"
     " plans fused, fused_uvm and fused_uvm_caching on cuda", "allow fused for t0"),
    ("cuda", {"sharding_types": ["table_wise"], "compute_kernels": ["dense"]},
     "(its sharding_types run with none of its compute_kernels:", "with the fused kernel for t0"),
])
def test_an_allow_list_that_nothing_on_the_device_runs_says_why_in_its_one_line(device, lists, reason, fix):
    """row_wise alone on a CPU (TorchRec's CPU sharders run none of it), a UVM kernel on a CPU, the
    dense kernel without data_parallel: the one line says why, and a fix that runs, rather than
    leaving the user to guess why the lists leave no plan."""
    data = workload_to_dict(_workload(tables=SIZES[:2]))
    data["topology"]["compute_device"] = device
    data["tables"][0].update(lists)
    with pytest.raises(ShardoptError) as err:
        _plan(workload_from_dict(data))
    line = str(err.value)
    assert err.value.kind == ErrorKind.INFEASIBLE and "\n" not in line
    assert f" of t0 {reason}" in line and fix in line and line.endswith(" for t0")


def test_an_allow_list_with_one_type_that_runs_plans_it():
    """row_wise beside column_wise on a CPU: column_wise runs there, so the table is planned with it."""
    data = workload_to_dict(_workload(tables=SIZES[:2]))
    data["tables"][0]["sharding_types"] = ["row_wise", "column_wise"]
    plan = _plan(workload_from_dict(data))
    assert {tp.sharding_type for tp in plan.tables if tp.name == "t0"} == {"column_wise"}
