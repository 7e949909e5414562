"""The data-parallel kernel TorchRec runs: a dense TBE and a dense optimizer over whole tables.

TorchRec gives a ``data_parallel`` table the ``dense`` compute kernel (``BatchedDenseEmbeddingBag``:
FBGEMM's ``DenseTableBatchedEmbeddingBagsCodegen``). Its backward makes a gradient as large as
the table, which DDP all-reduces, and the step is the dense optimizer's over every row: no sort of
the ids, no fused update of the rows looked up. Replaying a replica with the fused kernel instead
priced that other algorithm: on one 2-core CPU a 15611 x 16 table pooled 276 times took 7.6 ms
fused at a rank's batch of 256, 1.3-1.7 ms dense with its optimizer; a 36918 x 256 one 6.4 ms
fused, 30-85 ms dense (the whole table's optimizer step).

The optimizer is Adagrad (the fused kernel's row-wise Adagrad, for every element): the replicas'
step as a TorchRec job with an Adagrad dense optimizer takes it. ``fbgemm`` runs FBGEMM's dense
TBE; the torch backends run ``embedding_bag`` with a dense gradient, the same algorithm.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import torch

from shardopt.profile.tbe_torch import TorchTbeKernel


class _DenseStep:
    """A dense module's backward: its gradient, then Adagrad over every row."""

    optimizer: torch.optim.Optimizer

    def backward(self, output, grad):
        with warnings.catch_warnings():
            # FBGEMM's CPU op warns that no autograd kernel is registered under the key torch looks
            # for; its gradient is computed all the same, equal to the torch twin's
            # (tests/profile/test_dense.py): not a line for the user.
            warnings.filterwarnings("ignore", message=r".*dense_embedding_codegen_lookup_function: an autograd kernel")
            output.backward(grad)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class FbgemmDenseKernel(_DenseStep):
    """FBGEMM's DenseTableBatchedEmbeddingBagsCodegen and a dense Adagrad step."""

    backend = "fbgemm"

    def __init__(self, specs: Sequence, precision: str, device: str, *, learning_rate: float, eps: float) -> None:
        from fbgemm_gpu.split_embedding_configs import SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import DenseTableBatchedEmbeddingBagsCodegen

        self.device = torch.device(device)
        self.module = DenseTableBatchedEmbeddingBagsCodegen(
            [(s.rows, s.dim) for s in specs],
            weights_precision={"fp32": SparseType.FP32, "fp16": SparseType.FP16, "bf16": SparseType.BF16}[precision],
            pooling_mode=PoolingMode.SUM,
            use_cpu=not device.startswith("cuda"),
        ).to(self.device)
        self.optimizer = torch.optim.Adagrad(self.module.parameters(), lr=learning_rate, eps=eps)

    def prepare(self, indices, offsets):
        return indices.to(self.device), offsets.to(self.device)

    def forward(self, prepared):
        indices, offsets = prepared
        return self.module(indices, offsets)


class TorchDenseKernel(_DenseStep, TorchTbeKernel):
    """The same in torch: torch-tbe's layout and pooled gather (``embedding_bag``), differentiated
    by autograd into a dense gradient, then Adagrad over every row."""

    def __init__(self, specs: Sequence, precision: str, device: str, *, learning_rate: float, eps: float,
                 dtypes: dict, backend: str) -> None:
        TorchTbeKernel.__init__(self, specs, precision, device, learning_rate=learning_rate, eps=eps, dtypes=dtypes)
        self.backend = backend
        for w in self.weight:
            w.requires_grad_()
        self.optimizer = torch.optim.Adagrad(self.weight, lr=learning_rate, eps=eps)
