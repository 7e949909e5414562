"""Data-parallel replicas run TorchRec's dense kernel: a dense TBE whose gradient covers the whole
table, then Adagrad over every row; FBGEMM's and the torch twin compute the same, step after step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from shardopt.profile.dense import FbgemmDenseKernel, TorchDenseKernel
from shardopt.profile.kernels import EPS, LEARNING_RATE, KernelSpec, build_kernel, fbgemm_available

needs_fbgemm = pytest.mark.skipif(not fbgemm_available(), reason="needs fbgemm_gpu")


def _inputs(specs, batch, rng):
    ids, offsets = [], [0]
    for spec in specs:
        for _ in range(batch):
            ids.extend(rng.integers(0, spec.rows, size=int(rng.integers(0, 6))))
            offsets.append(len(ids))
    return torch.tensor(ids, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


def test_the_torch_twin_pools_each_table_and_steps_adagrad_on_every_row():
    specs = [KernelSpec(7, 4), KernelSpec(5, 8)]
    kernel = build_kernel("torch-tbe", specs, dense=True)
    assert isinstance(kernel, TorchDenseKernel) and kernel.backend == "torch-tbe"
    before = kernel.weights()
    ids, offsets = _inputs(specs, 3, np.random.default_rng(0))
    out = kernel.forward(kernel.prepare(ids, offsets))
    assert out.shape == (3, 12)
    for t, (w, cols) in enumerate(zip(before, (slice(0, 4), slice(4, 12)))):
        for b in range(3):
            lo, hi = offsets[t * 3 + b], offsets[t * 3 + b + 1]
            assert torch.allclose(out[b, cols], w[ids[lo:hi]].sum(dim=0), atol=1e-6)
    grad = torch.ones_like(out)
    kernel.backward(out, grad)
    # One Adagrad step from zero state: w -= lr * g / (|g| + eps), on every row (untouched rows: g = 0)
    counts = torch.zeros(7).index_add_(0, ids[:int(offsets[3])], torch.ones(int(offsets[3])))
    g = counts[:, None].expand(7, 4)
    assert torch.allclose(kernel.weights()[0], before[0] - LEARNING_RATE * g / (g.abs() + EPS), atol=1e-6)
    assert all(w.grad is None for w in kernel.weight)  # the gradient is spent, as zero_grad leaves it


@needs_fbgemm
@settings(max_examples=15, deadline=None)
@given(dims=st.lists(st.sampled_from([4, 8, 16]), min_size=1, max_size=3), seed=st.integers(0, 2**16),
       batch=st.integers(1, 6))
def test_fbgemm_dense_and_the_torch_twin_agree_step_after_step(dims, seed, batch):
    rng = np.random.default_rng(seed)
    specs = [KernelSpec(int(rng.integers(1, 40)), d) for d in dims]
    fb = build_kernel("fbgemm", specs, dense=True)
    tt = build_kernel("torch-tbe", specs, dense=True)
    assert isinstance(fb, FbgemmDenseKernel)
    tt.set_weights(fb.module.split_embedding_weights())
    for _ in range(3):
        ids, offsets = _inputs(specs, batch, rng)
        a, b = fb.forward(fb.prepare(ids, offsets)), tt.forward(tt.prepare(ids, offsets))
        assert torch.allclose(a, b, atol=1e-5)
        grad = torch.from_numpy(rng.normal(size=tuple(a.shape))).float()
        fb.backward(a, grad)
        tt.backward(b, grad)
    for x, y in zip(fb.module.split_embedding_weights(), tt.weights()):
        assert torch.allclose(x, y, atol=1e-5)


@needs_fbgemm
def test_fbgemms_dense_backward_says_nothing_to_the_user(recwarn):
    """Its CPU op warns that torch finds no autograd kernel under the key it looks for; the
    gradient is right all the same (above), so replay and calibrate print no such line."""
    specs = [KernelSpec(20, 8)]
    kernel = build_kernel("fbgemm", specs, dense=True)
    ids, offsets = _inputs(specs, 4, np.random.default_rng(1))
    out = kernel.forward(kernel.prepare(ids, offsets))
    kernel.backward(out, torch.ones_like(out))
    assert not [w for w in recwarn if "autograd kernel" in str(w.message)]
