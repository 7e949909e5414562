"""Per-table statistics of a real index trace, in the public dlrm_datasets format.

A trace file holds ``indices, offsets, lengths`` (optionally gzipped ``torch.save`` output):
``lengths`` is ``[T, B]`` and table t's bags are ``offsets[t*B : (t+1)*B + 1]``. For each table we
count the rows touched, the mean pooling factor, and the access-count histogram in the same 17
power-of-two bins as the dataset's locality stats.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardopt.errors import ShardoptError
from shardopt.workload import HIST_BINS


@dataclass(frozen=True)
class TableStats:
    lookups: int
    pooling_factor: float
    rows_touched: int
    max_id: int
    unique_frac: tuple[float, ...]
    access_frac: tuple[float, ...]


def count_bins(counts: np.ndarray) -> np.ndarray:
    """Bin k holds counts in (2^(k-1), 2^k]: 1 -> 0, 2 -> 1, 3..4 -> 2, ...; the last bin is open."""
    bins = np.ceil(np.log2(np.maximum(counts, 1))).astype(np.int64)
    return np.minimum(bins, HIST_BINS - 1)


def table_stats(ids: np.ndarray, batch: int) -> TableStats:
    if len(ids) == 0:
        zeros = (0.0,) * HIST_BINS
        return TableStats(0, 0.0, 0, -1, zeros, zeros)
    _, counts = np.unique(ids, return_counts=True)
    bins = count_bins(counts)
    uniq = np.bincount(bins, minlength=HIST_BINS) / len(counts)
    acc = np.bincount(bins, weights=counts, minlength=HIST_BINS) / len(ids)
    return TableStats(
        lookups=int(len(ids)),
        pooling_factor=len(ids) / batch,
        rows_touched=int(len(counts)),
        max_id=int(ids.max()),
        unique_frac=tuple(round(float(x), 6) for x in uniq),
        access_frac=tuple(round(float(x), 6) for x in acc),
    )


def load_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``indices, offsets, lengths`` as numpy arrays; ShardoptError on anything else."""
    import torch

    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:
            data = torch.load(handle, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ShardoptError(f"{path}: cannot read trace: no such file") from None
    except Exception as exc:  # noqa: BLE001 - torch.load raises many kinds; all mean "not a trace"
        raise ShardoptError(f"{path}: not a readable trace: {str(exc).splitlines()[0]}") from None
    if not (isinstance(data, (tuple, list)) and len(data) == 3):
        raise ShardoptError(f"{path}: a trace holds (indices, offsets, lengths), got {type(data).__name__}")
    indices, offsets, lengths = (np.asarray(t) for t in data)
    if lengths.ndim != 2:
        raise ShardoptError(f"{path}: lengths: must be [tables, batch], got shape {list(lengths.shape)}")
    tables, batch = lengths.shape
    if offsets.shape != (tables * batch + 1,) or offsets[-1] != len(indices):
        raise ShardoptError(
            f"{path}: offsets: must have tables*batch+1 = {tables * batch + 1} entries ending at"
            f" {len(indices)} ids, got shape {list(offsets.shape)}"
        )
    return indices.astype(np.int64), offsets.astype(np.int64), lengths


def trace_stats(path: str | Path) -> tuple[int, list[TableStats]]:
    """The batch size and one TableStats per table of the trace."""
    indices, offsets, lengths = load_trace(path)
    tables, batch = lengths.shape
    out = []
    for t in range(tables):
        ids = indices[offsets[t * batch] : offsets[(t + 1) * batch]]
        out.append(table_stats(ids, batch))
    return batch, out
