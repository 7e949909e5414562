"""Bytes a re-shard moves, from an old plan to a new one, and the migration that does it.

A piece of a table costs nothing to keep where it is: the bytes of its rectangle that its new
rank already held (under the relabelling of old ranks to new ones) stay, the rest of what
existed before arrives from the rank that held it, and rows or tables that did not exist are
initialised, not moved. Bytes are weights plus optimizer state, as FBGEMM keeps them
(:mod:`shardopt.core.layout`). A new world may number its ranks freely, so the old rank that
becomes new rank ``r`` is chosen to keep the most bytes (an assignment problem). After a failure
the survivors are given instead (``lost``: old ranks that died): they keep their order, no piece
is sent from a lost rank, and what only lost ranks held is read from the last checkpoint
(source ``CHECKPOINT``), counted in the bytes moved as peers' sends are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from shardopt.core.layout import shard_bytes
from shardopt.core.plan import Plan, TablePlan
from shardopt.core.workload import Table, Workload

Rect = tuple[int, int, int, int]  # row offset, col offset, rows, cols
CHECKPOINT = -1  # the source of what only lost ranks held: the last checkpoint


@dataclass(frozen=True)
class OldLayout:
    """The old plan as the re-shard sees it: each table's rectangles by old rank, and its extent
    (the rows and columns that exist and so can be moved rather than initialised)."""

    world: int
    pieces: Mapping[str, Mapping[int, tuple[Rect, ...]]]
    extent: Mapping[str, tuple[int, int]]
    lost: frozenset[int] = frozenset()  # old ranks that died: nothing is sent from them
    digest: str = ""  # the old plan's layout digest (core.manifest.layout_digest), for its manifest
    # Per table, its old rectangles as arrays (filled on first use): a re-shard asks what overlaps a
    # piece once per piece and rank, and at 1024 ranks a scan of every old piece took minutes.
    _index: dict = field(default_factory=dict, compare=False, repr=False)
    # Each piece's (bytes that arrive, of them from the checkpoint) for one workload: a re-shard
    # prices every plan it weighs, and at 11376 pieces over 1024 ranks that was minutes each time.
    _moves: list = field(default_factory=lambda: [None, {}], compare=False, repr=False)

    @classmethod
    def of(cls, plan: Plan, lost: Iterable[int] = ()) -> "OldLayout":
        pieces: dict[str, dict[int, list[Rect]]] = {}
        extent = {}
        for tp in plan.tables:
            by_rank: dict[int, list[Rect]] = {}
            for rank, rect in rects_of(tp):
                by_rank.setdefault(rank, []).append(rect)
            pieces[tp.name] = by_rank
            extent[tp.name] = (max(s.offsets[0] + s.sizes[0] for s in tp.shards),
                               max(s.offsets[1] + s.sizes[1] for s in tp.shards))
        from shardopt.core.manifest import layout_digest

        return cls(plan.world_size, {k: {r: tuple(v) for r, v in d.items()} for k, d in pieces.items()}, extent,
                   frozenset(lost), layout_digest(plan.world_size, plan.tables))

    def _indexed(self, name: str) -> tuple[list, np.ndarray, bool]:
        index = self._index.get(name)
        if index is None:
            held = [(src, h) for src in sorted(self.pieces.get(name, {})) for h in self.pieces[name][src]]
            boxes = np.array([h for _, h in held], dtype=np.int64).reshape(-1, 4)
            index = self._index[name] = (held, boxes, disjoint(boxes))
        return index

    def boxes(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The table's old pieces: their ranks, and their rectangles as the rows of an array."""
        held, boxes, _ = self._indexed(name)
        return np.array([src for src, _ in held], dtype=np.int64), boxes

    def overlapping(self, name: str, rect: Rect) -> list[tuple[int, Rect]]:
        """(old rank, rectangle) of the table's old pieces that overlap ``rect``, by rank."""
        held, boxes, _ = self._indexed(name)
        return [held[i] for i in overlapping_rows(boxes, rect)]

    def tiled(self, name: str) -> bool:
        """Whether no two of the table's old pieces overlap (no replicas): each byte has one source."""
        return self._indexed(name)[2]

    def holds_part_of(self, name: str, rect: Rect, old_rank: int | None) -> bool:
        """Whether ``old_rank`` held any of ``rect`` of the table (one that held none receives
        all of it, as a new rank does)."""
        return old_rank is not None and any(overlap(rect, h) for h in self.pieces.get(name, {}).get(old_rank, ()))

    def moves_of(self, workload: Workload) -> dict:
        """The piece-move memo of ``workload`` (the one asked last)."""
        if self._moves[0] is not workload:
            self._moves[:] = [workload, {}]
        return self._moves[1]

    def carried(self, table: Table) -> tuple[int, int] | None:
        """The part of ``table`` that existed before: its old rows (a table that grew keeps them);
        None for a new table or one whose width changed (its rows cannot be reused)."""
        old = self.extent.get(table.name)
        if old is None or old[1] != table.embedding_dim:
            return None
        return min(old[0], table.num_embeddings), old[1]


def overlap(a: Rect, b: Rect) -> Rect | None:
    r0, c0 = max(a[0], b[0]), max(a[1], b[1])
    r1, c1 = min(a[0] + a[2], b[0] + b[2]), min(a[1] + a[3], b[1] + b[3])
    return (r0, c0, r1 - r0, c1 - c0) if r1 > r0 and c1 > c0 else None


def rect_bytes(workload: Workload, table: Table, rect: Rect | None) -> int:
    return shard_bytes(workload.optimizer, table, rect[2], rect[3]) if rect else 0


def rects_of(tp: TablePlan) -> Iterable[tuple[int, Rect]]:
    """(rank, rectangle) of each shard; hot rows sit on every rank, so a FlexShard table's shard
    counts as the whole table up to its last row (remapped ids)."""
    for s in tp.shards:
        if tp.replicated_rows:
            yield s.rank, (0, 0, s.offsets[0] + s.sizes[0], s.sizes[1])
        else:
            yield s.rank, (*s.offsets, *s.sizes)


def existing(layout: OldLayout, table: Table, rect: Rect) -> Rect | None:
    """The part of ``rect`` that existed in the old plan."""
    carried = layout.carried(table)
    return overlap(rect, (0, 0, *carried)) if carried else None


def subtract(a: Rect, b: Rect) -> list[Rect]:
    """``a`` without ``b``: at most four rectangles (above, below, left, right of the overlap)."""
    o = overlap(a, b)
    if o is None:
        return [a]
    out = []
    if o[0] > a[0]:
        out.append((a[0], a[1], o[0] - a[0], a[3]))
    if o[0] + o[2] < a[0] + a[2]:
        out.append((o[0] + o[2], a[1], a[0] + a[2] - o[0] - o[2], a[3]))
    if o[1] > a[1]:
        out.append((o[0], a[1], o[2], o[1] - a[1]))
    if o[1] + o[3] < a[1] + a[3]:
        out.append((o[0], o[1] + o[3], o[2], a[1] + a[3] - o[1] - o[3]))
    return out


def minus(rects: Iterable[Rect], taken: Sequence[Rect]) -> list[Rect]:
    out = list(rects)
    for t in taken:
        out = [piece for r in out for piece in subtract(r, t)]
    return out


def arrivals(layout: OldLayout, table: Table, rect: Rect, old_rank: int | None) -> list[tuple[int, Rect]]:
    """(old rank, rectangle) of every part of ``rect`` that must arrive on the new rank that was
    ``old_rank``: what existed, less what that rank held, each part from the lowest live rank
    holding it (replicas are sent once); parts that only lost ranks held come from CHECKPOINT."""
    part = existing(layout, table, rect)
    if part is None:
        return []
    held = layout.pieces.get(table.name, {})
    covered = [o for h in held.get(old_rank, ()) if (o := overlap(part, h))] if old_rank is not None else []
    if layout.tiled(table.name):  # one source per byte: each overlapping piece sends its overlap
        out = [(src, overlap(part, h)) for src, h in layout.overlapping(table.name, part)
               if src != old_rank and src not in layout.lost]
        if layout.lost:
            out += [(CHECKPOINT, piece) for piece in minus([part], covered + [p for _, p in out])]
        return out
    out = []
    left = minus([part], covered)  # what no source has sent yet: once empty, the rest send nothing
    boxes = _Boxes(covered)  # only the covered parts that overlap a source's piece cut it
    for src, h in layout.overlapping(table.name, part) if left else ():
        if src == old_rank or src in layout.lost:
            continue
        o = overlap(part, h)
        for piece in minus([o], [covered[i] for i in boxes.overlapping(o)]):
            out.append((src, piece))
            covered.append(piece)
            boxes.add(piece)
        left = minus(left, [h])
        if not left:
            break
    if layout.lost:
        out += [(CHECKPOINT, piece) for piece in minus([part], covered)]
    return out


class _Boxes:
    """Rectangles in an array that grows, to find the ones overlapping another in one pass: a
    piece cut from a table spread over 1024 old ranks is covered by 1024 parts, one by one."""

    def __init__(self, rects: Sequence[Rect]) -> None:
        self.n = len(rects)
        self.a = np.zeros((max(16, 2 * self.n), 4), dtype=np.int64)
        if rects:
            self.a[:self.n] = rects

    def add(self, rect: Rect) -> None:
        if self.n == len(self.a):
            self.a = np.concatenate([self.a, np.zeros_like(self.a)])
        self.a[self.n] = rect
        self.n += 1

    def overlapping(self, r: Rect) -> np.ndarray:
        return overlapping_rows(self.a[:self.n], r)


def disjoint(boxes: np.ndarray, most: int = 4096) -> bool:
    """Whether no two rectangles (rows of ``boxes``) overlap; past ``most`` of them, not asked (False)."""
    if len(boxes) > most:
        return False
    r0, c0 = boxes[:, 0], boxes[:, 1]
    r1, c1 = r0 + boxes[:, 2], c0 + boxes[:, 3]
    for i in range(0, len(boxes), 256):  # pairs in blocks: 4096 pieces would be 16M pairs at once
        j = slice(i, i + 256)
        hit = ((r0[j, None] < r1) & (r1[j, None] > r0) & (c0[j, None] < c1) & (c1[j, None] > c0))
        hit[np.arange(hit.shape[0]), np.arange(i, i + hit.shape[0])] = False
        if hit.any():
            return False
    return True


def overlap_sizes(r, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns ``r`` (a :data:`Rect`, or an array whose last axis is one) shares with each
    row of ``boxes``, broadcast; not above 0 where they do not overlap: :func:`overlap` over arrays."""
    r = np.asarray(r)
    rows = np.minimum(r[..., 0] + r[..., 2], boxes[:, 0] + boxes[:, 2]) - np.maximum(r[..., 0], boxes[:, 0])
    cols = np.minimum(r[..., 1] + r[..., 3], boxes[:, 1] + boxes[:, 3]) - np.maximum(r[..., 1], boxes[:, 1])
    return rows, cols


def overlapping_rows(boxes: np.ndarray, r: Rect) -> np.ndarray:
    """Indices of the rectangles (rows of ``boxes``, as :data:`Rect`) that overlap ``r``."""
    rows, cols = overlap_sizes(r, boxes)
    return np.flatnonzero((rows > 0) & (cols > 0))


def piece_moves(workload: Workload, layout: OldLayout, table: Table, rect: Rect, old_rank: int | None) -> tuple[int, int]:
    """(bytes that must arrive for ``rect`` to live on the new rank that was ``old_rank``, of them
    what the checkpoint supplies): the parts the migration manifest sends, each priced as a shard
    of its own (its rows carry their optimizer state). Priced once per workload and piece."""
    old = old_rank if layout.holds_part_of(table.name, rect, old_rank) else None
    memo, key = layout.moves_of(workload), (table.name, rect, old)
    if key not in memo:
        parts = arrivals(layout, table, rect, old)
        memo[key] = (sum(rect_bytes(workload, table, piece) for _, piece in parts),
                     sum(rect_bytes(workload, table, piece) for src, piece in parts if src == CHECKPOINT))
    return memo[key]


def piece_move_bytes(workload: Workload, layout: OldLayout, table: Table, rect: Rect, old_rank: int | None) -> int:
    """Bytes that must arrive for ``rect`` to live on the new rank that was ``old_rank``."""
    return piece_moves(workload, layout, table, rect, old_rank)[0]


def rank_move_bytes(workload: Workload, layout: OldLayout, table: Table, rect: Rect,
                    new_of: Mapping[int, int]) -> np.ndarray:
    """Per new rank, :func:`piece_move_bytes` of ``rect`` there (``new_of``: old rank -> the new
    rank it became). Only the few ranks that were an old holder of part of it differ from a new
    rank, so those are priced apart: a replan's descent asked every piece of 600 tables on 1024
    ranks one rank at a time (4.5 M calls)."""
    out = np.full(workload.topology.world_size, piece_move_bytes(workload, layout, table, rect, None),
                  dtype=np.float64)
    for old_rank in sorted({src for src, _ in layout.overlapping(table.name, rect)}):
        rank = new_of.get(old_rank)
        if rank is not None:
            out[rank] = piece_move_bytes(workload, layout, table, rect, old_rank)
    return out


# New pieces x old pieces of one table overlapped at once: memory stays in tens of MB.
OVERLAP_CHUNK = 1 << 20


def retained_matrix(workload: Workload, layout: OldLayout, tables: Sequence[TablePlan]) -> np.ndarray:
    """[old rank, new rank]: bytes new rank would keep if it were that old rank (the overlaps of its
    pieces with that rank's old ones), each table's new pieces overlapped with its old ones as
    arrays (a pair of pieces at a time, 600 tables grown from 512 ranks to 1024 took minutes).
    Every entry is a whole number of bytes, exact in float64 in any order of addition."""
    kept = np.zeros((layout.world, workload.topology.world_size))
    for tp in tables:
        table = workload.table(tp.name)
        if layout.carried(table) is None or not layout.pieces.get(tp.name):
            continue
        owners, boxes = layout.boxes(tp.name)
        placed = list(rects_of(tp))
        new_ranks = np.array([rank for rank, _ in placed], dtype=np.int64)
        rects = np.array([rect for _, rect in placed], dtype=np.int64).reshape(-1, 4)
        step = max(1, OVERLAP_CHUNK // len(boxes))
        for start in range(0, len(rects), step):
            rows, cols = overlap_sizes(rects[start:start + step, None, :], boxes)
            new, old = np.nonzero((rows > 0) & (cols > 0))
            held = shard_bytes(workload.optimizer, table, rows[new, old], cols[new, old])
            np.add.at(kept, (owners[old], new_ranks[start + new]), held.astype(np.float64))
    return kept


def relabelling(workload: Workload, layout: OldLayout, tables: Sequence[TablePlan],
                keep: Sequence[int] | None = None) -> dict[int, int]:
    """new rank -> old rank, keeping the most bytes where they are (ranks without one are new).

    ``keep``: the old ranks that must survive (a shrink that drops the ranks holding least).
    """
    from scipy.optimize import linear_sum_assignment

    kept = retained_matrix(workload, layout, tables)
    rows = np.array(sorted(keep)) if keep is not None else np.arange(layout.world)
    old, new = linear_sum_assignment(kept[rows], maximize=True)
    return {int(n): int(rows[o]) for o, n in zip(old, new)}


def given_survivors(layout: OldLayout, new_world: int) -> dict[int, int]:
    """new rank -> old rank after a failure: the live old ranks in their order, then new ranks."""
    alive = [r for r in range(layout.world) if r not in layout.lost]
    return {new: old for new, old in enumerate(alive[:new_world])}


def restored_bytes(workload: Workload, layout: OldLayout, tables: Sequence[TablePlan], old_of: Mapping[int, int]) -> int:
    """Of :func:`moved_bytes`, what is read from the checkpoint (held only by lost ranks)."""
    return sum(piece_moves(workload, layout, workload.table(tp.name), rect, old_of.get(rank))[1]
               for tp in tables for rank, rect in rects_of(tp))


def survivors(workload: Workload, layout: OldLayout) -> list[int]:
    """The old ranks that stay when the world shrinks: those holding the most bytes."""
    held = np.zeros(layout.world)
    for name, by_rank in layout.pieces.items():
        if name not in workload.tables_by_name:
            continue
        table = workload.table(name)
        for rank, rects in by_rank.items():
            held[rank] += sum(rect_bytes(workload, table, existing(layout, table, r)) for r in rects)
    order = sorted(range(layout.world), key=lambda r: (-held[r], r))
    return sorted(order[: workload.topology.world_size])


def forced_bytes(workload: Workload, layout: OldLayout, kept_ranks: Sequence[int]) -> int:
    """Bytes no plan can leave in place: what only dropped old ranks held (replicas elsewhere
    do not count)."""
    alive = set(kept_ranks)
    total = 0
    for name, by_rank in layout.pieces.items():
        if name not in workload.tables_by_name:
            continue
        table = workload.table(name)
        survivors_hold = [r for rank in alive for r in by_rank.get(rank, ())]
        for rank, rects in by_rank.items():
            if rank in alive:
                continue
            for rect in rects:
                part = existing(layout, table, rect)
                if part and not any(overlap(part, s) == part for s in survivors_hold):
                    total += rect_bytes(workload, table, part)
    return total


def moved_bytes(workload: Workload, layout: OldLayout, tables: Sequence[TablePlan], old_of: Mapping[int, int]) -> int:
    """Bytes the new plan ``tables`` moves, new rank ``r`` being old rank ``old_of[r]``."""
    return sum(piece_move_bytes(workload, layout, workload.table(tp.name), rect, old_of.get(rank))
               for tp in tables for rank, rect in rects_of(tp))
