"""Timing loops in FBGEMM's style: warm up, synchronise, take the median and the spread."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch


@dataclass(frozen=True)
class Timing:
    """Repeated measurements of one thing, in microseconds."""

    median_us: float
    p25_us: float
    p75_us: float
    runs: int

    @classmethod
    def of(cls, samples_s: list[float]) -> "Timing":
        us = np.asarray(samples_s) * 1e6
        return cls(
            median_us=float(np.median(us)),
            p25_us=float(np.percentile(us, 25)),
            p75_us=float(np.percentile(us, 75)),
            runs=len(us),
        )


def time_forward_backward(
    forward: Callable[[], torch.Tensor],
    backward: Callable[[torch.Tensor], None],
    *,
    device: str,
    warmup: int,
    iters: int,
) -> tuple[Timing, Timing]:
    """Forward and backward (with its fused optimizer step) timed separately, each iteration."""
    on_cuda = device.startswith("cuda")
    fwd_s, bwd_s = [], []
    for i in range(warmup + iters):
        if on_cuda:
            start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            torch.cuda.synchronize()
            start.record()
            out = forward()
            mid.record()
            backward(out)
            end.record()
            torch.cuda.synchronize()
            f, b = start.elapsed_time(mid) / 1e3, mid.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            out = forward()
            t1 = time.perf_counter()
            backward(out)
            t2 = time.perf_counter()
            f, b = t1 - t0, t2 - t1
        if i >= warmup:
            fwd_s.append(f)
            bwd_s.append(b)
    return Timing.of(fwd_s), Timing.of(bwd_s)
