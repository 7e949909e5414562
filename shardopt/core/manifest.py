"""The migration manifest of a re-shard (``replan --moves``), as a strict file format.

Version 2 names the plan pair it is for (``old_plan``, ``new_plan``: digests of their layouts) and,
after a failure, the lost ranks and the pieces read from the checkpoint (``restored``). A version 1
file (no digests, no lost ranks) is still read. Every number is a strict, bounded integer; a
manifest that does not parse is one line naming the file and the field (exit 2). Whether it is
*right* (each byte count recomputed, each piece arriving once) is ``check_moves``'s question.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal, Optional

from pydantic import Field, Strict
from pydantic.dataclasses import dataclass

from shardopt.core.plan import NonNegInt
from shardopt.core.validation import STRICT, validate_as
from shardopt.core.workload import MAX_WORLD

MOVES_FORMAT = "shardopt-moves"
MOVES_VERSION = 2
READABLE_VERSIONS = (1, 2)

Rank = Annotated[int, Strict(), Field(ge=0, lt=MAX_WORLD)]
Span = tuple[NonNegInt, NonNegInt]  # [first, end) of rows or columns
Name = Annotated[str, Strict(), Field(min_length=1, max_length=256)]
Digest = Annotated[str, Strict(), Field(pattern=r"^[0-9a-f]{64}$")]


def _check_span(span: Span, what: str) -> None:
    if span[1] <= span[0]:
        raise ValueError(f"{what}: [first, end) with end above first, got {list(span)}")


@dataclass(frozen=True, config=STRICT)
class _Piece:
    """A rectangle of a table: rows and columns, each [first, end)."""

    table: Name
    rows: Span
    cols: Span

    def __post_init__(self) -> None:
        _check_span(self.rows, "rows")
        _check_span(self.cols, "cols")


@dataclass(frozen=True, config=STRICT)
class Move(_Piece):
    """A rectangle sent from an old rank to a new one, with its bytes."""

    from_rank: Rank
    to_rank: Rank
    bytes: NonNegInt


@dataclass(frozen=True, config=STRICT)
class Restored(_Piece):
    """A rectangle only lost ranks held, read from the last checkpoint onto a new rank."""

    to_rank: Rank
    bytes: NonNegInt


@dataclass(frozen=True, config=STRICT)
class Initialised(_Piece):
    """Rows (or a table) that did not exist before: created on ``rank``, not moved."""

    rank: Rank


@dataclass(frozen=True, config=STRICT)
class Manifest:
    format: Literal["shardopt-moves"]
    version: Literal[1, 2]
    ranks: dict[Annotated[str, Strict(), Field(pattern=r"^[0-9]{1,7}$")], Rank]  # new rank -> old rank
    moved_bytes: NonNegInt  # every byte that arrives: peers' sends and the checkpoint's
    moves: tuple[Move, ...]
    initialised: tuple[Initialised, ...]
    old_plan: Optional[Digest] = None  # layout_digest of the old plan and of the new one
    new_plan: Optional[Digest] = None
    lost_ranks: tuple[Rank, ...] = ()
    restored: tuple[Restored, ...] = ()
    restored_bytes: Optional[NonNegInt] = None

    def __post_init__(self) -> None:
        if self.version == 2 and (self.old_plan is None or self.new_plan is None):
            raise ValueError("old_plan / new_plan: a version 2 manifest names the plan pair it is for")
        if self.version == 1 and (self.old_plan or self.new_plan or self.lost_ranks or self.restored
                                  or self.restored_bytes is not None):
            raise ValueError("version: 1 has no old_plan, new_plan, lost_ranks or restored (use version 2)")
        if len(set(self.lost_ranks)) != len(self.lost_ranks):
            raise ValueError("lost_ranks: a rank is named twice")
        if self.restored and not self.lost_ranks:
            raise ValueError("restored: pieces read from the checkpoint, but lost_ranks names no rank")
        if (self.restored_bytes is None) != (not self.lost_ranks):
            raise ValueError("restored_bytes: given exactly when lost_ranks is")
        olds = list(self.ranks.values())
        if len(set(olds)) != len(olds):
            raise ValueError("ranks: two new ranks are the same old rank")

    @property
    def old_of(self) -> dict[int, int]:
        return {int(new): old for new, old in self.ranks.items()}


def layout_digest(world_size: int, tables) -> str:
    """What a manifest is for: the world and each table's cut, every shard's rank and rectangle
    (a plan's predictions and search notes left out: they do not change what moves)."""
    layout = [world_size] + [
        [tp.name, tp.sharding_type, tp.replicated_rows, [[s.rank, list(s.offsets), list(s.sizes)] for s in tp.shards]]
        for tp in sorted(tables, key=lambda t: t.name)]
    return hashlib.sha256(json.dumps(layout, separators=(",", ":")).encode()).hexdigest()


def manifest_from_dict(data: object, source: str = "<moves>") -> Manifest:
    from shardopt.core.errors import ShardoptError

    if isinstance(data, dict):
        if data.get("format") != MOVES_FORMAT:
            raise ShardoptError(f"{source}: format: must be {MOVES_FORMAT!r}, got {data.get('format')!r}")
        version = data.get("version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise ShardoptError(f"{source}: version: this shardopt reads moves files of versions"
                                f" {', '.join(map(str, READABLE_VERSIONS))}, got {version!r}")
    return validate_as(Manifest, data, source)


def read_manifest(path) -> Manifest:
    from shardopt.core.loaders import load_json

    return manifest_from_dict(load_json(path, "moves file"), str(path))
