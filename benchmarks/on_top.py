"""A benchmark's results file keeps every run: the new one goes on top, earlier ones (other
machines, other commits) stay below it, under the file's one title line."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def put_on_top(path: Path, lines: Sequence[str]) -> None:
    """Write ``lines`` (a title line first) on top of ``path``'s earlier runs, without their title."""
    path.parent.mkdir(parents=True, exist_ok=True)
    earlier = path.read_text().split("\n", 1)[1].lstrip("\n") if path.exists() else ""
    path.write_text("\n".join(lines) + "\n" + (f"\n{earlier}" if earlier else ""))


def machine() -> str:
    """This machine's CPU fingerprint, and the one it stands for where ``SHARDOPT_CPU_ID`` makes it
    foreign (a results file should say on which CPU the kernels ran)."""
    import os

    from shardopt.profile.dataset import CPU_ID_VARIABLE, cpu_fingerprint

    stand_in = os.environ.pop(CPU_ID_VARIABLE, None)
    try:
        real = cpu_fingerprint()
    finally:
        if stand_in is not None:
            os.environ[CPU_ID_VARIABLE] = stand_in
    return f"`{real}`" + (f", its fingerprint made `{stand_in}` ({CPU_ID_VARIABLE})" if stand_in else "")
