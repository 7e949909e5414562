"""Re-sharding: bytes moved between two plans, the migration manifest and its check, and the
budgeted replan (search/replan.py, planner/replan.py)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from shardopt.arithmetic.checks import check_plan, layout_problems
from shardopt.arithmetic.migration import check_moves, migration
from shardopt.arithmetic.movement import OldLayout, forced_bytes, moved_bytes, relabelling
from shardopt.contracts import PlanConfig
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.plan import Shard
from shardopt.core.workload import workload_from_dict
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.planner.pipeline import plan_workload
from shardopt.planner.replan import move_frontier, replan_with
from shardopt.search.sampler import PlanSampler

QUICK = PlanConfig(time_limit_s=0.5, cost_model="analytic-v0")


def workload(world: int, local: int | None = None, rows=(3000, 2000, 5000, 800, 1200, 4000),
             dims=(16, 32, 64, 16, 32, 64), cap: str = "4MB", optimizer: str = "rowwise_adagrad"):
    tables = [{"name": f"t{i}", "num_embeddings": r, "embedding_dim": d, "pooling_factor": 2.0 + i}
              for i, (r, d) in enumerate(zip(rows, dims)) if r]
    return workload_from_dict({
        "version": 1, "name": "rs", "batch_size": 128, "optimizer": optimizer,
        "topology": {"world_size": world, "local_world_size": local or world, "compute_device": "cpu",
                     "hbm_cap": cap},
        "tables": tables,
    })


def sampled(wl, seed: int):
    return plan_workload(wl, cost_model=AnalyticCostModel(), search=PlanSampler(seed=seed))


def test_a_plan_and_its_relabelled_copy_move_nothing():
    wl = workload(4)
    old = sampled(wl, 1)
    flipped = tuple(dataclasses.replace(tp, shards=tuple(dataclasses.replace(s, rank=3 - s.rank) for s in tp.shards))
                    for tp in old.tables)
    layout = OldLayout.of(old)
    old_of = relabelling(wl, layout, flipped)
    assert old_of == {0: 3, 1: 2, 2: 1, 3: 0}
    assert moved_bytes(wl, layout, flipped, old_of) == 0
    assert moved_bytes(wl, layout, flipped, {r: r for r in range(4)}) > 0


def tw_plan(wl, ranks):
    """Every table whole, table i on ranks[i]."""
    from shardopt.core.plan import PLAN_FORMAT, PLAN_VERSION, Plan, TablePlan, WorkloadRef

    return Plan(format=PLAN_FORMAT, version=PLAN_VERSION, workload=WorkloadRef(name=wl.name),
                world_size=wl.topology.world_size, tables=tuple(
                    TablePlan(name=t.name, sharding_type="table_wise",
                              shards=(Shard(rank=r, offsets=(0, 0), sizes=(t.num_embeddings, t.embedding_dim)),))
                    for t, r in zip(wl.tables, ranks)))


def test_grown_rows_and_new_tables_are_initialised_not_moved():
    old_wl = workload(2)
    new_wl = workload(2, rows=(6000, 2000, 5000, 800, 1200, 4000, 900), dims=(16, 32, 64, 16, 32, 64, 8))
    old, new = tw_plan(old_wl, [0, 1, 0, 1, 0, 1]), tw_plan(new_wl, [0, 1, 0, 1, 0, 1, 0])
    layout = OldLayout.of(old)
    manifest = migration(new_wl, layout, new.tables, {0: 0, 1: 1})
    assert manifest["moved_bytes"] == 0 == moved_bytes(new_wl, layout, new.tables, {0: 0, 1: 1})
    fresh = {(m["table"], tuple(m["rows"])) for m in manifest["initialised"]}
    assert fresh == {("t0", (3000, 6000)), ("t6", (0, 900))}
    assert check_moves(new_wl, old, new, manifest) == []
    # Swapping the ranks of t1 moves exactly its bytes, from rank 1 to rank 0.
    swapped = tw_plan(new_wl, [0, 0, 0, 1, 0, 1, 0])
    moves = migration(new_wl, layout, swapped.tables, {0: 0, 1: 1})["moves"]
    assert [(m["table"], m["from_rank"], m["to_rank"], m["bytes"]) for m in moves] == [
        ("t1", 1, 0, 2000 * (32 * 4 + 4))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old_world=st.sampled_from([2, 3, 4]), new_world=st.sampled_from([2, 3, 4, 6]),
       seeds=st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)),
       grow=st.booleans(), drop=st.booleans())
def test_the_manifest_rebuilds_any_new_plan_from_any_old_one(old_world, new_world, seeds, grow, drop):
    old_wl = workload(old_world)
    rows = [3000, 2000, 5000, 800, 1200, 4000]
    if grow:
        rows[2] = 7000
    if drop:
        rows[4] = 0
    new_wl = workload(new_world, rows=rows)
    try:
        old, new = sampled(old_wl, seeds[0]), sampled(new_wl, seeds[1])
    except ShardoptError:
        return  # no random plan fit
    layout = OldLayout.of(old)
    keep = None if new_world >= old_world else list(range(new_world))
    old_of = relabelling(new_wl, layout, new.tables, keep)
    manifest = migration(new_wl, layout, new.tables, old_of)
    assert check_moves(new_wl, old, new, manifest) == []
    assert manifest["moved_bytes"] == moved_bytes(new_wl, layout, new.tables, old_of)
    assert manifest["moved_bytes"] >= forced_bytes(new_wl, layout, list(old_of.values()))
    if manifest["moves"]:
        broken = dict(manifest, moves=manifest["moves"][1:])
        assert check_moves(new_wl, old, new, broken)  # a lost move leaves a hole
        wrong = dict(manifest, moves=[dict(manifest["moves"][0], from_rank=old_world + 5)] + manifest["moves"][1:])
        assert check_moves(new_wl, old, new, wrong)  # a rank that never held it


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old_world=st.sampled_from([2, 3, 4]), new_world=st.sampled_from([2, 3, 4, 6]),
       seeds=st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), grow=st.booleans(),
       dims=st.sampled_from([(16, 32, 64, 16, 32, 64), (16, 32, 64, 16, 32, 32)]),
       optimizer=st.sampled_from(["sgd", "rowwise_adagrad", "adagrad", "adam"]))
def test_the_bytes_each_new_rank_keeps_as_each_old_one_are_its_pieces_overlaps_summed(
        old_world, new_world, seeds, grow, dims, optimizer):
    """The relabelling's matrix, overlapped as arrays, is the sum over every pair of pieces of
    their overlap's bytes (a grown table keeps its old rows; one of another width keeps nothing)."""
    from shardopt.arithmetic.movement import overlap, rect_bytes, rects_of, retained_matrix

    old_wl = workload(old_world, optimizer=optimizer)
    new_wl = workload(new_world, rows=(3000, 2000, 7000 if grow else 5000, 800, 1200, 4000), dims=dims,
                      optimizer=optimizer)
    try:
        old, new = sampled(old_wl, seeds[0]), sampled(new_wl, seeds[1])
    except ShardoptError:
        return  # no random plan fit
    layout = OldLayout.of(old)
    expected = [[0] * new_world for _ in range(old_world)]
    for tp in new.tables:
        table = new_wl.table(tp.name)
        if table.embedding_dim != old_wl.table(tp.name).embedding_dim:
            continue
        for rank, rect in rects_of(tp):
            for src, held in layout.pieces[tp.name].items():
                expected[src][rank] += sum(rect_bytes(new_wl, table, overlap(rect, h)) for h in held)
    assert retained_matrix(new_wl, layout, new.tables).tolist() == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=st.sampled_from([2, 3, 4, 6]), seed=st.integers(0, 10_000),
       rect=st.tuples(st.integers(0, 5000), st.integers(0, 64), st.integers(1, 5000), st.integers(1, 64)))
def test_the_old_pieces_a_piece_overlaps_are_every_one_it_overlaps_by_rank(world, seed, rect):
    """The re-shard's index of old pieces finds what a scan of them all finds, in rank order; and
    a rank that held none of a table receives all of a piece, as a rank new to the world does."""
    from shardopt.arithmetic.movement import overlap, piece_move_bytes

    wl = workload(world)
    try:
        old = sampled(wl, seed)
    except ShardoptError:
        return  # no random plan fit
    layout = OldLayout.of(old)
    for tp in old.tables:
        held = layout.pieces[tp.name]
        scan = [(src, h) for src in sorted(held) for h in held[src] if overlap(rect, h)]
        assert layout.overlapping(tp.name, rect) == scan
        table = wl.table(tp.name)
        for rank in range(world):
            if rank not in held:
                assert piece_move_bytes(wl, layout, table, rect, rank) == piece_move_bytes(wl, layout, table, rect, None)


@pytest.mark.parametrize("old_world, new_world, local", [(4, 6, 6), (4, 8, 4), (8, 4, 4)])
def test_a_budget_is_honoured_and_more_bytes_never_buy_a_longer_step(old_world, new_world, local):
    old_wl, new_wl = workload(old_world, min(old_world, local), cap="2MB"), workload(new_world, local, cap="2MB")
    old = plan_workload(old_wl, cost_model=AnalyticCostModel(), search=PlanSampler(seed=3))
    points = move_frontier(old, new_wl, QUICK)
    assert points
    for p in points:
        assert p.moved_bytes <= p.budget_bytes
        assert p.moved_bytes >= p.forced_bytes
        assert check_plan(new_wl, p.plan).valid
    steps = [p.step_ms() for p in points]
    assert all(b <= a + 1e-9 for a, b in zip(steps, steps[1:])), steps


def test_a_replan_too_large_for_cp_sat_keeps_its_best_start_within_the_budget(monkeypatch):
    """Past MAX_PLACEMENTS the budgeted search builds no CP-SAT model (5000 tables over 4088 ranks
    grew one to 24 GB and was killed): its starts, each spent down to the budget, are the plans."""
    import shardopt.search.replan as search_replan

    old = sampled(workload(4), 5)
    solved = replan_with(old, workload(6), QUICK, max_move=200_000)
    monkeypatch.setattr(search_replan, "MAX_PLACEMENTS", 10)
    monkeypatch.setattr(search_replan, "IlpModel", lambda *a, **k: pytest.fail("a CP-SAT model was built"))
    started = replan_with(old, workload(6), QUICK, max_move=200_000)
    assert started.plan.predicted.search.status == "SKIPPED (over 10 placements) (a start kept)"
    assert started.plan.predicted.search.variables > 10
    assert started.moved_bytes <= 200_000 and check_plan(workload(6), started.plan).valid
    assert started.step_ms() >= solved.step_ms() - 1e-9  # CP-SAT only ever adds to the starts


def test_the_same_input_gives_the_same_replan():
    old = sampled(workload(4), 5)
    a = replan_with(old, workload(6), QUICK, max_move=200_000)
    b = replan_with(old, workload(6), QUICK, max_move=200_000)
    assert a.plan.tables == b.plan.tables and a.moved_bytes == b.moved_bytes


def test_a_budget_below_what_a_shrink_forces_is_refused_with_the_figure():
    old = sampled(workload(4), 6)
    wl = workload(2, cap="8MB")
    layout = OldLayout.of(old)
    with pytest.raises(ShardoptError) as exc:
        replan_with(old, wl, QUICK, max_move=0)
    assert exc.value.kind is ErrorKind.INPUT and "--max-move 0 B: the change forces" in str(exc.value)
    done = replan_with(old, wl, QUICK)
    assert 0 < done.forced_bytes <= done.moved_bytes <= moved_bytes(wl, layout, done.plan.tables, {})


def test_an_impossible_new_workload_is_infeasible():
    old = sampled(workload(4), 7)
    with pytest.raises(ShardoptError) as exc:
        replan_with(old, workload(2, cap="1MB"), QUICK)
    assert exc.value.kind is ErrorKind.INFEASIBLE


def test_a_broken_old_plan_is_named():
    old = sampled(workload(2), 8)
    tp = old.tables[0]
    bad = dataclasses.replace(old, tables=(dataclasses.replace(tp, shards=tp.shards + tp.shards),) + old.tables[1:])
    assert "tables[0] (t0)" in layout_problems(bad)[0]
    assert layout_problems(old) == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), new_world=st.sampled_from([3, 4, 6]), share=st.floats(0.0, 1.0))
def test_the_descent_spends_no_more_than_its_budget_and_never_lengthens_the_step(seed, new_world, share):
    from shardopt.arithmetic.movement import piece_move_bytes, rank_move_bytes
    from shardopt.contracts import CRITICAL_PATH
    from shardopt.search.descent import budget_descent

    old_wl, new_wl = workload(2), workload(new_world)
    old = sampled(old_wl, seed)
    layout = OldLayout.of(old)
    old_of = {0: 0, 1: 1}
    start = tuple(old.tables)  # the old plan as it stands on the first two ranks of the new world
    model = AnalyticCostModel()

    def shard_bytes(name, shard):
        return rank_move_bytes(new_wl, layout, new_wl.table(name), (*shard.offsets, *shard.sizes), {0: 0, 1: 1})

    total = sum(piece_move_bytes(new_wl, layout, t, (0, 0, t.num_embeddings, t.embedding_dim), None)
                for t in new_wl.tables)
    budget = int(share * total)
    moved = budget_descent(new_wl, model, start, CRITICAL_PATH, shard_bytes, budget)
    assert moved_bytes(new_wl, layout, moved, old_of) <= budget
    assert check_plan(new_wl, dataclasses.replace(old, world_size=new_world, tables=moved)).valid

    def additive(tables):
        import numpy as np
        from shardopt.contracts import ShardSpec, rank_phases

        load = np.zeros((new_world, 4))
        for tp in tables:
            for s in tp.shards:
                load[s.rank] += rank_phases(model.shard_cost(new_wl, ShardSpec(
                    new_wl.table(tp.name), tp.sharding_type, s.sizes[0], s.sizes[1], tp.compute_kernel,
                    tp.cache_load_factor)))
        return load.max(axis=0).sum()

    assert additive(moved) <= additive(start) + 1e-9


def test_the_descent_fills_new_ranks_with_the_most_step_per_byte():
    from shardopt.arithmetic.movement import rank_move_bytes
    from shardopt.contracts import CRITICAL_PATH, Breakdown
    from shardopt.search.descent import budget_descent

    old_wl, new_wl = workload(2), workload(4)
    old = tw_plan(old_wl, [0, 1, 0, 1, 0, 1])
    layout = OldLayout.of(old)

    def shard_bytes(name, shard):
        return rank_move_bytes(new_wl, layout, new_wl.table(name), (*shard.offsets, *shard.sizes), {0: 0, 1: 1})

    model = AnalyticCostModel()
    step = lambda tables: Breakdown.of(model.breakdown(new_wl, tables)).step_ms  # noqa: E731
    none = budget_descent(new_wl, model, old.tables, CRITICAL_PATH, shard_bytes, 0)
    some = budget_descent(new_wl, model, old.tables, CRITICAL_PATH, shard_bytes, 10**9)
    assert none == old.tables  # nothing is free to move
    assert {s.rank for tp in some for s in tp.shards} == {0, 1, 2, 3}
    assert step(some) < step(old.tables)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old_world=st.sampled_from([2, 3, 4]), new_world=st.sampled_from([2, 3, 4, 6]),
       seeds=st.tuples(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000)),
       grow=st.booleans(), lost=st.booleans(),
       optimizer=st.sampled_from(["sgd", "rowwise_adagrad", "adam"]))
def test_a_pieces_bytes_on_every_rank_at_once_are_its_bytes_rank_by_rank(
        old_world, new_world, seeds, grow, lost, optimizer):
    """The descent's vector of a piece's bytes per new rank is, rank by rank, what arrives for it
    there: under any relabelling of the survivors (a lost rank sends nothing), grown rows too."""
    import numpy as np

    from shardopt.arithmetic.movement import piece_move_bytes, rank_move_bytes, rects_of

    old_wl = workload(old_world, optimizer=optimizer)
    new_wl = workload(new_world, rows=(3000, 2000, 7000 if grow else 5000, 800, 1200, 4000), optimizer=optimizer)
    try:
        old, new = sampled(old_wl, seeds[0]), sampled(new_wl, seeds[1])
    except ShardoptError:
        return  # no random plan fit
    rng = np.random.default_rng(seeds[2])
    dead = {int(rng.integers(old_world))} if lost else set()
    survivors = [int(r) for r in rng.permutation(old_world) if r not in dead][:new_world]
    new_ranks = rng.permutation(new_world)[:len(survivors)]
    old_of = {int(n): o for n, o in zip(new_ranks, survivors)}
    layout = OldLayout.of(old, lost=dead)
    for tp in new.tables:
        table = new_wl.table(tp.name)
        for _, rect in rects_of(tp):
            each = [piece_move_bytes(new_wl, layout, table, rect, old_of.get(r)) for r in range(new_world)]
            assert rank_move_bytes(new_wl, layout, table, rect, {o: n for n, o in old_of.items()}).tolist() == each


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boxes=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(1, 20), st.integers(1, 20)),
                      max_size=12))
def test_pieces_are_disjoint_exactly_when_no_two_overlap(boxes):
    import numpy as np

    from shardopt.arithmetic.movement import disjoint, overlap

    pairs = any(overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert disjoint(np.array(boxes, dtype=np.int64).reshape(-1, 4)) is not pairs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old_world=st.sampled_from([3, 4, 6]), new_world=st.sampled_from([2, 3, 4, 6]),
       seeds=st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), lost=st.sets(st.integers(0, 5), max_size=2))
def test_a_tiled_tables_quick_arrivals_are_the_general_ones(old_world, new_world, seeds, lost):
    """Where no two old pieces of a table overlap, each overlapping piece sends its overlap: the
    same parts, from the same ranks, in the same order (and the checkpoint's) as the general walk."""
    from shardopt.arithmetic.movement import arrivals, piece_moves, rects_of

    old_wl, new_wl = workload(old_world), workload(new_world)
    try:
        old, new = sampled(old_wl, seeds[0]), sampled(new_wl, seeds[1])
    except ShardoptError:
        return  # no random plan fit
    lost = frozenset(r for r in lost if r < old_world)
    quick, general = OldLayout.of(old, lost), OldLayout.of(old, lost)
    object.__setattr__(general, "tiled", lambda name: False)  # the general walk for every table
    alive = [r for r in range(old_world) if r not in lost]
    for tp in new.tables:
        table = new_wl.table(tp.name)
        for rank, rect in rects_of(tp):
            old_rank = alive[rank] if rank < len(alive) else None
            assert arrivals(quick, table, rect, old_rank) == arrivals(general, table, rect, old_rank)
            assert piece_moves(new_wl, quick, table, rect, old_rank) == piece_moves(new_wl, general, table, rect, old_rank)


def test_the_bytes_moved_are_priced_again_for_another_workload():
    """The piece-move memo belongs to one workload: another optimizer's state changes the bytes."""
    plain, adam = workload(2), workload(2, optimizer="adam")
    old, new = tw_plan(plain, [0, 1, 0, 1, 0, 1]), tw_plan(plain, [1, 0, 1, 0, 1, 0])
    layout = OldLayout.of(old)
    first = moved_bytes(plain, layout, new.tables, {0: 0, 1: 1})
    assert moved_bytes(adam, layout, new.tables, {0: 0, 1: 1}) > first
    assert moved_bytes(plain, layout, new.tables, {0: 0, 1: 1}) == first == moved_bytes(
        plain, OldLayout.of(old), new.tables, {0: 0, 1: 1})
