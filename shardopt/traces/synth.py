"""Synthetic DLRM-like workloads drawn from public statistics of Meta's embedding dataset.

Rows per table and pooling factors are log-normal with the mean and spread reported for the 2021
trace (856 tables: rows mean 4.11M, std 3.13M; pooling factor mean 15.81, std 25.59, at most 194
seen), rows scaled down by ``rows_scale`` for machines smaller than a production cluster. Dims
follow NeuroShard's protocol ({16, 32, 64, 128, 256}). Access skew: 60% of tables take the
access-count histogram of a random trace file of the dataset, 30% a Zipf law with alpha in
[0.6, 1.3], 10% uniform. Same arguments and seed, same workload.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from shardopt.core.workload import HIST_BINS

ROWS_MEAN, ROWS_STD = 4.11e6, 3.13e6
POOLING_MEAN, POOLING_STD, POOLING_MAX = 15.81, 25.59, 194.0
DIMS = (16, 32, 64, 128, 256)
DIM_WEIGHTS = (0.1, 0.2, 0.3, 0.3, 0.1)


@dataclass(frozen=True)
class SynthSpec:
    name: str
    num_tables: int
    world_size: int
    local_world_size: int
    batch_size: int = 512
    compute_device: str = "cpu"
    hardware: str | None = None
    hbm_cap: str = "1GB"
    rows_scale: float = 1.0
    min_rows: int = 1000
    dims: tuple[int, ...] = DIMS
    seed: int = 0


@lru_cache(maxsize=1)
def trace_histograms() -> list[tuple[str, list[float], list[float]]]:
    """(trace file, unique_frac, access_frac) for each trace file of the dataset."""
    text = resources.files("shardopt").joinpath("data/locality_stats_parsed.csv").read_text()
    out = []
    for row in csv.DictReader(text.splitlines()):
        uniq = [float(row[f"uniq_frac_bin{k}"]) for k in range(HIST_BINS)]
        acc = [float(row[f"access_frac_bin{k}"]) for k in range(HIST_BINS)]
        out.append((f"{row['year']}/{row['file']}", uniq, acc))
    return out


def _lognormal(rng: np.random.Generator, mean: float, std: float) -> float:
    sigma2 = math.log1p((std / mean) ** 2)
    return float(rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2)))


def synth_workload(spec: SynthSpec) -> dict:
    """A workload as plain data, ready to dump to YAML or to validate."""
    rng = np.random.default_rng(spec.seed)
    hists = trace_histograms()
    weights = np.array([DIM_WEIGHTS[DIMS.index(d)] if d in DIMS else 1.0 for d in spec.dims])
    tables = []
    for i in range(spec.num_tables):
        rows = max(spec.min_rows, int(_lognormal(rng, ROWS_MEAN, ROWS_STD) * spec.rows_scale))
        pooling = min(POOLING_MAX, max(1.0, _lognormal(rng, POOLING_MEAN, POOLING_STD)))
        dim = int(rng.choice(spec.dims, p=weights / weights.sum()))
        pick = rng.random()
        if pick < 0.6:
            _, uniq, acc = hists[int(rng.integers(len(hists)))]
            access = {"distribution": "histogram", "unique_frac": uniq, "access_frac": acc}
        elif pick < 0.9:
            access = {"distribution": "zipf", "alpha": round(float(rng.uniform(0.6, 1.3)), 3)}
        else:
            access = {"distribution": "uniform"}
        tables.append(
            {
                "name": f"t{i:03d}",
                "num_embeddings": rows,
                "embedding_dim": dim,
                "pooling_factor": round(pooling, 2),
                "access": access,
            }
        )
    topology: dict = {
        "world_size": spec.world_size,
        "local_world_size": spec.local_world_size,
        "compute_device": spec.compute_device,
        "hbm_cap": spec.hbm_cap,
    }
    if spec.hardware:
        topology["hardware"] = spec.hardware
    return {
        "version": 1,
        "name": spec.name,
        "batch_size": spec.batch_size,
        "topology": topology,
        "tables": tables,
    }
