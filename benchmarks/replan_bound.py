"""How good can a replan be at half the bytes a fresh plan moves? CP-SAT's proof, per change.

All steps here are the CP-SAT model's (summed shard costs per phase, the slowest rank of each phase
summed), so the bound, the fresh plan and shardopt's replan are measured by one ruler. For each
change, the replan's CP-SAT model with every cut (not only the old and the fresh plan's)
and the byte budget is solved by the whole portfolio for ``--seconds``; its bound is the least step
any plan within the budget can have in that model. The fresh plan is scored in the same model
without the budget. Their ratio is what the criterion "within 5% of the fresh plan at half its
bytes" can reach at best (OPTIMAL: exactly; FEASIBLE: at least the bound).

    python benchmarks/replan_bound.py --seconds 120 task05:8:16 task02:8:16 task02:8:12 task01:8:16
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def model_value(search, workload, cost_model, tables) -> float:
    """A plan's step in the CP-SAT model without a budget (its placements fixed)."""
    from ortools.sat.python import cp_model

    model = search.build(workload, cost_model, every_cut=True, budget=False)[0]
    model.hint(model.canonical(tuple(tables)))  # relabelled to meet its symmetry breaking
    fixed = model.cp.clone()
    for index, value in zip(fixed.proto.solution_hint.vars, fixed.proto.solution_hint.values):
        fixed.add(fixed.get_int_var_from_proto_index(index) == value)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 120
    if solver.solve(fixed) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError("the plan is not a solution of the model")
    return solver.objective_value / model.step_weight / model.scale


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from ortools.sat.python import cp_model

    from replan import resized, workloads
    from shardopt.contracts import PlanConfig
    from shardopt.planner import plan_with, resolve_model
    from shardopt.planner.replan import budgeted_search, replan_start, replan_with

    parser = argparse.ArgumentParser()
    parser.add_argument("changes", nargs="+", help="TASK:OLD_WORLD:NEW_WORLD")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    known = {name: (base, cap) for name, base, cap in workloads(8)}
    print("| change | tables | fresh plan (ms) | best possible within half its bytes (ms) | ratio | proof |"
          " replan --time-limit 5 (ms) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for change in args.changes:
        name, old_world, new_world = change.split(":")
        base, cap = known[name]
        old_wl, new_wl = resized(base, int(old_world), cap), resized(base, int(new_world), cap)
        config = PlanConfig(time_limit_s=5.0)
        model = resolve_model(config, new_wl)[0]
        old = plan_with(old_wl, config)
        start = replan_start(old, new_wl, config, cost_model=model)
        budget = max(start.forced, start.fresh_moved // 2)
        search = budgeted_search(old, new_wl, config, start, budget)
        cp, _, _ = search.build(new_wl, model, every_cut=True)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = args.seconds
        solver.parameters.num_workers = args.workers
        status = solver.solve(cp.cp)
        bound = solver.best_objective_bound / cp.step_weight / cp.scale
        fresh = model_value(search, new_wl, model, start.fresh.tables)
        replan = replan_with(old, new_wl, config, max_move=budget, cost_model=model, start=start)
        mine = model_value(search, new_wl, model, replan.plan.tables)
        print(f"| {name} {old_world} -> {new_world} | {len(new_wl.tables)} | {fresh:.3f} | {bound:.3f} |"
              f" {bound / fresh:.3f} | {solver.status_name(status)} | {mine:.3f} | {mine / fresh:.3f} |", flush=True)


if __name__ == "__main__":
    main()
