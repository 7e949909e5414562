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

from shardopt.core.errors import ShardoptError
from shardopt.core.workload import HIST_BINS


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
    """``indices, offsets, lengths`` as numpy arrays; ShardoptError on anything else.

    Checked as a training input would be: integer ids that are not negative, offsets that start
    at 0, never decrease and end at the number of ids, and lengths equal to the offsets' steps.
    """
    import torch

    path = Path(path)
    if path.is_dir():
        raise ShardoptError(f"{path}: is a folder, not a trace")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:
            data = torch.load(handle, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ShardoptError(f"{path}: cannot read trace: no such file") from None
    except Exception as exc:  # noqa: BLE001 - torch.load raises many kinds; all mean "not a trace"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ShardoptError(f"{path}: not a readable trace: {first}") from None
    if not (isinstance(data, (tuple, list)) and len(data) == 3):
        raise ShardoptError(f"{path}: a trace holds (indices, offsets, lengths), got {type(data).__name__}")
    arrays = []
    for field, value in zip(("indices", "offsets", "lengths"), data):
        if not isinstance(value, torch.Tensor):
            raise ShardoptError(f"{path}: {field}: must be a tensor, got {type(value).__name__}")
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise ShardoptError(f"{path}: {field}: must hold integers, got {value.dtype}")
        arrays.append(value.numpy())
    indices, offsets, lengths = arrays
    if indices.ndim != 1 or offsets.ndim != 1:
        raise ShardoptError(f"{path}: indices and offsets: must be 1-D, got shapes {list(indices.shape)}"
                            f" and {list(offsets.shape)}")
    if lengths.ndim != 2 or 0 in lengths.shape:
        raise ShardoptError(f"{path}: lengths: must be [tables, batch] with both > 0, got shape {list(lengths.shape)}")
    tables, batch = lengths.shape
    if offsets.shape != (tables * batch + 1,) or offsets[0] != 0 or offsets[-1] != len(indices):
        raise ShardoptError(
            f"{path}: offsets: must have tables*batch+1 = {tables * batch + 1} entries from 0 to"
            f" {len(indices)} ids, got shape {list(offsets.shape)}"
        )
    steps = np.diff(offsets.astype(np.int64))
    if (steps < 0).any():
        at = int(np.argmax(steps < 0))
        raise ShardoptError(f"{path}: offsets[{at + 1}]: decreases ({offsets[at]} then {offsets[at + 1]})")
    if not np.array_equal(steps, lengths.reshape(-1).astype(np.int64)):
        at = int(np.argmax(steps != lengths.reshape(-1)))
        raise ShardoptError(f"{path}: lengths[{at // batch}][{at % batch}]: {lengths.reshape(-1)[at]} ids, but the"
                            f" offsets give the bag {steps[at]}")
    if len(indices) and indices.min() < 0:
        raise ShardoptError(f"{path}: indices[{int(np.argmin(indices))}]: ids must not be negative,"
                            f" got {int(indices.min())}")
    if len(indices) and int(indices.max()) >= 2**40:
        raise ShardoptError(f"{path}: indices: ids must be below 2**40, got {int(indices.max())}")
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
