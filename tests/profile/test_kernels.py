"""The torch-native kernel computes what FBGEMM's TBE computes, optimizer step included."""

import numpy as np
import pytest
import torch

from shardopt.profile.kernels import KernelSpec, build_kernel, fbgemm_available
from shardopt.profile.precision import measured_precision

SPECS = [KernelSpec(50, 8), KernelSpec(30, 16), KernelSpec(40, 8)]


def _inputs(batch=6, seed=0):
    rng = np.random.default_rng(seed)
    ids, lengths = [], []
    for spec in SPECS:
        bag = rng.integers(0, 4, size=batch)
        lengths.append(bag)
        ids.append(rng.integers(0, spec.rows, size=int(bag.sum())))
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))])
    return torch.from_numpy(np.concatenate(ids)).long(), torch.from_numpy(offsets).long()


def _step(kernel, indices, offsets, grad):
    out = kernel.forward(kernel.prepare(indices, offsets))
    kernel.backward(out, grad)
    return out.detach()


@pytest.mark.skipif(not fbgemm_available(), reason="needs fbgemm_gpu")
def test_torch_kernel_matches_fbgemm_forward_and_update():
    torch.manual_seed(0)
    fb = build_kernel("fbgemm", SPECS)
    tk = build_kernel("torch", SPECS)
    tk.set_weights(fb.weights())
    indices, offsets = _inputs()
    grad = torch.randn(6, sum(s.dim for s in SPECS))
    out_fb = _step(fb, indices, offsets, grad)
    out_tk = _step(tk, indices, offsets, grad)
    assert out_fb.shape == (6, 32)
    torch.testing.assert_close(out_tk, out_fb, rtol=1e-5, atol=1e-6)
    for a, b in zip(tk.weights(), fb.weights()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # A second step sees the accumulated momentum: still the same.
    out_fb = _step(fb, indices, offsets, grad)
    out_tk = _step(tk, indices, offsets, grad)
    torch.testing.assert_close(out_tk, out_fb, rtol=1e-5, atol=1e-6)


def test_torch_kernel_updates_only_touched_rows():
    kernel = build_kernel("torch", SPECS)
    before = kernel.weights()
    indices, offsets = _inputs(seed=3)
    _step(kernel, indices, offsets, torch.ones(6, 32))
    after = kernel.weights()
    batch = 6
    for t, (a, b) in enumerate(zip(before, after)):
        touched = set(indices[offsets[t * batch] : offsets[(t + 1) * batch]].tolist())
        changed = set(torch.nonzero((a != b).any(dim=1)).flatten().tolist())
        assert changed == touched


def test_torch_backend_refuses_uvm():
    with pytest.raises(ValueError, match="device memory only"):
        build_kernel("torch", SPECS, location="uvm")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_kernel_trains_on_cuda_as_on_cpu():
    """The torch-native backend (what a GPU without FBGEMM is profiled with) computes the same
    forward output and row-wise Adagrad update on CUDA as on CPU."""
    torch.manual_seed(0)
    cpu = build_kernel("torch", SPECS)
    gpu = build_kernel("torch", SPECS, device="cuda")
    gpu.set_weights([w.cuda() for w in cpu.weights()])
    indices, offsets = _inputs()
    grad = torch.randn(6, sum(s.dim for s in SPECS))
    out_cpu = _step(cpu, indices, offsets, grad)
    out_gpu = _step(gpu, indices.cuda(), offsets.cuda(), grad.cuda())
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, rtol=1e-5, atol=1e-6)
    for a, b in zip(gpu.weights(), cpu.weights()):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)


def test_measured_precision_falls_back_where_fbgemm_cannot_train():
    assert measured_precision("fp32", "cpu") == "fp32"
    assert measured_precision("int8", "cpu") == "fp16"
    assert measured_precision("bf16", "cpu") == "fp16"
    assert measured_precision("bf16", "cuda:0") == "bf16"
