"""Placement rules in the CP-SAT model: a pinned table's pieces get literals only on its ranks
(``PlacementRules.may_hold``), and each grouped table gets one literal per rank saying it holds
something there, which colocation equates and separation sums to at most one."""

from __future__ import annotations

from ortools.sat.python import cp_model

from shardopt.arithmetic.placement import PlacementRules


def add_groups(cp: cp_model.CpModel, rules: PlacementRules, on: dict[str, dict[int, list]], world: int) -> None:
    """``on[table][rank]``: the literals that put a piece of ``table`` on ``rank``."""
    used: dict[tuple[str, int], object] = {}

    def holds(name: str, rank: int):
        if (name, rank) not in used:
            lits = on.get(name, {}).get(rank, [])
            var = cp.new_bool_var(f"on[{name},{rank}]")
            if lits:
                cp.add_max_equality(var, lits)
            else:
                cp.add(var == 0)
            used[name, rank] = var
        return used[name, rank]

    for group in rules.colocate:
        for rank in range(world):
            first = holds(group[0], rank)
            for name in group[1:]:
                cp.add(holds(name, rank) == first)
    for group in rules.apart:
        for rank in range(world):
            cp.add_at_most_one([holds(name, rank) for name in group])
