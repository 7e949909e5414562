"""Per-shard feature vectors for the learned model (no torch here: numpy only)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from shardopt.costmodel.profile_data import KernelShard
from shardopt.costmodel.terms import BWD_TERMS, LEARNED_FWD_TERMS, shard_terms
from shardopt.core.hardware import Hardware

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
KERNELS = ("fused", "fused_uvm", "fused_uvm_caching")
FEATURES = (
    "log_rows", "log_cols", "log_lookups", "log_samples", "log_pooling", "log_row_bytes",
    *(f"log_fwd_{t}" for t in LEARNED_FWD_TERMS), *(f"log_bwd_{t}" for t in BWD_TERMS),
    *(f"precision_{p}" for p in PRECISIONS), *(f"kernel_{k}" for k in KERNELS),
)


def shard_features(hw: Hardware, shard: KernelShard) -> np.ndarray:
    """Raw table facts (rows, dim, pooling, batch, precision, tier) beside the work terms."""
    fwd, bwd = shard_terms(
        hw, shard.table, shard.rows, shard.cols, lookups=shard.lookups, samples=shard.samples,
        compute_kernel=shard.compute_kernel, cache_load_factor=shard.cache_load_factor,
    )
    raw = [
        shard.rows, shard.cols, shard.lookups, shard.samples,
        shard.lookups / max(shard.samples, 1), shard.cols * shard.table.element_bytes,
    ]
    one_hot = [float(shard.table.data_type == p) for p in PRECISIONS]
    one_hot += [float(shard.compute_kernel == k) for k in KERNELS]
    return np.concatenate([np.log1p(raw), np.log1p(fwd[:len(LEARNED_FWD_TERMS)]), np.log1p(bwd), one_hot])


def kernels_features(
    hw: Hardware, kernels: Sequence[Sequence[KernelShard]]
) -> tuple[np.ndarray, np.ndarray]:
    """Stacked shard features and the kernel index of each row (for set pooling)."""
    rows, segment = [], []
    for k, shards in enumerate(kernels):
        for shard in shards:
            rows.append(shard_features(hw, shard))
            segment.append(k)
    feats = np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))
    return feats, np.array(segment, dtype=np.int64)
