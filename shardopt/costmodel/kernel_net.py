"""Learned cost model in the line of NeuroShard/DreamShard.

A shared encoder turns each shard's features into a vector; the vectors of the shards fused in one
kernel are summed (set pooling, so order does not matter and the fused cost need not be the sum of
single costs); a head maps the pooled vector, the shard count and the calibrated analytic estimate
(a physical prior that lets 600 profile points generalise) to log forward and backward seconds.
An all-to-all head maps message bytes, world size and pattern to log seconds. A plan's cost is the
max over ranks of compute plus communication, as TorchRec counts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from shardopt.costmodel.analytic import calibrated_hardware
from shardopt.costmodel.constants import Calibration
from shardopt.costmodel.features import FEATURES, kernels_features
from shardopt.costmodel.profile_data import KernelSample, KernelShard, kernel_terms
from shardopt.core.hardware import Hardware

HIDDEN = 32
# The head corrects the prior by at most this much in log space (x0.74 .. x1.35): a bound that
# keeps the nets from extrapolating wildly on kernels larger than any profiled.
CORRECTION_BOUND = 0.3
# Nets trained from consecutive seeds and averaged in log space: one net's variance on unseen
# kernels is larger than its bias (chosen on a validation set of replayed plans, seed 1 of
# benchmarks/accuracy.py, never the reported one).
ENSEMBLE = 5
EPOCHS = 300
WEIGHT_DECAY = 1e-3


def _mlp(sizes: Sequence[int]):
    import torch.nn as nn

    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def build_nets():
    import torch.nn as nn

    class KernelNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = _mlp([len(FEATURES), HIDDEN, HIDDEN])
            self.head = _mlp([HIDDEN + 3, HIDDEN, 2])

        def forward(self, feats, segment, kernels, prior):
            import torch

            encoded = torch.relu(self.encoder(feats))
            pooled = torch.zeros(kernels, HIDDEN, dtype=encoded.dtype).index_add_(0, segment, encoded)
            count = torch.bincount(segment, minlength=kernels).to(encoded.dtype).unsqueeze(1)
            out = self.head(torch.cat([pooled, torch.log1p(count), prior], dim=1))
            # The head learns a bounded correction to the analytic prior, in log space.
            return prior + CORRECTION_BOUND * torch.tanh(out / CORRECTION_BOUND)

    return KernelNet(), _mlp([4, 16, 16, 1])


@dataclass
class LearnedParts:
    """Everything the learned model needs at prediction time (what its file stores)."""

    calibration: Calibration
    feature_mean: np.ndarray
    feature_std: np.ndarray
    kernel_states: list[dict]  # one per ensemble member
    comm_state: dict
    # log of the factors (forward, backward) a transferred model's constants were scaled by
    # (:mod:`shardopt.costmodel.transfer`): the nets' head still sees the prior of the machine
    # it was trained on, and the shift is added back to what it predicts.
    prior_shift: tuple[float, float] = (0.0, 0.0)


def analytic_prior(hw: Hardware, calibration: Calibration, kernels: Sequence[Sequence[KernelShard]]) -> np.ndarray:
    """log of the calibrated analytic forward and backward seconds of each kernel."""
    fwd_c, bwd_c = np.array(calibration.fwd), np.array(calibration.bwd)
    hw = calibrated_hardware(hw, calibration)
    out = []
    for shards in kernels:
        f, b = kernel_terms(hw, shards)
        out.append([
            np.log(max(f @ fwd_c + calibration.fwd_kernel_s, 1e-9)),
            np.log(max(b @ bwd_c + calibration.bwd_kernel_s, 1e-9)),
        ])
    return np.array(out, dtype=np.float64).reshape(len(kernels), 2)


def comm_inputs(message_bytes: np.ndarray, world: np.ndarray, pooled: np.ndarray) -> np.ndarray:
    return np.stack([np.log1p(message_bytes) / 10, np.log(world), pooled, np.ones_like(pooled)], 1)


class KernelPredictor:
    """The trained nets, ready to predict kernels and all-to-alls."""

    def __init__(self, hw: Hardware, parts: LearnedParts) -> None:
        import torch

        self.hw = calibrated_hardware(hw, parts.calibration)
        self.parts = parts
        self.kernel_nets = []
        for state in parts.kernel_states:
            net, _ = build_nets()
            net.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
            self.kernel_nets.append(net.double().eval())
        _, self.comm_net = build_nets()
        self.comm_net.load_state_dict({k: torch.tensor(v) for k, v in parts.comm_state.items()})
        self.comm_net.double().eval()

    def kernel_seconds(self, kernels: Sequence[Sequence[KernelShard]]) -> np.ndarray:
        """[kernels, 2]: forward and backward seconds of each kernel (empty kernels allowed)."""
        import torch

        feats, segment = kernels_features(self.hw, kernels)
        feats = (feats - self.parts.feature_mean) / self.parts.feature_std
        shift = np.asarray(self.parts.prior_shift, dtype=np.float64)
        prior = analytic_prior(self.hw, self.parts.calibration, kernels) - shift
        args = (torch.from_numpy(feats), torch.from_numpy(segment), len(kernels), torch.from_numpy(prior))
        with torch.no_grad():
            logs = [net(*args).numpy() for net in self.kernel_nets]
        return np.exp(np.mean(logs, axis=0) + shift)

    def all_to_all_seconds(self, message_bytes: float, world: int, pattern: str) -> float:
        import torch

        if message_bytes <= 0 or world <= 1:
            return 0.0
        x = comm_inputs(np.array([message_bytes]), np.array([float(world)]),
                        np.array([1.0 if pattern == "pooled" else 0.0]))
        with torch.no_grad():
            return float(np.exp(self.comm_net(torch.from_numpy(x)).numpy()[0, 0]))


def train_parts(
    hw: Hardware,
    calibration: Calibration,
    samples: Sequence[KernelSample],
    comm_records: Sequence[dict],
    *,
    seed: int = 0,
    epochs: int = EPOCHS,
    progress=None,
) -> LearnedParts:
    """Fit both nets; deterministic for a given profile and seed (one thread, fixed order)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    try:
        kernels = [s.shards for s in samples]
        feats, segment = kernels_features(calibrated_hardware(hw, calibration), kernels)
        mean, std = feats.mean(axis=0), feats.std(axis=0)
        std[std < 1e-9] = 1.0
        x = torch.from_numpy((feats - mean) / std)
        seg = torch.from_numpy(segment)
        prior = torch.from_numpy(analytic_prior(hw, calibration, kernels))
        y = torch.log(torch.tensor([[s.fwd_s, s.bwd_s] for s in samples], dtype=torch.float64))
        kernel_states = []
        for member in range(ENSEMBLE):
            torch.manual_seed(seed * ENSEMBLE + member)
            kernel_net, _ = build_nets()
            kernel_net.double()
            opt = torch.optim.Adam(kernel_net.parameters(), lr=3e-3, weight_decay=WEIGHT_DECAY)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
            for epoch in range(epochs):
                opt.zero_grad()
                loss = torch.mean((kernel_net(x, seg, len(kernels), prior) - y) ** 2)
                loss.backward()
                opt.step()
                sched.step()
                if progress and epoch % 100 == 0:
                    progress(member, epoch, float(loss))
            kernel_states.append({k: v.tolist() for k, v in kernel_net.state_dict().items()})
        torch.manual_seed(seed)
        _, comm_net = build_nets()
        comm_net.double()
        cx = comm_inputs(
            np.array([float(r["message_bytes"]) for r in comm_records]),
            np.array([float(r["world_size"]) for r in comm_records]),
            np.array([1.0 if r["pattern"] == "pooled" else 0.0 for r in comm_records]),
        )
        cy = np.log([[r["timing"]["median_us"] * 1e-6] for r in comm_records])
        if len(cx):
            cx_t, cy_t = torch.from_numpy(cx), torch.from_numpy(np.asarray(cy, dtype=np.float64))
            copt = torch.optim.Adam(comm_net.parameters(), lr=1e-2)
            for _ in range(1500):
                copt.zero_grad()
                closs = torch.mean((comm_net(cx_t) - cy_t) ** 2)
                closs.backward()
                copt.step()
        return LearnedParts(
            calibration=calibration,
            feature_mean=mean,
            feature_std=std,
            kernel_states=kernel_states,
            comm_state={k: v.tolist() for k, v in comm_net.state_dict().items()},
        )
    finally:
        torch.set_num_threads(threads)
