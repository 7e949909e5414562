"""Measure one fused embedding kernel: a set of tables on one rank, forward and backward."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from shardopt.profile.bags import Bags, sample_bags
from shardopt.profile.kernels import KernelSpec, build_kernel
from shardopt.profile.timing import Timing, time_forward_backward
from shardopt.core.workload import Table

# Training draws a new batch every iteration, so a timing loop feeds a new one every iteration too.
# Fed one batch over and over, the caches see the same rows in the same order each time: LRU keeps
# all of them when they fit and next to none when they do not, which no training step sees (and
# which the cost model's caches, drawn anew each iteration, do not describe). Measured on this
# project's CPU replays (12 tasks, 8 plans each): with one batch, ranks' forward came out 11%
# cheaper, and the model's per-rank error that repeats from one replay to the next (within
# shardopt's plans) was 0.058 against 0.042 (log sd).
# Batches are cycled, so timing loops longer than this reuse one DISTINCT_BATCHES iterations later.
DISTINCT_BATCHES = 8


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
    interleaves many plans' kernels builds each once and times them in turns. ``batches`` holds
    one or more batches, each with one Bags per spec; iterations take them in turn (see
    DISTINCT_BATCHES), carrying on where the last timing left off.
    """

    def __init__(self, specs: Sequence[KernelSpec], batches: Sequence[Sequence[Bags]], *, backend: str,
                 device: str, precision: str, location: str = "hbm", dense: bool = False) -> None:
        if not batches or any(len(bags) != len(specs) for bags in batches):
            raise ValueError("every batch needs one Bags per kernel spec")
        self.kernel = build_kernel(backend, specs, precision=precision, device=device, location=location, dense=dense)
        self.inputs = [self.kernel.prepare(*stack_bags(bags)) for bags in batches]
        self._next = 0
        batch = len(batches[0][0].lengths)
        self.grad = torch.ones(batch, sum(s.dim for s in specs), device=torch.device(device))
        self.device = device
        # Per batch on average: the batches are draws from the same distributions.
        self.lookups = int(round(np.mean([sum(len(b.ids) for b in bags) for bags in batches])))
        self.unique_rows = tuple(
            int(round(np.mean([len(np.unique(bags[i].ids)) for bags in batches]))) for i in range(len(specs))
        )

    def _batch(self) -> object:
        inputs = self.inputs[self._next % len(self.inputs)]
        self._next += 1
        return inputs

    def time(self, warmup: int, iters: int) -> KernelMeasurement:
        fwd, bwd = time_forward_backward(
            lambda: self.kernel.forward(self._batch()),
            lambda out: self.kernel.backward(out, self.grad),
            device=self.device,
            warmup=warmup,
            iters=iters,
        )
        return KernelMeasurement(self.kernel.backend, fwd, bwd, self.lookups, self.unique_rows)


def time_kernels(kernels: Sequence[PreparedKernel], warmup: int, iters: int) -> tuple[Timing, Timing]:
    """Several kernels of one rank timed as a step runs them: every forward in turn, then every
    backward. Each timed in a loop of its own instead, a kernel keeps its rows in cache from one
    iteration to the next, which in a step the rank's other kernels take back: one table split off
    into a second kernel cost 7-10% more forward timed so, and looked no dearer timed apart
    (``benchmarks/results/kernel_groups.md``)."""
    return time_forward_backward(
        lambda: [k.kernel.forward(k._batch()) for k in kernels],
        lambda outs: [k.kernel.backward(out, k.grad) for k, out in zip(kernels, outs)],
        device=kernels[0].device,
        warmup=warmup,
        iters=iters,
    )


def measure_kernel(
    specs: Sequence[KernelSpec],
    batches: Sequence[Sequence[Bags]],
    *,
    backend: str,
    device: str,
    precision: str,
    location: str = "hbm",
    warmup: int = 2,
    iters: int = 5,
    dense: bool = False,
) -> KernelMeasurement:
    """Time one fused kernel (``dense``: replicas' kernel) over the given batches (each one Bags
    per spec, same batch size)."""
    prepared = PreparedKernel(specs, batches, backend=backend, device=device, precision=precision,
                              location=location, dense=dense)
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
    batches: int = DISTINCT_BATCHES,
    dense: bool = False,
) -> KernelMeasurement:
    """Whole tables fused on one rank (``dense``: as data-parallel replicas), each fed ``batch``
    bags from its access distribution, a new batch each iteration (``batches`` of them, in turn)."""
    rng = np.random.default_rng(seed)
    drawn = [[sample_bags(t, batch, rng) for t in tables] for _ in range(batches)]
    specs = [KernelSpec(t.num_embeddings, t.embedding_dim) for t in tables]
    return measure_kernel(
        specs, drawn, backend=backend, device=device, precision=precision,
        location=location, warmup=warmup, iters=iters, dense=dense,
    )


def timing_dict(timing: Timing) -> dict:
    return dataclasses.asdict(timing)
