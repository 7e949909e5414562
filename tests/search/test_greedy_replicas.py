"""The greedy's first cut for a table: a data-parallel replica fits a rank's share by its piece,
but every rank pays it, so it is not taken where a fitting cut costs the world less (at 1024 ranks
two such replicas set dlrm-large's predicted step at 45 ms where cuts give 22.5)."""

from __future__ import annotations

from shardopt.costmodel.base import ShardCost
from shardopt.search.greedy import _initial_choice


def _cost(ms: float) -> ShardCost:
    return ShardCost(0.0, 0.0, ms, 0.0, 0)


def test_a_replica_on_every_rank_gives_way_to_a_cut_that_costs_the_world_less():
    world = 1024
    tw, dp, cw2 = [_cost(15.0)], [_cost(10.0)] * world, [_cost(7.5)] * 2
    kinds = ["table_wise", "data_parallel", "column_wise"]
    assert _initial_choice([tw, dp, cw2], 12.0, kinds) == 2
    assert _initial_choice([tw, dp, cw2], 20.0, kinds) == 0  # the whole table fits: least split


def test_a_cheap_replica_is_still_taken():
    world = 8
    tw, dp, cw2 = [_cost(15.0)], [_cost(0.01)] * world, [_cost(7.5)] * 2
    assert _initial_choice([tw, dp, cw2], 12.0, ["table_wise", "data_parallel", "column_wise"]) == 1
