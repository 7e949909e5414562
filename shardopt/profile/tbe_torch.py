"""FBGEMM's training TBE, step by step, in torch: for hosts where FBGEMM cannot be installed.

The lent GPU hosts have torch and Triton but no FBGEMM (its CUDA wheel does not travel there).
The older ``torch`` backend differentiated ``embedding_bag`` with autograd and coalesced the
sparse gradient it made (a sort of every looked-up row's whole gradient), which FBGEMM's
backward never does: timed on an H200, its points could not be fitted (held-out error ~100%).

This one follows what ``SplitTableBatchedEmbeddingBagsCodegen`` with EXACT_ROWWISE_ADAGRAD does:

- forward: tables are rows of one flat weight per embedding dim (FBGEMM keeps one flat buffer
  with per-table offsets); one pooled gather (sum) per dim group;
- backward: sort the looked-up ids (FBGEMM's radix sort of linear indices), find each unique
  row's run, sum the output gradients of the bags in its run (the segment reduction, done as a
  gather over the output gradient, not a materialised per-lookup gradient), then the row-wise
  Adagrad step on the unique rows only: ``m += mean(g^2)``, ``w -= lr / (sqrt(m) + eps) * g``.

tests/profile/test_tbe_torch.py shows it equal to FBGEMM's CPU TBE (outputs, updated weights and
optimizer state); benchmarks/results/tbe_backends.md times both on CPU on the same shards.
"""

from __future__ import annotations

from typing import Sequence

import torch

BACKEND = "torch-tbe"


class TorchTbeKernel:
    """Several tables in one fused kernel, FBGEMM's input layout, fused row-wise Adagrad."""

    backend = BACKEND

    def __init__(self, specs: Sequence, precision: str, device: str, *, learning_rate: float,
                 eps: float, dtypes: dict) -> None:
        self.device = torch.device(device)
        self.specs = list(specs)
        self.learning_rate, self.eps = learning_rate, eps
        dtype = dtypes[precision]
        self.groups: list[list[int]] = [
            [t for t, s in enumerate(specs) if s.dim == dim] for dim in sorted({s.dim for s in specs})
        ]
        self.row_base: dict[int, int] = {}
        self.group_of: dict[int, int] = {}
        self.weight: list[torch.Tensor] = []
        self.momentum: list[torch.Tensor] = []
        for g, members in enumerate(self.groups):
            base = 0
            for t in members:
                self.row_base[t], self.group_of[t] = base, g
                base += specs[t].rows
            dim = specs[members[0]].dim
            bound = 1.0 / max(1, dim) ** 0.5
            self.weight.append(torch.empty(base, dim, dtype=dtype, device=self.device).uniform_(-bound, bound))
            self.momentum.append(torch.zeros(base, dtype=torch.float32, device=self.device))
        # Output columns in table order, as FBGEMM returns them: each group's columns, and the
        # order that puts the groups' blocks, laid side by side, back in table order.
        start = [0]
        for s in specs:
            start.append(start[-1] + s.dim)
        self.columns = [
            torch.cat([torch.arange(start[t], start[t] + specs[t].dim) for t in members]).to(self.device)
            for members in self.groups
        ]
        self.column_order = torch.argsort(torch.cat(self.columns))

    def prepare(self, indices: torch.Tensor, offsets: torch.Tensor) -> list[tuple]:
        """Per dim group: (ids with row bases, bag offsets, bag of each lookup, tables, batch)."""
        batch = (len(offsets) - 1) // len(self.specs)
        prepared = []
        for members in self.groups:
            ids, lengths = [], []
            for t in members:
                lo, hi = offsets[t * batch], offsets[(t + 1) * batch]
                ids.append(indices[lo:hi] + self.row_base[t])
                lengths.append(offsets[t * batch + 1: (t + 1) * batch + 1] - offsets[t * batch: (t + 1) * batch])
            flat_lengths = torch.cat(lengths)
            bag_offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(flat_lengths, 0)])
            bag_of = torch.repeat_interleave(torch.arange(len(flat_lengths)), flat_lengths)
            prepared.append((torch.cat(ids).to(self.device), bag_offsets.to(self.device),
                             bag_of.to(self.device), len(members), batch))
        self._last = prepared
        return prepared

    def forward(self, prepared) -> torch.Tensor:
        self._last = prepared
        blocks = []
        for w, (ids, offs, _, tables, batch) in zip(self.weight, prepared):
            pooled = torch.nn.functional.embedding_bag(ids, w, offs, mode="sum", include_last_offset=True)
            # [tables * batch, dim], table-major -> [batch, tables * dim]
            blocks.append(pooled.view(tables, batch, -1).transpose(0, 1).reshape(batch, -1))
        out = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=1).index_select(1, self.column_order)
        return out.float()

    @torch.no_grad()
    def backward(self, output: torch.Tensor, grad: torch.Tensor) -> None:
        """The fused backward of the last forward: per unique row, its gradient and its update."""
        for w, m, cols, (ids, _, bag_of, tables, batch) in zip(
            self.weight, self.momentum, self.columns, self._last
        ):
            if ids.numel() == 0:
                continue
            dim = w.shape[1]
            # [batch, tables * dim] -> one gradient row per bag, table-major like the bags
            grad_bags = grad.index_select(1, cols).view(batch, tables, dim).transpose(0, 1).reshape(-1, dim)
            sorted_ids, order = torch.sort(ids, stable=True)
            rows, counts = torch.unique_consecutive(sorted_ids, return_counts=True)
            runs = torch.cat([torch.zeros(1, dtype=torch.int64, device=ids.device), torch.cumsum(counts, 0)])
            # Segment reduction: row r's gradient is the sum of its bags' output gradients.
            g = torch.nn.functional.embedding_bag(
                bag_of[order], grad_bags.float().contiguous(), runs, mode="sum", include_last_offset=True
            )
            m.index_add_(0, rows, torch.linalg.vector_norm(g, dim=1).square_().div_(dim))
            g.mul_((self.learning_rate / (m.index_select(0, rows).sqrt_().add_(self.eps))).unsqueeze(1))
            w.index_add_(0, rows, g.to(w.dtype), alpha=-1)

    # -- state, for tests and replay ----------------------------------------------------------
    def weights(self) -> list[torch.Tensor]:
        return [self._rows(self.weight, t).detach().float().cpu().clone() for t in range(len(self.specs))]

    def momentum_states(self) -> list[torch.Tensor]:
        return [self._rows(self.momentum, t).cpu().clone() for t in range(len(self.specs))]

    @torch.no_grad()
    def set_weights(self, weights: Sequence[torch.Tensor]) -> None:
        for t, src in enumerate(weights):
            self._rows(self.weight, t).copy_(src)

    def _rows(self, buffers: list[torch.Tensor], t: int) -> torch.Tensor:
        base = self.row_base[t]
        return buffers[self.group_of[t]][base: base + self.specs[t].rows]
