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
