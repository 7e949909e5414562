"""torch.profiler traces read into each rank's phases: the CUDA fixture's known values, the names
against the installed FBGEMM, and per-step sums of random CPU-format traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardopt.traces.kineto import (
    DENSE_FORWARD, TBE_BACKWARD, TBE_FORWARD, measured_ranks, read_traces,
)

FIXTURE = Path(__file__).parent / "fixtures" / "cuda"


def test_the_cuda_fixture_yields_its_known_phases():
    traces = read_traces([FIXTURE / "rank0.json.gz", FIXTURE / "rank1.json"])
    expected = json.loads((FIXTURE / "expected.json").read_text())
    assert [t.rank for t in traces] == [0, 1]
    for t in traces:
        assert t.device == "cuda" and t.world_size == 2
        want = expected[str(t.rank)]
        assert [s.number for s in t.steps] == [w["step"] for w in want]
        for step, w in zip(t.steps, want):
            assert step.fwd_compute_ms == pytest.approx(w["fwd_compute_ms"], abs=1e-9)
            assert step.bwd_compute_ms == pytest.approx(w["bwd_compute_ms"], abs=1e-9)  # the sort is not counted
            assert [(c.kind, c.phase) for c in step.collectives] == [(k, p) for k, p, _ in w["collectives"]]
            assert [c.ms for c in step.collectives] == pytest.approx([m for _, _, m in w["collectives"]], abs=1e-9)


def test_transfer_is_each_collectives_fastest_rank_and_warmup_steps_are_dropped():
    traces = read_traces([FIXTURE / "rank0.json.gz", FIXTURE / "rank1.json"])
    expected = json.loads((FIXTURE / "expected.json").read_text())
    ranks = measured_ranks(traces, warmup=1)
    assert [r.steps for r in ranks] == [3, 3]
    for r in ranks:
        kept = expected[str(r.rank)][1:]
        assert r.fwd_compute_ms == pytest.approx(sorted(w["fwd_compute_ms"] for w in kept)[1])
        waited = sorted(sum(m for _, p, m in w["collectives"] if p == "fwd") for w in kept)[1]
        assert r.fwd_comm_ms == pytest.approx(waited)
        assert r.fwd_transfer_ms <= r.fwd_comm_ms + 1e-12
    # rank 1's second all-to-all waits 10 us longer than rank 0's: both transfer at rank 0's
    assert ranks[0].fwd_transfer_ms == pytest.approx(ranks[1].fwd_transfer_ms)
    assert ranks[1].fwd_comm_ms > ranks[1].fwd_transfer_ms


def test_the_cpu_names_are_the_ones_the_installed_fbgemm_registers():
    import fbgemm_gpu  # noqa: F401 - registers the fbgemm:: ops
    import torch

    ops = {f"{name}" for name in torch._C._dispatch_get_all_op_names() if name.startswith("fbgemm::")}
    forward = {n for n in ops if TBE_FORWARD.search(n)}
    backward = {n for n in ops if TBE_BACKWARD.search(n)}
    assert "fbgemm::split_embedding_codegen_forward_cpu" in forward
    assert "fbgemm::split_embedding_backward_codegen_rowwise_adagrad_cpu" in backward
    assert any(DENSE_FORWARD.search(n) for n in ops)
    # no wrapper or lookup function (they hold the leaf op: counting them would count it twice)
    assert not any("wrapper" in n or "lookup" in n for n in forward | backward)


def _cpu_trace(rank: int, world: int, steps: list[tuple[list[float], list[float], list[float], list[float]]]) -> dict:
    """A trace in the layout the CPU runs write: per step (fwd TBE, bwd TBE, fwd a2a, bwd a2a) spans."""
    events, t = [], 1000.0

    def collectives(durations):  # each enqueued on the training thread, run on gloo's
        nonlocal t
        for d in durations:
            events.extend([{"ph": "X", "cat": "cpu_op", "name": "c10d::alltoall_base_", "tid": 1, "ts": t, "dur": 1.0},
                           {"ph": "X", "cat": "user_annotation", "name": "gloo:all_to_all", "tid": 9, "ts": t + 1,
                            "dur": d}])
            t += d + 2

    def ops(name, durations):
        nonlocal t
        for d in durations:
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "tid": 1, "ts": t, "dur": d})
            t += d + 1

    for n, (fwd, bwd, fcomm, bcomm) in enumerate(steps, start=1):
        start = t
        collectives(fcomm)
        ops("fbgemm::split_embedding_codegen_forward_cpu", fwd)
        events.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: SumBackward0",
                       "tid": 1, "ts": t, "dur": 1.0})
        t += 2
        collectives(bcomm)
        ops("fbgemm::split_embedding_backward_codegen_sgd_cpu", bwd)
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "tid": 1, "ts": start,
                       "dur": t - start})
        t += 5
    return {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world}}


durations = st.lists(st.floats(1.0, 5000.0), min_size=1, max_size=4)
step = st.tuples(durations, durations, st.lists(st.floats(1.0, 900.0), max_size=3),
                 st.lists(st.floats(1.0, 900.0), max_size=3))


@settings(max_examples=40, deadline=None)
@given(st.lists(step, min_size=1, max_size=5))
def test_each_steps_phases_are_the_sums_of_its_spans(tmp_path_factory, steps):
    path = tmp_path_factory.mktemp("k") / "rank0.json"
    path.write_text(json.dumps(_cpu_trace(0, 1, steps)))
    (trace,) = read_traces([path])
    assert len(trace.steps) == len(steps)
    for got, (fwd, bwd, fcomm, bcomm) in zip(trace.steps, steps):
        assert got.fwd_compute_ms == pytest.approx(sum(fwd) / 1e3)
        assert got.bwd_compute_ms == pytest.approx(sum(bwd) / 1e3)
        assert got.lookups == len(fwd)
        assert [c.phase for c in got.collectives] == ["fwd"] * len(fcomm) + ["bwd"] * len(bcomm)
        assert [c.ms for c in got.collectives] == pytest.approx([d / 1e3 for d in fcomm + bcomm])


def test_an_all_to_alls_bytes_are_its_rows_for_the_other_ranks():
    from shardopt.traces.kineto import sent_bytes

    def event(dims, kind, splits):
        return {"args": {"Input Dims": [[sum(dims)], dims, [], [], []], "Input type": ["float", kind, "", "", ""],
                         "Concrete Inputs": ["", "", "", "[]", splits]}}

    assert sent_bytes(event([12, 4], "float", "[3, 5, 4]"), rank=1, world=3) == (3 + 4) * 4 * 4
    assert sent_bytes(event([8], "long int", "[]"), rank=0, world=4) == 8 * 8 * 3 / 4  # even split
    assert sent_bytes(event([8], "a struct", "[]"), rank=0, world=4) is None  # an unknown type: no size
    assert sent_bytes({"args": {}}, rank=0, world=2) is None  # traced without record_shapes


def test_one_file_may_hold_every_ranks_trace(tmp_path):
    import gzip

    ranks = [json.loads(gzip.decompress((FIXTURE / "rank0.json.gz").read_bytes())),
             json.loads((FIXTURE / "rank1.json").read_text())]
    both = tmp_path / "job.json.gz"
    both.write_bytes(gzip.compress(json.dumps(ranks).encode()))
    merged, apart = read_traces([both]), read_traces([FIXTURE / "rank0.json.gz", FIXTURE / "rank1.json"])
    assert [t.rank for t in merged] == [0, 1]
    assert [t.steps for t in merged] == [t.steps for t in apart]
