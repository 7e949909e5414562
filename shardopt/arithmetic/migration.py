"""The migration manifest of a re-shard, and the check that it turns the old plan into the new one.

Each move is a rectangle of a table (rows, columns) sent from a rank of the old world to a rank of
the new one, with its bytes (weights and optimizer state). What a new rank keeps is what its old
rank (``ranks``: new -> old) held of its new pieces; rows that did not exist are initialised and
move nothing. The check rebuilds every new piece from what its rank kept plus what arrived: each
byte that existed must come from exactly one place, a rank that held it. After a failure
(``lost_ranks``) nothing is sent from a lost rank: what only lost ranks held is ``restored``, read
from the last checkpoint (which holds every byte the old plan held), and counts as bytes moved.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from shardopt.arithmetic.movement import (
    CHECKPOINT, OldLayout, Rect, arrivals, existing, minus, overlap, rect_bytes, rects_of,
)
from shardopt.core.plan import Plan, TablePlan
from shardopt.core.workload import Workload

MOVES_FORMAT = "shardopt-moves"
MOVES_VERSION = 1


def _move(workload: Workload, table, rect: Rect, src: int, dest: int) -> dict:
    return {"table": table.name, "rows": [rect[0], rect[0] + rect[2]], "cols": [rect[1], rect[1] + rect[3]],
            "from_rank": src, "to_rank": dest, "bytes": rect_bytes(workload, table, rect)}


def migration(workload: Workload, layout: OldLayout, tables: Sequence[TablePlan], old_of: Mapping[int, int]) -> dict:
    """The moves that turn the old plan into ``tables`` (ranks of the new world)."""
    moves, restored, initialised = [], [], []
    for tp in tables:
        table = workload.table(tp.name)
        for rank, rect in rects_of(tp):
            part = existing(layout, table, rect)
            for fresh in minus([rect], [part] if part else []):
                initialised.append({"table": tp.name, "rows": [fresh[0], fresh[0] + fresh[2]],
                                    "cols": [fresh[1], fresh[1] + fresh[3]], "rank": rank})
            for src, piece in arrivals(layout, table, rect, old_of.get(rank)):
                move = _move(workload, table, piece, src, rank)
                if src == CHECKPOINT:
                    del move["from_rank"]
                    restored.append(move)
                else:
                    moves.append(move)
    out = {"format": MOVES_FORMAT, "version": MOVES_VERSION,
           "ranks": {str(new): old for new, old in sorted(old_of.items())},
           "moved_bytes": sum(m["bytes"] for m in moves + restored), "moves": moves, "initialised": initialised}
    if layout.lost:  # moved_bytes counts both: what peers send and what the checkpoint supplies
        out.update(lost_ranks=sorted(layout.lost), restored=restored, restored_bytes=sum(m["bytes"] for m in restored))
    return out


def _rect(move: dict) -> Rect:
    (r0, r1), (c0, c1) = move["rows"], move["cols"]
    return r0, c0, r1 - r0, c1 - c0


def _area(rect: Rect) -> int:
    return rect[2] * rect[3]


def check_moves(workload: Workload, old: Plan, new: Plan, manifest: dict) -> list[str]:
    """What is wrong with ``manifest`` as the way from ``old`` to ``new``; empty when it is exact."""
    problems = []
    try:
        old_of = {int(k): int(v) for k, v in manifest["ranks"].items()}
        moves = list(manifest["moves"])
        lost = frozenset(int(r) for r in manifest.get("lost_ranks", []))
        restored = list(manifest.get("restored", []))
    except (KeyError, TypeError, ValueError, AttributeError):
        return ["ranks / moves / lost_ranks / restored: missing or malformed"]
    layout = OldLayout.of(old, lost)
    problems += [f"ranks: new rank {n} is old rank {o}, which was lost" for n, o in sorted(old_of.items()) if o in lost]
    if restored and not lost:
        problems.append("restored: pieces read from the checkpoint, but no rank was lost (lost_ranks)")
    arriving: dict[tuple[str, int], list[Rect]] = {}
    for i, move in enumerate(moves):
        try:
            rect, name, src, dest = _rect(move), move["table"], int(move["from_rank"]), int(move["to_rank"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"moves[{i}]: missing or malformed fields")
            continue
        if src in lost:
            problems.append(f"moves[{i}]: old rank {src} was lost; its pieces come from the checkpoint (restored)")
        elif not any(overlap(rect, h) == rect for h in layout.pieces.get(name, {}).get(src, ())):
            problems.append(f"moves[{i}]: old rank {src} did not hold rows {move['rows']} cols {move['cols']} of {name!r}")
        arriving.setdefault((name, dest), []).append(rect)
    for i, piece in enumerate(restored):
        try:
            rect, name, dest = _rect(piece), piece["table"], int(piece["to_rank"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"restored[{i}]: missing or malformed fields")
            continue
        extent = layout.extent.get(name)
        if extent is None or overlap(rect, (0, 0, *extent)) != rect:
            problems.append(f"restored[{i}]: rows {piece['rows']} cols {piece['cols']} of {name!r} are not in the"
                            " old plan, so not in its checkpoint")
        arriving.setdefault((name, dest), []).append(rect)
    targets: dict[tuple[str, int], list[Rect]] = {}
    for tp in new.tables:
        table = workload.table(tp.name)
        for rank, rect in rects_of(tp):
            part = existing(layout, table, rect)
            targets.setdefault((tp.name, rank), []).extend([part] if part else [])
    for (name, rank), parts in targets.items():
        home = layout.pieces.get(name, {}).get(old_of.get(rank, -1), ())
        kept = [o for p in parts for h in home if (o := overlap(p, h))]
        got = arriving.pop((name, rank), [])
        pieces = kept + got
        overlapping = any(overlap(a, b) for i, a in enumerate(pieces) for b in pieces[i + 1:])
        outside = [g for g in got if not any(overlap(g, p) == g for p in parts)]
        if overlapping or outside or sum(map(_area, pieces)) != sum(map(_area, parts)):
            problems.append(f"table {name!r} rank {rank}: kept and arriving rows do not rebuild its pieces exactly")
    for (name, rank) in arriving:
        problems.append(f"moves: table {name!r} sent to rank {rank}, which holds no piece of it")
    return problems
