"""The torch-tbe backend computes what FBGEMM's CPU TBE computes: pooled outputs, updated weights
and row-wise Adagrad state, step after step, whatever the tables and bags."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from shardopt.profile.kernels import KernelSpec, build_kernel, fbgemm_available

needs_fbgemm = pytest.mark.skipif(not fbgemm_available(), reason="needs fbgemm_gpu")


def _inputs(specs, batch, max_bag, rng, hot=False):
    ids, lengths = [], []
    for spec in specs:
        bag = rng.integers(0, max_bag + 1, size=batch)
        lengths.append(bag)
        # hot: a few rows looked up over and over (long runs in the sorted ids)
        high = min(spec.rows, 3) if hot else spec.rows
        ids.append(rng.integers(0, high, size=int(bag.sum())))
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))])
    return torch.from_numpy(np.concatenate(ids)).long(), torch.from_numpy(offsets).long()


def _train(kernel, steps, grads):
    outs = []
    for (indices, offsets), grad in zip(steps, grads):
        out = kernel.forward(kernel.prepare(indices, offsets))
        kernel.backward(out, grad)
        outs.append(out.detach().clone())
    return outs


def _compare(specs, batch, max_bag, seed, hot=False, steps=3):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    fb = build_kernel("fbgemm", specs)
    ours = build_kernel("torch-tbe", specs)
    assert ours.backend == "torch-tbe"
    ours.set_weights(fb.weights())
    inputs = [_inputs(specs, batch, max_bag, rng, hot) for _ in range(steps)]
    grads = [torch.randn(batch, sum(s.dim for s in specs)) for _ in range(steps)]
    for a, b in zip(_train(ours, inputs, grads), _train(fb, inputs, grads)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(ours.weights(), fb.weights()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(ours.momentum_states(), fb.momentum_states()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    return fb


@needs_fbgemm
def test_equal_to_fbgemm_on_mixed_dims_and_repeated_rows():
    specs = [KernelSpec(50, 8), KernelSpec(30, 16), KernelSpec(40, 8), KernelSpec(7, 4)]
    fb = _compare(specs, batch=6, max_bag=5, seed=0, hot=True)
    # the state moved: the test compares an update, not two untouched zeros
    assert any(float(m.abs().sum()) > 0 for m in fb.momentum_states())


@needs_fbgemm
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dims=st.lists(st.sampled_from([4, 8, 12, 16, 32, 64]), min_size=1, max_size=5),
    rows=st.integers(1, 300),
    batch=st.integers(1, 17),
    max_bag=st.integers(0, 12),
    hot=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_equal_to_fbgemm_for_any_tables_and_bags(dims, rows, batch, max_bag, hot, seed):
    specs = [KernelSpec(max(1, rows - 13 * i), d) for i, d in enumerate(dims)]
    _compare(specs, batch, max_bag, seed, hot, steps=2)


def test_updates_only_the_rows_looked_up():
    specs = [KernelSpec(50, 8), KernelSpec(30, 16), KernelSpec(40, 8)]
    kernel = build_kernel("torch-tbe", specs)
    before = kernel.weights()
    rng = np.random.default_rng(3)
    indices, offsets = _inputs(specs, 6, 4, rng)
    _train(kernel, [(indices, offsets)], [torch.ones(6, 32)])
    for t, (a, b) in enumerate(zip(before, kernel.weights())):
        touched = set(indices[offsets[t * 6]: offsets[(t + 1) * 6]].tolist())
        changed = set(torch.nonzero((a != b).any(dim=1)).flatten().tolist())
        assert changed == touched


def test_auto_picks_torch_tbe_without_fbgemm(monkeypatch):
    from shardopt.profile import kernels

    monkeypatch.setattr(kernels, "fbgemm_available", lambda: False)
    assert kernels.resolve_backend("auto") == "torch-tbe"
    with pytest.raises(ValueError, match="device memory only"):
        build_kernel("torch-tbe", [KernelSpec(4, 4)], location="uvm")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_trains_as_cpu():
    specs = [KernelSpec(50, 8), KernelSpec(30, 16)]
    torch.manual_seed(0)
    cpu = build_kernel("torch-tbe", specs)
    gpu = build_kernel("torch-tbe", specs, device="cuda")
    gpu.set_weights([w.cuda() for w in cpu.weights()])
    rng = np.random.default_rng(0)
    indices, offsets = _inputs(specs, 6, 4, rng, hot=True)
    grad = torch.randn(6, 24)
    out_cpu = _train(cpu, [(indices, offsets)], [grad])[0]
    out_gpu = _train(gpu, [(indices.cuda(), offsets.cuda())], [grad.cuda()])[0]
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, rtol=1e-5, atol=1e-6)
    for a, b in zip(gpu.weights(), cpu.weights()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
