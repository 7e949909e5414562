"""Placement rules in the CP-SAT model: a pinned table's pieces get literals only on its ranks
(``PlacementRules.may_hold``), and each grouped table gets one literal per rank saying it holds
something there, which colocation equates and separation sums to at most one."""

from __future__ import annotations

from typing import Callable

from ortools.sat.python import cp_model

from shardopt.arithmetic.placement import PlacementRules


def add_groups(cp: cp_model.CpModel, rules: PlacementRules, on: dict[str, dict[int, list]], world: int) -> None:
    """``on[table][rank]``: the literals that put a piece of ``table`` on ``rank``."""
    holds = holding(cp, lambda name, rank: on.get(name, {}).get(rank, []))
    for group in rules.colocate:
        add_group(cp, holds, "colocate", group, world)
    for group in rules.apart:
        add_group(cp, holds, "apart", group, world)


def holding(cp: cp_model.CpModel, literals: Callable[[str, int], list]) -> Callable[[str, int], cp_model.IntVar]:
    """``holds(table, rank)``: one literal, made once, true when any of ``literals(table, rank)`` is."""
    made: dict[tuple[str, int], cp_model.IntVar] = {}

    def holds(name: str, rank: int) -> cp_model.IntVar:
        if (name, rank) not in made:
            lits = literals(name, rank)
            var = cp.new_bool_var(f"on[{name},{rank}]")
            if lits:
                cp.add_max_equality(var, lits)
            else:
                cp.add(var == 0)
            made[name, rank] = var
        return made[name, rank]

    return holds


def add_group(cp: cp_model.CpModel, holds, kind: str, tables, world: int, enforce=None) -> None:
    """Colocation (every rank holds all of ``tables`` or none) or separation (at most one), each
    constraint only under ``enforce`` when given (an assumption of ``conflict.py``)."""
    for rank in range(world):
        lits = [holds(name, rank) for name in tables]
        made = [cp.add(lit == lits[0]) for lit in lits[1:]] if kind == "colocate" else [cp.add_at_most_one(lits)]
        if enforce is not None:
            for constraint in made:
                constraint.only_enforce_if(enforce)
