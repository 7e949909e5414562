"""A workload's placement rules resolved per table, and a plan checked against them.

The searches ask two things of a rank: may this table's shard go there (pins), and would it share
the rank with a table it must avoid or leave a table it must join (groups). ``validate`` asks which
rule a plan breaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

from shardopt.core.placement import Apart, Colocate, Pin
from shardopt.core.plan import TablePlan
from shardopt.core.workload import Workload


@dataclass(frozen=True)
class PlacementRules:
    """Per table, the ranks it may use (absent: all), and the groups it belongs to (colocated
    groups that share a table merged into one)."""

    allowed: dict[str, frozenset[int]]
    colocate: tuple[tuple[str, ...], ...]
    apart: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, workload: Workload) -> "PlacementRules":
        allowed: dict[str, frozenset[int]] = {}
        colocate, apart = [], []
        for rule in workload.placement:
            if isinstance(rule, Pin):
                ranks = pin_ranks(workload, rule)
                for name in rule.tables:
                    allowed[name] = allowed.get(name, ranks) & ranks
            elif isinstance(rule, Colocate):
                colocate.append(tuple(rule.tables))
            elif isinstance(rule, Apart):
                apart.append(tuple(rule.tables))
        return cls(allowed, _merged(colocate), tuple(apart))

    @cached_property
    def grouped(self) -> frozenset[str]:
        """Tables in a colocated or separated group (asked for every placement literal)."""
        return frozenset(name for group in self.colocate + self.apart for name in group)

    def may_hold(self, name: str, rank: int) -> bool:
        ranks = self.allowed.get(name)
        return ranks is None or rank in ranks

    def may_hold_all(self, name: str, ranks: Iterable[int]) -> bool:
        allowed = self.allowed.get(name)
        return allowed is None or all(r in allowed for r in ranks)


def _merged(groups: list[tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
    """Colocation is transitive: groups that share a table are one group (first-named order)."""
    merged: list[list[str]] = []
    for group in groups:
        touching = [m for m in merged if set(m) & set(group)]
        joined = [n for m in touching for n in m]
        joined += [n for n in group if n not in joined]
        merged = [m for m in merged if m not in touching] + [joined]
    return tuple(tuple(m) for m in merged)


def pin_ranks(workload: Workload, rule: Pin) -> frozenset[int]:
    if rule.ranks is not None:
        return frozenset(rule.ranks)
    local = workload.topology.ranks_per_host
    return frozenset(r for h in rule.hosts for r in range(h * local, (h + 1) * local))


def placement_violations(workload: Workload, tables: Sequence[TablePlan]) -> list[str]:
    """One line per rule the plan breaks, naming the rule and the rank."""
    if not workload.placement:
        return []
    ranks_of = {tp.name: sorted({s.rank for s in tp.shards}) for tp in tables}
    out = []
    for i, rule in enumerate(workload.placement):
        where = f"placement[{i}] ({rule.describe()})"
        present = [name for name in rule.tables if name in ranks_of]
        if isinstance(rule, Pin):
            allowed = pin_ranks(workload, rule)
            for name in present:
                stray = [r for r in ranks_of[name] if r not in allowed]
                if stray:
                    out.append(f"{where}: table {name!r} has a shard on rank {stray[0]}")
        elif isinstance(rule, Colocate) and present:
            first = present[0]
            for name in present[1:]:
                if ranks_of[name] != ranks_of[first]:
                    out.append(f"{where}: table {name!r} is on ranks {ranks_of[name]}, table {first!r} on"
                               f" {ranks_of[first]}")
        elif isinstance(rule, Apart):
            holder: dict[int, str] = {}
            for name in present:
                for r in ranks_of[name]:
                    if r in holder:
                        out.append(f"{where}: rank {r} holds tables {holder[r]!r} and {name!r}")
                    holder.setdefault(r, name)
    return out
