"""Which precision a table is trained at on a device (no torch needed to ask)."""

from __future__ import annotations

# What FBGEMM's training TBE computes on each device; other data types are measured as the nearest.
TRAINABLE = {"cpu": ("fp32", "fp16"), "cuda": ("fp32", "fp16", "bf16")}


def measured_precision(data_type: str, device: str) -> str:
    """The precision a table of ``data_type`` is trained at here (int8 and bf16 fall back)."""
    trainable = TRAINABLE["cuda" if device.startswith("cuda") else "cpu"]
    return data_type if data_type in trainable else "fp16"
