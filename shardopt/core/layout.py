"""Bytes of a table's rows as FBGEMM lays them out: weights per data type, and the optimizer
state kept beside them. Core, because a workload's own checks (does a table fit a rank?) need it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardopt.core.workload import Table

DATA_TYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
INT8_ROW_OVERHEAD = 8  # FBGEMM stores a per-row fp32 scale and bias beside int8 rows


def optimizer_state_bytes(optimizer: str, rows: int, cols: int) -> int:
    """Optimizer state FBGEMM keeps beside a shard's weights (fp32)."""
    per_row = {"sgd": 0, "rowwise_adagrad": 4, "adagrad": cols * 4, "adam": cols * 8}
    if optimizer not in per_row:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    return rows * per_row[optimizer]


def weight_bytes(table: Table, rows: int, cols: int) -> int:
    return _weights(table.data_type, rows, cols)


def _weights(data_type: str, rows: int, cols: int) -> int:
    weights = rows * cols * DATA_TYPE_BYTES[data_type]
    if data_type == "int8":
        weights += rows * INT8_ROW_OVERHEAD
    return weights


def shard_bytes(optimizer: str, table: Table, rows: int, cols: int) -> int:
    """Weights plus optimizer state of a ``rows`` x ``cols`` shard."""
    return typed_bytes(optimizer, table.data_type, rows, cols)


def typed_bytes(optimizer: str, data_type: str, rows: int, cols: int) -> int:
    """:func:`shard_bytes` from a data type alone (where no valid Table can be built)."""
    return _weights(data_type, rows, cols) + optimizer_state_bytes(optimizer, rows, cols)
