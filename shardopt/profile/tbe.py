"""Measure one fused embedding kernel: a set of tables on one rank, forward and backward."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from shardopt.lookups import Bags, sample_bags
from shardopt.profile.kernels import KernelSpec, build_kernel
from shardopt.profile.timing import Timing, time_forward_backward
from shardopt.workload import Table


@dataclass(frozen=True)
class KernelMeasurement:
    backend: str
    fwd: Timing
    bwd: Timing
    lookups: int
    unique_rows: tuple[int, ...]


def stack_bags(bags: Sequence[Bags]) -> tuple[torch.Tensor, torch.Tensor]:
    """FBGEMM's layout: all ids, then table-major offsets (every table the same batch)."""
    ids = np.concatenate([b.ids for b in bags]) if bags else np.zeros(0, dtype=np.int64)
    lengths = np.concatenate([b.lengths for b in bags])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(offsets.astype(np.int64))


class PreparedKernel:
    """A fused kernel built once with its inputs, to be timed as often as needed.

    Building the module (and writing its weights) costs more than timing it; a benchmark that
    interleaves many plans' kernels builds each once and times them in turns.
    """

    def __init__(self, specs: Sequence[KernelSpec], bags: Sequence[Bags], *, backend: str, device: str,
                 precision: str, location: str = "hbm") -> None:
        self.kernel = build_kernel(backend, specs, precision=precision, device=device, location=location)
        indices, offsets = stack_bags(bags)
        self.inputs = self.kernel.prepare(indices, offsets)
        batch = len(bags[0].lengths)
        self.grad = torch.ones(batch, sum(s.dim for s in specs), device=torch.device(device))
        self.device = device
        self.lookups = int(sum(len(b.ids) for b in bags))
        self.unique_rows = tuple(int(len(np.unique(b.ids))) for b in bags)

    def time(self, warmup: int, iters: int) -> KernelMeasurement:
        fwd, bwd = time_forward_backward(
            lambda: self.kernel.forward(self.inputs),
            lambda out: self.kernel.backward(out, self.grad),
            device=self.device,
            warmup=warmup,
            iters=iters,
        )
        return KernelMeasurement(self.kernel.backend, fwd, bwd, self.lookups, self.unique_rows)


def measure_kernel(
    specs: Sequence[KernelSpec],
    bags: Sequence[Bags],
    *,
    backend: str,
    device: str,
    precision: str,
    location: str = "hbm",
    warmup: int = 2,
    iters: int = 5,
) -> KernelMeasurement:
    """Time one fused kernel over the given bags (one Bags per spec, same batch each)."""
    prepared = PreparedKernel(specs, bags, backend=backend, device=device, precision=precision,
                              location=location)
    return prepared.time(warmup, iters)


def measure_tables(
    tables: Sequence[Table],
    batch: int,
    *,
    backend: str,
    device: str,
    precision: str,
    location: str = "hbm",
    warmup: int = 2,
    iters: int = 5,
    seed: int = 0,
) -> KernelMeasurement:
    """Whole tables fused on one rank, each fed ``batch`` bags from its access distribution."""
    rng = np.random.default_rng(seed)
    bags = [sample_bags(t, batch, rng) for t in tables]
    specs = [KernelSpec(t.num_embeddings, t.embedding_dim) for t in tables]
    return measure_kernel(
        specs, bags, backend=backend, device=device, precision=precision,
        location=location, warmup=warmup, iters=iters,
    )


def timing_dict(timing: Timing) -> dict:
    return dataclasses.asdict(timing)
