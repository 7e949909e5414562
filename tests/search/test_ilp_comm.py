"""The ILP reads a rank's comm off the measured curves, as the model and replay do."""

import pytest
from ortools.sat.python import cp_model

from shardopt.contracts import Breakdown
from shardopt.bench.suites import suite_tasks
from shardopt.costmodel.registry import resolve_cost_model
from shardopt.search.ilp import IlpSearch
from shardopt.search.ilp_comm import breakpoints, byte_unit, curve_cost, in_units


@pytest.fixture(scope="module")
def curves():
    task = suite_tasks("unit")[0]
    model, _ = resolve_cost_model("analytic", task.workload)
    return model.comm_curves(task.workload)


@pytest.mark.parametrize("size", [0, 10, 1024, 3000, 70_000, 300_000, 2_500_000, 40_000_000])
def test_piecewise_cost_follows_the_curve(curves, size):
    """Minimised with the bytes fixed, the variable sits on the curve's chord between
    breakpoints a factor two apart: within a few percent of the log-log curve, zero without bytes."""
    most = 50_000_000
    unit = byte_unit(most)
    scale = 1000.0  # cost units per ms
    cp = cp_model.CpModel()
    lit = cp.new_bool_var("on")
    cp.add(lit == 1)
    cost = curve_cost(cp, lambda b: curves.seconds(4, "pooled", b), breakpoints(curves, 4, "pooled", most),
                      [(in_units(size, unit), lit)], unit, scale, "t")
    cp.minimize(cost)
    solver = cp_model.CpSolver()
    assert solver.solve(cp) == cp_model.OPTIMAL
    got = solver.value(cost) / scale
    want = curves.seconds(4, "pooled", size) * 1e3
    if size == 0:
        assert got == 0
    else:
        assert want * 0.97 - 2 / scale <= got <= want * 1.05 + 2 / scale


def test_the_solver_objective_is_the_models_cost():
    """With comm exact in the ILP, what it minimises is what the model then scores, up to the
    compute of shards sharing a rank's cache (priced for an average rank in the ILP)."""
    task = suite_tasks("unit")[1]
    model, _ = resolve_cost_model("analytic", task.workload)
    search = IlpSearch(time_limit_s=3, candidates="torchrec", good_enough_gap=0.0)
    result = search._solve(task.workload, model)
    scored = Breakdown.of(model.breakdown(task.workload, result.tables)).bottleneck_ms
    assert search.last_report.objective_ms == pytest.approx(scored, rel=0.05)


def test_the_greedy_hint_is_completed_to_a_whole_solution():
    """Placements alone leave the bytes, curve segments and peaks for CP-SAT to find (at 100
    tables x 8 ranks it did not, within the limit); completed, the hint is a solution as it is."""
    from dataclasses import replace

    from shardopt.search.candidates import table_candidates
    from shardopt.search.greedy import GreedySearch
    from shardopt.search.candidates import piece_costs
    from shardopt.search.ilp_model import IlpModel as _Model
    from shardopt.contracts import CRITICAL_PATH

    workload = suite_tasks("unit")[0].workload
    model, _ = resolve_cost_model("analytic", workload)
    candidates = {t.name: table_candidates(workload, t, "torchrec") for t in workload.tables}
    costs = {n: [piece_costs(workload, model, c) for c in cs] for n, cs in candidates.items()}
    greedy = GreedySearch(candidates="all", repair_s=0).search(workload, model, candidates, costs).tables

    def fresh():
        return _Model(workload, candidates, costs, 0.0, model.comm_curves(workload), CRITICAL_PATH)

    m = fresh()
    m.hint(m.canonical(greedy))
    variables = len(m.cp.proto.variables)
    assert len(m.cp.proto.solution_hint.vars) < variables
    assert m.complete_hint()
    assert len(m.cp.proto.solution_hint.vars) == variables
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    assert solver.solve(m.cp) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert m.solution(solver) == m.canonical(greedy)

    # A plan whose cut is no candidate of the model cannot be completed: the partial hint stays.
    odd = list(greedy)
    odd[0] = replace(odd[0], sharding_type="row_wise")
    m = fresh()
    m.hint(tuple(odd))
    before = list(m.cp.proto.solution_hint.vars)
    assert not m.complete_hint()
    assert list(m.cp.proto.solution_hint.vars) == before
