"""2D sparse parallelism (TorchRec's ``DMPCollection``): how the world is cut into sharding groups.

The tables are sharded over a group of G ranks; the world of N holds N/G replicas of that group,
each with the same plan, kept in step by an all-reduce of weights and optimizer state every
``sync_every`` steps (``default``) or by a reduce-scatter and all-gather of the weights every step
(``fully_sharded``). Which ranks form a group follows ``DMPCollection._create_process_groups``:
strided ranks (group g is g, g + N/G, g + 2N/G, ...; a rank's replicas are its neighbours, on its
host where they fit) unless ``inter_host_allreduce``, which gives each group a contiguous block.
"""

from __future__ import annotations

from dataclasses import dataclass as plain_dataclass
from typing import Annotated, Literal, Optional, Union

from pydantic import Field, PlainValidator, Strict, StrictBool, WithJsonSchema
from pydantic.dataclasses import dataclass

from shardopt.core.fields import MAX_WORLD
from shardopt.core.validation import STRICT

MAX_SYNC_EVERY = 10**6
Strategy = Literal["default", "fully_sharded"]


def _group_size(value: object) -> Union[int, str]:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_WORLD):
        return value  # type: ignore[return-value]
    raise ValueError(f"must be a number of ranks (1 to {MAX_WORLD}) or 'auto', got {value!r}")


GroupSize = Annotated[Union[int, Literal["auto"]], PlainValidator(_group_size), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_WORLD}, {"const": "auto"}]})]


@dataclass(frozen=True, config=STRICT)
class Parallelism:
    """The workload's ``parallelism`` block: the sharding group's size (``auto``: shardopt chooses
    among the world's divisors), how often replicas sync, and how."""

    sharding_group_size: GroupSize
    sync_every: Annotated[int, Strict(), Field(gt=0, le=MAX_SYNC_EVERY)] = 1
    strategy: Strategy = "default"
    # DMPCollection(use_inter_host_allreduce=...): contiguous groups, replicas across hosts.
    inter_host_allreduce: StrictBool = False

    def __post_init__(self) -> None:
        if self.strategy == "fully_sharded" and self.sync_every != 1:
            raise ValueError(
                "sync_every: fully_sharded syncs the weights every step (reduce-scatter and all-gather);"
                f" leave sync_every out, got {self.sync_every}"
            )

    @property
    def auto(self) -> bool:
        return self.sharding_group_size == "auto"

    @property
    def amortised_over(self) -> int:
        """Steps one sync's time is spread over."""
        return 1 if self.strategy == "fully_sharded" else self.sync_every


@plain_dataclass(frozen=True)
class GroupLayout:
    """Where a world of ``world`` ranks, ``local`` per host, puts groups of ``group`` ranks."""

    world: int
    local: int
    group: int
    inter_host_allreduce: bool = False

    @property
    def replicas(self) -> int:
        return self.world // self.group

    def global_rank(self, group: int, position: int) -> int:
        """The global rank of ``position`` within sharding group ``group``."""
        if self.inter_host_allreduce:
            return group * self.group + position
        return position * self.replicas + group

    def group_ranks(self, group: int) -> list[int]:
        return [self.global_rank(group, p) for p in range(self.group)]

    def replica_ranks(self, position: int) -> list[int]:
        """The ranks that hold ``position``'s shards, one per group: they sync together."""
        return [self.global_rank(g, position) for g in range(self.replicas)]

    def host_of(self, rank: int) -> int:
        return rank // self.local

    @property
    def group_ranks_per_host(self) -> Optional[int]:
        """Ranks of one group on each of its hosts, in order (position p on the group's host
        p // this); None where a group's ranks spread unevenly or out of order over hosts."""
        for g in range(self.replicas):
            hosts = [self.host_of(r) for r in self.group_ranks(g)]
            counts = [hosts.count(h) for h in dict.fromkeys(hosts)]
            if len(set(counts)) != 1 or hosts != sorted(hosts):
                return None
        return counts[0]

    def replica_hosts(self, position: int) -> int:
        """How many hosts a position's replicas span (1: their sync stays on the host)."""
        return len({self.host_of(r) for r in self.replica_ranks(position)})


def layout_error(world: int, local: int, group: int, inter_host_allreduce: bool) -> Optional[str]:
    """Why ``group`` cannot be a sharding group's size here, or None where it can."""
    if group <= 0 or world % group:
        return f"must divide world_size {world}, got {group}"
    layout = GroupLayout(world, local, group, inter_host_allreduce)
    if layout.group_ranks_per_host is None:
        return (
            f"{group}: a group's ranks would spread unevenly over hosts of {local} ranks"
            " (choose a size whose replica count divides, or is a multiple of, local_world_size)"
        )
    return None


def group_sizes(world: int, local: int, inter_host_allreduce: bool = False) -> list[int]:
    """Every size a sharding group may have in this world, smallest first (the world itself: 1D)."""
    return [g for g in range(1, world + 1) if layout_error(world, local, g, inter_host_allreduce) is None]


def group_world(topology, parallelism: Optional[Parallelism], placement, errors: list) -> Optional[tuple[int, int]]:
    """The ranks and hosts a workload's placement rules name: the world's, or one sharding
    group's in a 2D workload (None, with (path, reason) in ``errors``, where the block does not fit)."""
    if parallelism is None:
        return topology.world_size, topology.num_hosts
    if parallelism.auto:
        if any(getattr(rule, "ranks", None) is not None or getattr(rule, "hosts", None) is not None
               for rule in placement):
            errors.append(("parallelism.sharding_group_size",
                           "a pin names ranks or hosts of one sharding group: give the group's size, not auto"))
            return None
        return topology.world_size, topology.num_hosts  # rules without ranks or hosts hold in any group
    size, inter = parallelism.sharding_group_size, parallelism.inter_host_allreduce
    reason = layout_error(topology.world_size, topology.ranks_per_host, size, inter)
    if reason is not None:
        errors.append(("parallelism.sharding_group_size", reason))
        return None
    layout = GroupLayout(topology.world_size, topology.ranks_per_host, size, inter)
    return layout.group, layout.group // layout.group_ranks_per_host
