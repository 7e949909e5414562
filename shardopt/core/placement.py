"""Where things may go: placement rules and heterogeneous ranks, as a workload declares them.

A rule is a hard constraint on the plan (TorchRec #2642 asks to co-locate tables; its answer was a
hand-written plan): ``pin`` keeps a table's shards on some ranks or hosts (one rank pins it,
several restrict it), ``colocate`` makes tables share their ranks (every rank holding one holds
all), ``apart`` keeps tables off each other's ranks. A ``ranks`` entry of the topology gives some
ranks their own HBM, the bytes they hold back (as TorchRec's storage reservation) and a speed.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, Strict
from pydantic.dataclasses import dataclass

from shardopt.core.fields import Name, Rank, Size
from shardopt.core.validation import STRICT

Ranks = Annotated[tuple[Rank, ...], Field(min_length=1, max_length=2**16)]
Tables = Annotated[tuple[Name, ...], Field(min_length=1, max_length=100_000)]
Group = Annotated[tuple[Name, ...], Field(min_length=2, max_length=100_000)]
# A slower rank (an older or throttled GPU): its lookups take 1/speed as long. No rank is faster
# than the profile: the lower bound assumes none is.
Speed = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]


@dataclass(frozen=True, config=STRICT)
class RankSpec:
    """Ranks that differ from the topology's: their HBM, the bytes they hold back, their speed."""

    ranks: Ranks
    hbm_cap: Optional[Size] = None
    reserved: Size = 0
    speed: Speed = 1.0


@dataclass(frozen=True, config=STRICT)
class Pin:
    """Every shard of ``tables`` on ``ranks`` (or on the ranks of ``hosts``)."""

    kind: Literal["pin"]
    tables: Tables
    ranks: Optional[Ranks] = None
    hosts: Optional[Ranks] = None

    def __post_init__(self) -> None:
        if (self.ranks is None) == (self.hosts is None):
            raise ValueError("a pin names ranks or hosts (one of the two)")

    def describe(self) -> str:
        where = f"rank{'s' if len(self.ranks) > 1 else ''} {listed(self.ranks)}" if self.ranks is not None \
            else f"host{'s' if len(self.hosts) > 1 else ''} {listed(self.hosts)}"
        return f"pin of {listed(self.tables)} to {where}"


@dataclass(frozen=True, config=STRICT)
class Colocate:
    """``tables`` on the same ranks: every rank that holds a shard of one holds a shard of each."""

    kind: Literal["colocate"]
    tables: Group

    def describe(self) -> str:
        return f"colocation of {listed(self.tables)}"


@dataclass(frozen=True, config=STRICT)
class Apart:
    """No rank holds shards of two of ``tables``."""

    kind: Literal["apart"]
    tables: Group

    def describe(self) -> str:
        return f"keeping {listed(self.tables)} apart"


Rule = Annotated[Union[Pin, Colocate, Apart], Field(discriminator="kind")]


def listed(items) -> str:
    items = [str(i) for i in items]
    return ", ".join(items) if len(items) <= 4 else f"{', '.join(items[:3])} and {len(items) - 3} more"


def placement_errors(rules: tuple, specs: Optional[tuple], world: int, hosts: int,
                     tables: dict[str, int]) -> list[tuple[str, str]]:
    """(path, reason) for rules and rank entries that name what the workload lacks: a table, a
    rank, a host; a rank given twice; reserved bytes that leave nothing. Contradictions between
    rules are not errors here: the planner explains them (exit 3)."""
    errors: list[tuple[str, str]] = []
    seen: dict[int, int] = {}
    for i, spec in enumerate(specs or ()):
        for rank in spec.ranks:
            if rank >= world:
                errors.append((f"topology.ranks[{i}].ranks", f"rank {rank} is not below world_size {world}"))
            elif rank in seen:
                errors.append((f"topology.ranks[{i}].ranks", f"rank {rank} is also in topology.ranks[{seen[rank]}]"))
            seen.setdefault(rank, i)
    for i, rule in enumerate(rules):
        where = f"placement[{i}]"
        for name in rule.tables:
            if name not in tables:
                errors.append((f"{where}.tables", f"no table {name!r} in the workload"))
        if len(set(rule.tables)) != len(rule.tables):
            errors.append((f"{where}.tables", "lists a table twice"))
        if isinstance(rule, Pin):
            field, limit, what = ("ranks", world, "world_size {}") if rule.ranks is not None \
                else ("hosts", hosts, "the topology's {} hosts")
            for value in getattr(rule, field):
                if value >= limit:
                    errors.append((f"{where}.{field}", f"{field[:-1]} {value} is not below {what.format(limit)}"))
    return errors
