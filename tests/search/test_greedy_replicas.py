"""The greedy's first cut for a table. A cut with a piece on every rank (a data-parallel replica,
row-wise over the world) fits a rank's share by its piece, but every rank pays it, the slowest
included: it is taken only where nothing cheaper fits (at 1024 ranks two such replicas set
dlrm-large's predicted step at 45 ms where cuts give 22.5; at 4096 ranks, tables row-wise over
the world and replicas set 80 ms where 8-way cuts within a host give 50)."""

from __future__ import annotations

from collections import Counter

from shardopt.contracts import Breakdown
from shardopt.core.workload import workload_from_dict
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import ShardCost
from shardopt.search.candidates import Candidate, Piece
from shardopt.search.greedy import GreedySearch, _initial_choice
from shardopt.search.stacked import fixed_barred


def _cost(ms: float) -> ShardCost:
    return ShardCost(0.0, 0.0, ms, 0.0, 0)


def _share(cuts, world: int) -> tuple:
    """A table's share of a balanced rank: its cheapest cut over every rank (the greedy's)."""
    cheapest = min(sum(c.total_ms for c in cut) for cut in cuts)
    return (None, cheapest / world)


def test_a_replica_on_every_rank_gives_way_to_a_cut_that_costs_the_world_less():
    world = 1024
    tw, dp, cw2 = [_cost(15.0)], [_cost(10.0)] * world, [_cost(7.5)] * 2
    kinds, fixed = ["table_wise", "data_parallel", "column_wise"], [False, True, False]
    share = _share([tw, dp, cw2], world)
    assert _initial_choice([tw, dp, cw2], 12.0, kinds, fixed, share) == 2
    assert _initial_choice([tw, dp, cw2], 20.0, kinds, fixed, share) == 0  # the whole table fits: least split


def test_a_cheap_replica_is_still_taken():
    world = 8
    tw, dp, cw2 = [_cost(15.0)], [_cost(0.01)] * world, [_cost(7.5)] * 2
    kinds, fixed = ["table_wise", "data_parallel", "column_wise"], [False, True, False]
    assert _initial_choice([tw, dp, cw2], 12.0, kinds, fixed, _share([tw, dp, cw2], world)) == 1


def test_where_nothing_fits_a_piece_on_every_rank_counts_on_top_of_a_balanced_ranks_load():
    """No cut fits a balanced rank's 8.5 ms: the world-wide row-wise piece (11.3 ms, the lightest)
    would come on top of every rank's 8.5, while the host cut's 15.3 ms pieces sit on ranks of
    their own; the row-wise piece would win were it on no rank's load but its own."""
    world = 4096
    tw, twrw, rw, dp = [_cost(112.0)], [_cost(15.3)] * 8, [_cost(11.3)] * world, [_cost(22.0)] * world
    kinds = ["table_wise", "table_row_wise", "row_wise", "data_parallel"]
    fixed = [False, False, True, True]
    share = _share([tw, twrw, rw, dp], world)
    assert _initial_choice([tw, twrw, rw, dp], 8.5, kinds, fixed, share) == 1
    assert _initial_choice([tw, twrw, rw, dp], 8.5, kinds, [False] * 4, share) == 2


def test_a_row_wise_cut_over_every_rank_is_taken_where_it_costs_the_world_least():
    """Eight ranks, a table whose lookups dwarf its traffic: row-wise over all is its cheapest cut
    (its pieces differ by a row), so every rank paying a piece is every rank paying its share."""
    world = 8
    tw, rw = [_cost(40.0)], [_cost(5.002)] + [_cost(4.99)] * 7
    share = _share([tw, rw], world)
    assert _initial_choice([tw, rw], 10.0, ["table_wise", "row_wise"], [False, True], share) == 1


def test_only_the_fixed_cuts_a_plan_took_are_barred():
    from shardopt.core.plan import Shard, TablePlan

    whole, row = Piece(0, 0, 8, 4), Piece(0, 0, 2, 4)
    a = [Candidate("a", "table_wise", (whole,), "free"), Candidate("a", "row_wise", (row,) * 4, "fixed")]
    b = [Candidate("b", "table_wise", (whole,), "free"), Candidate("b", "row_wise", (row,) * 4, "fixed")]
    only = [Candidate("c", "data_parallel", (whole,) * 4, "fixed", "dense")]
    candidates = {"a": a, "b": b, "c": only}
    costs = {name: [[_cost(1.0)] * len(c.pieces) for c in cands] for name, cands in candidates.items()}
    plan = (TablePlan(name="a", sharding_type="row_wise", shards=tuple(
                Shard(rank=r, offsets=(2 * r, 0), sizes=(2, 4)) for r in range(4))),
            TablePlan(name="b", sharding_type="table_wise", shards=(Shard(rank=0, offsets=(0, 0), sizes=(8, 4)),)),
            TablePlan(name="c", sharding_type="data_parallel", compute_kernel="dense", shards=tuple(
                Shard(rank=r, offsets=(0, 0), sizes=(8, 4)) for r in range(4))))
    kept, kept_costs = fixed_barred(candidates, costs, plan)
    assert [c.sharding_type for c in kept["a"]] == ["table_wise"] and len(kept_costs["a"]) == 1
    assert kept["b"] == b and kept["c"] == only  # not taken; nothing else allowed
    assert fixed_barred(candidates, costs, plan[1:]) is None


def test_at_a_thousand_ranks_a_hot_table_is_cut_within_a_host_not_over_every_rank():
    """A table pooled 170 times beside sixty others on 1024 ranks: row-wise over every rank its
    piece (the whole table's partial sums, sent by every rank) tops every rank's load; cut 8 ways
    within a host it sits on ranks of its own, and the whole model rates the step shorter."""
    tables = [{"name": "hot", "num_embeddings": 3_700_000, "embedding_dim": 32, "pooling_factor": 170.0}]
    tables += [{"name": f"s{i}", "num_embeddings": 2_000_000 + 1000 * i, "embedding_dim": 64, "pooling_factor": 20.0}
               for i in range(60)]

    def workload(hot_types=None):
        listed = [dict(tables[0], sharding_types=hot_types) if hot_types else tables[0], *tables[1:]]
        return workload_from_dict({"version": 1, "name": "hot", "batch_size": 512, "tables": listed, "topology": {
            "world_size": 1024, "local_world_size": 8, "compute_device": "cuda", "hardware": "h200",
            "hbm_cap": "80GB"}})

    model = AnalyticCostModel()
    result = GreedySearch(repair_s=0).search(workload(), model)
    hot = next(tp for tp in result.tables if tp.name == "hot")
    assert (hot.sharding_type, len(hot.shards)) == ("table_row_wise", 8)
    world_wide = GreedySearch(repair_s=0).search(workload(["row_wise"]), model)
    assert Counter(len(tp.shards) for tp in world_wide.tables if tp.name == "hot") == Counter({1024: 1})
    step = Breakdown.of(model.breakdown(workload(), result.tables)).step_ms
    assert step < 0.97 * Breakdown.of(model.breakdown(workload(), world_wide.tables)).step_ms
