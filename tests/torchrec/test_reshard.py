"""A checkpoint saved under one plan loads under a replanned one on another world size, weights
and row-wise Adagrad state equal to an unsharded model that ran the same steps (gloo on CPU)."""

from __future__ import annotations

import pytest

from shardopt.torchrec.reshard_check import STEPS_AFTER, STEPS_BEFORE, TABLES, reference, run_check


@pytest.mark.parametrize("world_a, world_b", [(2, 4), (4, 2)])
def test_a_checkpoint_reshards_to_a_replanned_world(world_a, world_b):
    result = run_check(world_a, world_b)
    ranks_a = {tp.name: tp.shards[0].rank for tp in result["plan_a"].tables}
    ranks_b = {tp.name: tp.shards[0].rank for tp in result["plan_b"].tables}
    assert result["plan_b"].world_size == world_b
    if world_b > world_a:
        assert max(ranks_b.values()) >= world_a  # some table went to a new rank
    else:
        assert max(ranks_a.values()) >= world_b  # some table lived on a dropped rank
    for stage in ("before", "loaded", "stepped"):
        errors = result[stage]
        assert sum(e.tables for e in errors) == len(TABLES), stage  # every table compared once
        assert max(e.weight for e in errors) < 1e-5, stage
        assert max(e.momentum for e in errors) < 1e-5, stage


def test_a_checkpoint_loads_on_the_survivors_of_a_lost_rank():
    """World 4 loses rank 2 after its checkpoint: the replan keeps ranks 0, 1, 3 in their order
    as 0, 1, 2, and the checkpoint loads under it with weights and state equal to the reference."""
    result = run_check(4, 3, lost=(2,))
    assert result["old_of"] == {0: 0, 1: 1, 2: 3}
    on_lost = [tp.name for tp in result["plan_a"].tables if tp.shards[0].rank == 2]
    assert on_lost  # the lost rank held tables, read back from the checkpoint
    for stage in ("before", "loaded", "stepped"):
        errors = result[stage]
        assert sum(e.tables for e in errors) == len(TABLES), stage
        assert max(e.weight for e in errors) < 1e-5 and max(e.momentum for e in errors) < 1e-5, stage


def test_the_reference_moves_with_every_step():
    """The comparison could not pass by accident: one more step changes weights and state."""
    w3, m3 = reference([2] * STEPS_BEFORE)
    w4, m4 = reference([2] * STEPS_BEFORE + [4] * STEPS_AFTER)
    assert max(float((w3[n] - w4[n]).abs().max()) for n in w3) > 1e-3
    assert max(float((m3[n] - m4[n]).abs().max()) for n in m3) > 1e-4
