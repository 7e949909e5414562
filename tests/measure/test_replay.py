"""Replay measures real kernels for every rank and routes each shard the lookups it would get."""

import json
from dataclasses import replace

import numpy as np
import pytest

from conftest import DATA, run_cli
from shardopt.profile.bags import sample_bags
from shardopt.core.plan import Shard, read_plan
from shardopt.arithmetic.traffic import rank_comm_bytes
from shardopt.measure.replay import DeclaredBandwidthComm, ProfiledComm, _rank_bags
from shardopt.core.workload import read_workload


@pytest.fixture(scope="module")
def good():
    workload, _ = read_workload(DATA / "good.yaml")
    return workload, read_plan(DATA / "good_plan.json")


def _recut(plan, index, sharding_type, shards):
    """The plan with table ``index`` cut anew: shards as (rank, row_offset, rows, cols)."""
    tables = list(plan.tables)
    tables[index] = replace(
        tables[index],
        sharding_type=sharding_type,
        shards=tuple(Shard(rank=r, offsets=(o, 0), sizes=(n, c)) for r, o, n, c in shards),
    )
    return replace(plan, tables=tuple(tables))


def _batches(workload):
    return {
        t.name: sample_bags(t, workload.batch_size * 2, np.random.default_rng(i))
        for i, t in enumerate(workload.tables)
    }


def test_row_wise_shards_get_their_rows_only(good):
    workload, plan = good
    plan = _recut(plan, 0, "row_wise", [(0, 0, 12000, 64), (1, 12000, 8000, 64)])
    batches = _batches(workload)
    user = batches["user_id"]
    for rank, (lo, n) in enumerate([(0, 12000), (12000, 8000)]):
        groups = _rank_bags(workload, plan, rank, [batches])
        shard_bags = [b for members in groups.values() for spec, (b,) in members if spec.rows == n]
        assert len(shard_bags) == 1
        bags = shard_bags[0]
        assert bags.ids.max() < n
        expected = np.sum((user.ids >= lo) & (user.ids < lo + n))
        assert len(bags.ids) == expected
        assert len(bags.lengths) == workload.batch_size * 2  # every sample of the global batch


def test_data_parallel_replicas_get_the_local_batch(good):
    workload, plan = good
    plan = _recut(plan, 2, "data_parallel", [(0, 0, 300, 16), (1, 0, 300, 16)])
    batches = _batches(workload)
    groups = _rank_bags(workload, plan, 1, [batches])
    dp = [b for (precision, kind), members in groups.items() if kind == "data_parallel" for _, (b,) in members]
    assert len(dp) == 1 and len(dp[0].lengths) == workload.batch_size
    assert np.array_equal(dp[0].lengths, batches["country"].lengths[workload.batch_size :])


def test_replay_cli_prints_measured_beside_predicted(runner, tmp_path):
    result = run_cli(
        runner, "replay", DATA / "good.yaml", DATA / "good_plan.json", "--iters", "2",
        "--warmup", "1", "--json",
    )
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert len(data["measured"]) == 2 and len(data["predicted"]["per_rank"]) == 2
    for m in data["measured"]:
        assert m["fwd_compute_ms"] > 0 and m["bwd_compute_ms"] > 0
        assert m["total_ms"] == pytest.approx(
            m["fwd_compute_ms"] + m["bwd_compute_ms"] + m["fwd_comm_ms"] + m["bwd_comm_ms"]
        )
    assert "fp16 tables are measured at fp16" not in data["notes"]
    text = run_cli(runner, "replay", DATA / "good.yaml", DATA / "good_plan.json", "--iters", "1")
    assert "replayed bottleneck: rank" in text.stdout and "predicted by analytic-v0" in text.stdout


def test_replay_refuses_a_plan_that_does_not_fit(runner, tmp_path):
    plan = json.loads((DATA / "good_plan.json").read_text())
    plan["tables"].pop()
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan))
    result = run_cli(runner, "replay", DATA / "good.yaml", path)
    assert result.exit_code == 2
    assert "does not fit" in result.stderr and "country" in result.stderr


def test_profiled_comm_interpolates_and_extrapolates(good):
    workload, plan = good
    records = [
        {"world_size": 2, "pattern": p, "message_bytes": s, "timing": {"median_us": us}}
        for p in ("even", "pooled")
        for s, us in ((1000, 100.0), (100_000, 1000.0))
    ]
    comm = ProfiledComm(records, "test")
    assert comm.time_ms(2, "even", 10) == pytest.approx(0.1)  # latency floor
    assert comm.time_ms(2, "even", 10_000) == pytest.approx(np.sqrt(0.1 * 1.0))  # log-log middle
    assert comm.time_ms(2, "even", 200_000) == pytest.approx(2.0)  # bandwidth-bound beyond
    per_rank = comm.rank_comm_ms(workload, plan.tables)
    assert len(per_rank) == 2 and all(f > 0 and b > 0 for f, b in per_rank)
    with pytest.raises(ValueError, match=r"no all-to-all of both patterns \(even, pooled\) measured at world size 2"):
        ProfiledComm([r | {"world_size": 4} for r in records], "t").rank_comm_ms(workload, plan.tables)


def test_declared_comm_matches_the_analytic_prediction(good):
    workload, plan = good
    declared = DeclaredBandwidthComm().rank_comm_ms(workload, plan.tables)
    for (f, b), pred in zip(declared, plan.predicted.per_rank):
        assert f == pytest.approx(pred.fwd_comm_ms, abs=1e-6)  # the plan file keeps 6 decimals
        assert b == pytest.approx(pred.bwd_comm_ms, abs=1e-6)
    assert sum(b.pooled for b in rank_comm_bytes(workload, plan.tables)) > 0


def test_a_kernel_is_fed_a_new_batch_each_iteration(good):
    """Timing one batch over and over caches exactly its rows, which no training step sees."""
    import torch

    from shardopt.profile.tbe import DISTINCT_BATCHES, PreparedKernel
    from shardopt.measure.replay import PlanReplay

    workload, plan = good
    replay = PlanReplay(workload, plan, backend="fbgemm")
    assert len(replay.batches) == DISTINCT_BATCHES
    first = replay.batches[0][workload.tables[0].name].ids
    assert all(not np.array_equal(b[workload.tables[0].name].ids, first) for b in replay.batches[1:])
    kernel = replay.build_rank(0)[0]
    assert len(kernel.inputs) == DISTINCT_BATCHES
    torch.manual_seed(0)
    kernel.kernel.set_weights([torch.randn_like(w) for w in kernel.kernel.weights()])
    outputs = [kernel.kernel.forward(kernel._batch()).detach().clone() for _ in range(DISTINCT_BATCHES + 1)]
    assert not torch.equal(outputs[0], outputs[1])  # another batch, other rows pooled
    assert torch.equal(outputs[0], outputs[DISTINCT_BATCHES])  # the cycle comes round (no update ran)
    with pytest.raises(ValueError, match="one Bags per kernel spec"):
        PreparedKernel([], [[first]], backend="fbgemm", device="cpu", precision="fp32")


def test_an_interrupt_swallowed_where_it_landed_still_stops_the_replay(good, monkeypatch):
    """Python swallows a Ctrl-C raised inside a finalizer; the CLI's handler notes it, and replay
    checks the note after each kernel, so the command stops rather than run its timings out."""
    import shardopt.core.errors as errors
    from shardopt.measure.replay import replay_plan

    workload, plan = good
    calls = []
    monkeypatch.setattr(errors, "_interrupted", True)
    with pytest.raises(KeyboardInterrupt):
        replay_plan(workload, plan, warmup=1, iters=1, progress=calls.append)
    assert calls == []  # stopped within the first rank
    monkeypatch.setattr(errors, "_interrupted", False)
    assert len(replay_plan(workload, plan, warmup=1, iters=1).ranks) == workload.topology.world_size


def test_data_parallel_replicas_replay_torchrecs_dense_kernel_apart_from_the_fused_one(good):
    from shardopt.measure.replay import PlanReplay
    from shardopt.profile.dense import FbgemmDenseKernel, TorchDenseKernel

    workload, plan = good
    plan = _recut(plan, 2, "data_parallel", [(0, 0, 300, 16), (1, 0, 300, 16)])
    kernels = PlanReplay(workload, plan).build_rank(1)
    dense = [k for k in kernels if isinstance(k.kernel, (FbgemmDenseKernel, TorchDenseKernel))]
    assert len(dense) == 1 and len(kernels) >= 2  # the replica alone in its kernel, the shards fused
    assert dense[0].lookups > 0


@pytest.mark.parametrize("rounds_per_build, builds_per_rank", [(1, 3), (2, 2), (3, 1)])
def test_side_by_side_builds_each_ranks_kernels_afresh_every_rounds_per_build(good, monkeypatch,
                                                                             rounds_per_build, builds_per_rank):
    from shardopt.measure.replay import PlanReplay, replay_side_by_side

    workload, plan = good
    built = []
    real = PlanReplay.build_rank
    monkeypatch.setattr(PlanReplay, "build_rank", lambda self, rank: built.append(rank) or real(self, rank))
    result = replay_side_by_side(workload, {"a": plan, "b": plan}, 3, warmup=0, iters=1,
                                 rounds_per_build=rounds_per_build)
    world = workload.topology.world_size
    assert sorted(built) == sorted(list(range(world)) * 2 * builds_per_rank)  # both plans, each rank
    assert len(result.per_rank["a"]) == world and len(result.runs["b"]) == 3


def test_a_ranks_centre_follows_how_often_each_mode_comes_and_drops_a_stall():
    from shardopt.measure.replay import rank_centre

    # A two-mode time (the build decides): the median jumps to whichever mode has the majority,
    # the centre moves with the share of each.
    assert rank_centre([4.0] * 4 + [6.0] * 3) == pytest.approx(4.0 + 2.0 * 2 / 5)
    assert rank_centre([4.0] * 3 + [6.0] * 4) == pytest.approx(4.0 + 2.0 * 3 / 5)
    assert rank_centre([5.0, 5.1, 4.9, 5.0, 50.0]) == pytest.approx(5.0, rel=0.01)  # a stalled round is dropped
    assert rank_centre([3.0]) == 3.0 and rank_centre([2.0, 4.0]) == 3.0


def test_replay_builds_each_rank_as_often_as_asked_and_centres_the_builds(good, monkeypatch):
    from shardopt.measure.replay import PlanReplay, replay_plan

    workload, plan = good
    built, times = [], iter([4.0, 6.0, 4.0] * workload.topology.world_size)
    real_build, real_time = PlanReplay.build_rank, PlanReplay.time_rank
    monkeypatch.setattr(PlanReplay, "build_rank", lambda self, rank: built.append(rank) or real_build(self, rank))

    def timed(self, rank, kernels, warmup, iters):  # each build's forward: 4, 6 or 4 ms
        r = real_time(self, rank, kernels, warmup, iters)
        return self.rank_replay(rank, next(times), r.measured.bwd_compute_ms)

    monkeypatch.setattr(PlanReplay, "time_rank", timed)
    result = replay_plan(workload, plan, warmup=0, iters=1, builds=3)
    assert sorted(built) == sorted(list(range(workload.topology.world_size)) * 3)
    assert all(r.fwd_compute_ms == pytest.approx(14.0 / 3) for r in result.per_rank)


def test_replay_cli_builds_each_rank_as_often_as_builds_says(runner, monkeypatch):
    from shardopt.measure.replay import PlanReplay

    built = []
    real = PlanReplay.build_rank
    monkeypatch.setattr(PlanReplay, "build_rank", lambda self, rank: built.append(rank) or real(self, rank))
    result = run_cli(runner, "replay", DATA / "good.yaml", DATA / "good_plan.json", "--iters", "1",
                     "--warmup", "0", "--builds", "2", "--json")
    assert result.exit_code == 0 and sorted(built) == [0, 0, 1, 1]
    built.clear()
    assert run_cli(runner, "replay", DATA / "good.yaml", DATA / "good_plan.json", "--iters", "1",
                   "--warmup", "0", "--json").exit_code == 0
    assert sorted(built) == [0, 0, 0, 1, 1, 1]  # three builds by default
    bad = run_cli(runner, "replay", DATA / "good.yaml", DATA / "good_plan.json", "--builds", "0")
    assert bad.exit_code == 2 and "--builds" in bad.stderr and "Traceback" not in bad.stderr


def test_a_ranks_kernels_are_timed_as_its_step_runs_them():
    """Every forward in turn, then every backward, in one loop: not each kernel in a loop of its own,
    where it would keep its rows in cache that the rank's other kernels take back in a step."""
    from shardopt.profile.tbe import time_kernels

    calls = []

    class Fake:
        def __init__(self, name):
            self.name, self.device, self.grad = name, "cpu", None
            self.kernel = self

        def _batch(self):
            return None

        def forward(self, _):
            calls.append(("fwd", self.name))
            return self.name

        def backward(self, out, _):
            calls.append(("bwd", out))

    fwd, bwd = time_kernels([Fake("a"), Fake("b")], warmup=1, iters=2)
    assert fwd.runs == 2 and bwd.runs == 2
    assert calls == [("fwd", "a"), ("fwd", "b"), ("bwd", "a"), ("bwd", "b")] * 3
