"""A synthetic dataloader for examples/torchrec_planner.py's model: KeyedJaggedTensors whose
features have known pooling factors and Zipf skews (``shardopt stats --from-batches``).

    shardopt from-torchrec examples.torchrec_planner:model --world-size 8 --batch-size 512 -o m.yaml
    shardopt stats --from-batches examples.synthetic_batches:loader --workload m.yaml -o measured.yaml
"""

from __future__ import annotations

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

# feature -> (rows of its table, Zipf exponent, mean ids per sample); the model's tables.
FEATURES = {"user": (10_000, 1.05, 4.0), "item": (50_000, 0.8, 20.0), "country": (200, 1.2, 1.0)}
BATCH = 512


def zipf_loader(features: dict, batches: int, batch: int = BATCH, seed: int = 0):
    """``batches`` KJTs: each feature's bag lengths Poisson around its pooling, its ids Zipf over
    its rows (popularity ranks shuffled over row ids, as hashing does)."""
    rng = np.random.default_rng(seed)
    tables = {}
    for name, (rows, alpha, _) in features.items():
        weights = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
        tables[name] = (np.cumsum(weights) / weights.sum(), rng.permutation(rows))
    for _ in range(batches):
        keys, lengths, values = [], [], []
        for name, (_, _, pooling) in features.items():
            cdf, order = tables[name]
            bag = rng.poisson(pooling, batch)
            keys.append(name)
            lengths.append(bag)
            values.append(order[np.minimum(np.searchsorted(cdf, rng.random(int(bag.sum()))), len(cdf) - 1)])
        yield KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.from_numpy(np.concatenate(values)),
                                                  lengths=torch.from_numpy(np.concatenate(lengths)))


def loader():
    """The FACTORY form: 100 batches of the model's three features."""
    return zipf_loader(FEATURES, 100)


def true_hot_share(rows: int, alpha: float, share: float) -> float:
    """The share of lookups the hottest ``share`` of ``rows`` rows take under Zipf(alpha)."""
    weights = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
    return float(weights[: max(1, int(np.ceil(share * rows)))].sum() / weights.sum())


def shifted():
    """The same features a month later: items pooled 30 times, not 20, users' ids flatter."""
    moved = dict(FEATURES, item=(50_000, 0.8, 30.0), user=(10_000, 0.7, 4.0))
    return zipf_loader(moved, 100, seed=1)
