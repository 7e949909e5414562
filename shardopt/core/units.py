"""Byte sizes as users write them: an integer of bytes or a string such as ``80GB`` or ``512MiB``.

Decimal prefixes (KB, MB, GB, TB) are powers of 1000 and binary ones (KiB, MiB, GiB, TiB) powers
of 1024, as on a GPU's data sheet and in ``nvidia-smi`` respectively.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([A-Za-z]*)\s*$")
MAX_SIZE = 2**60  # 1 EiB: more than any cluster's memory, and exact in a float's range


def parse_size(value: object) -> int:
    """Return a size in bytes; raise ValueError with a readable reason otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"must be a size such as 80GB or an integer of bytes, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"must be a positive size, got {value}")
        if value > MAX_SIZE:
            raise ValueError(f"must be at most 1 EiB (2**60 bytes), got {value:.3g}")
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match and match.group(2).upper() in _UNITS:
            scaled = float(match.group(1)) * _UNITS[match.group(2).upper()]
            if not scaled < MAX_SIZE:
                raise ValueError(f"must be at most 1 EiB (2**60 bytes), got {value!r}")
            size = int(scaled)
            if size <= 0:
                raise ValueError(f"must be a positive size, got {value!r}")
            return size
    raise ValueError(f"must be a size such as 80GB or an integer of bytes, got {value!r}")


def format_bytes(size: float) -> str:
    """Render bytes with a binary prefix, three significant digits."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{int(size)} B"
