"""Lookup kernels that profiling and replay time: FBGEMM's training TBE and a torch-native twin.

Both hold several tables (or shards) in one fused module, take FBGEMM's input layout (ids and
table-major bag offsets), return pooled embeddings ``[batch, sum of dims]``, and apply
EXACT_ROWWISE_ADAGRAD inside the backward pass, as TorchRec's fused compute kernel does.

Backends: ``fbgemm`` (the real TBE); ``torch-tbe`` (:mod:`shardopt.profile.tbe_torch`, FBGEMM's
algorithm in torch, for hosts without FBGEMM: what ``auto`` picks there); ``torch`` (autograd over
``embedding_bag`` and a coalesced sparse gradient: kept only to read and rerun old profiles, its
backward is not FBGEMM's).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from shardopt.profile.tbe_torch import TorchTbeKernel

LEARNING_RATE = 0.01
EPS = 1e-8
BACKENDS = ("fbgemm", "torch-tbe", "torch")
LOCATIONS = ("hbm", "uvm", "uvm_caching")  # on CPU everything is host memory: "hbm"
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class KernelSpec:
    """One table or shard inside a fused kernel."""

    rows: int
    dim: int


class LookupKernel(Protocol):
    backend: str

    def prepare(self, indices: torch.Tensor, offsets: torch.Tensor) -> object:
        """Inputs in the kernel's own layout, made once, outside any timing."""

    def forward(self, prepared: object) -> torch.Tensor: ...

    def backward(self, output: torch.Tensor, grad: torch.Tensor) -> None:
        """Gradients and the fused optimizer update."""


def fbgemm_available() -> bool:
    return importlib.util.find_spec("fbgemm_gpu") is not None


def resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "fbgemm" if fbgemm_available() else "torch-tbe"
    if backend not in BACKENDS:
        raise RuntimeError(f"unknown backend {backend!r}; one of auto, {', '.join(BACKENDS)}")
    if backend == "fbgemm" and not fbgemm_available():
        raise RuntimeError("backend fbgemm asked for, but fbgemm_gpu is not installed")
    return backend


def build_kernel(
    backend: str,
    specs: Sequence[KernelSpec],
    *,
    precision: str = "fp32",
    device: str = "cpu",
    location: str = "hbm",
    cache_load_factor: float = 0.2,
    dense: bool = False,
) -> LookupKernel:
    """The fused kernel of ``specs``; ``dense``: data-parallel replicas' (:mod:`.dense`)."""
    backend = resolve_backend(backend)
    if location not in LOCATIONS:
        raise ValueError(f"unknown memory location {location!r}")
    if dense:
        from shardopt.profile.dense import FbgemmDenseKernel, TorchDenseKernel

        if backend == "fbgemm":
            return FbgemmDenseKernel(specs, precision, device, learning_rate=LEARNING_RATE, eps=EPS)
        return TorchDenseKernel(specs, precision, device, learning_rate=LEARNING_RATE, eps=EPS,
                                dtypes=PRECISIONS, backend=backend)
    if backend == "fbgemm":
        return FbgemmKernel(specs, precision, device, location, cache_load_factor)
    if location != "hbm":
        raise ValueError(f"the {backend} backend keeps tables in device memory only (location hbm)")
    if backend == "torch-tbe":
        return TorchTbeKernel(specs, precision, device, learning_rate=LEARNING_RATE, eps=EPS, dtypes=PRECISIONS)
    return TorchKernel(specs, precision, device)


class FbgemmKernel:
    """FBGEMM's SplitTableBatchedEmbeddingBagsCodegen with a fused row-wise Adagrad."""

    backend = "fbgemm"

    def __init__(self, specs, precision, device, location, cache_load_factor) -> None:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            EmbeddingLocation,
            PoolingMode,
        )
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        on_cuda = device.startswith("cuda")
        where = {
            "hbm": EmbeddingLocation.DEVICE if on_cuda else EmbeddingLocation.HOST,
            "uvm": EmbeddingLocation.MANAGED,
            "uvm_caching": EmbeddingLocation.MANAGED_CACHING,
        }[location]
        compute = ComputeDevice.CUDA if on_cuda else ComputeDevice.CPU
        self.device = torch.device(device)
        self.module = SplitTableBatchedEmbeddingBagsCodegen(
            [(s.rows, s.dim, where, compute) for s in specs],
            optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
            learning_rate=LEARNING_RATE,
            eps=EPS,
            weights_precision={"fp32": SparseType.FP32, "fp16": SparseType.FP16, "bf16": SparseType.BF16}[precision],
            pooling_mode=PoolingMode.SUM,
            cache_load_factor=cache_load_factor,
            device=self.device,
        )

    def prepare(self, indices, offsets):
        return indices.to(self.device), offsets.to(self.device)

    def forward(self, prepared):
        indices, offsets = prepared
        return self.module(indices, offsets)

    def backward(self, output, grad):
        output.backward(grad)

    def weights(self) -> list[torch.Tensor]:
        return [w.detach().float().cpu().clone() for w in self.module.split_embedding_weights()]

    def set_weights(self, weights: Sequence[torch.Tensor]) -> None:
        for dst, src in zip(self.module.split_embedding_weights(), weights):
            dst.detach().copy_(src)

    def momentum_states(self) -> list[torch.Tensor]:
        """Each table's row-wise Adagrad state (one value per row)."""
        return [states[0].detach().float().cpu().clone().view(-1)
                for states in self.module.split_optimizer_states()]


class TorchKernel(TorchTbeKernel):
    """The older torch twin: torch-tbe's layout and state, but autograd through ``embedding_bag``
    and a coalesced sparse gradient (not FBGEMM's backward); kept to rerun old profiles."""

    backend = "torch"

    def __init__(self, specs: Sequence[KernelSpec], precision: str, device: str) -> None:
        super().__init__(specs, precision, device, learning_rate=LEARNING_RATE, eps=EPS, dtypes=PRECISIONS)
        for w in self.weight:
            w.requires_grad_()

    def forward(self, prepared):
        outs = []
        for w, (ids, offs, _, tables, batch) in zip(self.weight, prepared):
            pooled = torch.nn.functional.embedding_bag(
                ids, w, offs, mode="sum", sparse=True, include_last_offset=True
            )
            outs.append(pooled.view(tables, batch, -1).transpose(0, 1).reshape(batch, -1))
        return torch.cat(outs, dim=1).index_select(1, self.column_order).float()

    def backward(self, output, grad):
        output.backward(grad)
        with torch.no_grad():
            for w, m in zip(self.weight, self.momentum):
                g = w.grad.coalesce()
                rows, values = g.indices()[0], g.values().float()
                m.index_add_(0, rows, values.pow(2).mean(dim=1))
                step = values * (-self.learning_rate / (m.index_select(0, rows).sqrt() + self.eps)).unsqueeze(1)
                w.index_add_(0, rows, step.to(w.dtype))
                w.grad = None
