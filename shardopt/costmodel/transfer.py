"""A trained model carried to another machine: its nets and constants, rescaled per pass.

Two minutes of points are too few to learn the shape of fused-kernel costs (a fresh fit on 160
points missed 880 independent points of the same machine by 15.7% once the speed was taken out),
but plenty to measure how much faster or slower this machine runs each pass. The packaged model
learned the shape from a full profile; rescaled, it missed the same 880 points by 12.8%
(`benchmarks/results/calibrate.md`). Replicas' dense-kernel constants are rescaled alike. Where the shape does not carry (another kind of CPU),
calibrate's held-out points say so clearly and the fresh fit is kept instead (``train._chosen``).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from shardopt.costmodel.constants import Calibration, KernelConstants
from shardopt.costmodel.kernel_net import KernelPredictor, LearnedParts
from shardopt.costmodel.profile_data import KernelSample
from shardopt.core.hardware import Hardware


def pass_log_scale(hw: Hardware, base: LearnedParts, samples: Sequence[KernelSample]) -> np.ndarray:
    """log(this machine / the base model) per pass (forward, backward): the median over points,
    so a few points disturbed by a neighbour do not set the speed."""
    predicted = KernelPredictor(hw, base).kernel_seconds([s.shards for s in samples])
    measured = np.array([[s.fwd_s, s.bwd_s] for s in samples])
    return np.median(np.log(measured / predicted), axis=0)


def transferred(hw: Hardware, base: LearnedParts, samples: Sequence[KernelSample], here: Calibration) -> LearnedParts:
    """``base`` rescaled to the machine ``samples`` were measured on.

    The analytic constants are scaled by the same factors (so ``analytic@`` of the file speaks
    for this machine too) and the nets' prior shifts with them; communication and provenance
    come from this machine's own calibration ``here``.
    """
    return rescaled(base, pass_log_scale(hw, base, samples), here)


def scaled_constants(constants: KernelConstants, scale: np.ndarray) -> KernelConstants:
    """``constants`` with each pass's time multiplied by ``exp(scale)`` (forward, backward)."""
    fwd, bwd = np.exp(scale)
    return KernelConstants(tuple(float(c * fwd) for c in constants.fwd), tuple(float(c * bwd) for c in constants.bwd),
                           float(constants.fwd_kernel_s * fwd), float(constants.bwd_kernel_s * bwd))


def rescaled(base: LearnedParts, scale: np.ndarray, here: Calibration) -> LearnedParts:
    """``base`` with each pass's time multiplied by ``exp(scale)`` (forward, backward), its
    communication and provenance from ``here``."""
    old = base.calibration
    fused = scaled_constants(old.kernel_constants(), scale)
    calibration = dataclasses.replace(
        old, fwd=fused.fwd, fwd_kernel_s=fused.fwd_kernel_s, bwd=fused.bwd, bwd_kernel_s=fused.bwd_kernel_s,
        comm=here.comm, comm_curves=here.comm_curves, trained_on=here.trained_on,
        fitted=here.fitted.union(old.fitted) if here.fitted is not None else old.fitted,
        dense=scaled_constants(old.dense, scale) if old.dense is not None else None,
    )
    shift = tuple(float(s) for s in np.asarray(base.prior_shift) + scale)
    return dataclasses.replace(base, calibration=calibration, prior_shift=shift)
