"""The migration manifest of a re-shard, and the check that it turns the old plan into the new one.

Each move is a rectangle of a table (rows, columns) sent from a rank of the old world to a rank of
the new one, with its bytes (weights and optimizer state). What a new rank keeps is what its old
rank (``ranks``: new -> old) held of its new pieces; rows that did not exist are initialised and
move nothing. After a failure (``lost_ranks``) nothing is sent from a lost rank: what only lost
ranks held is ``restored``, read from the last checkpoint (which holds every byte the old plan
held), and counts as bytes moved. The manifest names its plan pair by their layout digests.

The check takes no claim on trust: it rebuilds every new piece from what its rank kept, what
arrived and what was initialised (each byte that existed from exactly one place, a rank that held
it or the checkpoint where only lost ranks did; each new byte initialised once), and recomputes
every byte count from the shapes and the optimizer's layout.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from shardopt.arithmetic.movement import (
    CHECKPOINT, OldLayout, Rect, arrivals, existing, minus, overlap, rect_bytes, rects_of,
)
from shardopt.core.manifest import MOVES_FORMAT, MOVES_VERSION, Manifest, layout_digest, manifest_from_dict
from shardopt.core.plan import Plan, TablePlan
from shardopt.core.workload import Workload


def _span(rect: Rect) -> dict:
    return {"rows": [rect[0], rect[0] + rect[2]], "cols": [rect[1], rect[1] + rect[3]]}


def migration(workload: Workload, layout: OldLayout, tables: Sequence[TablePlan], old_of: Mapping[int, int]) -> dict:
    """The moves that turn the old plan (``layout``) into ``tables`` (ranks of the new world)."""
    moves, restored, initialised = [], [], []
    for tp in tables:
        table = workload.table(tp.name)
        for rank, rect in rects_of(tp):
            part = existing(layout, table, rect)
            for fresh in minus([rect], [part] if part else []):
                initialised.append({"table": tp.name, **_span(fresh), "rank": rank})
            for src, piece in arrivals(layout, table, rect, old_of.get(rank)):
                entry = {"table": table.name, **_span(piece), "to_rank": rank, "bytes": rect_bytes(workload, table, piece)}
                if src == CHECKPOINT:
                    restored.append(entry)
                else:
                    moves.append({**entry, "from_rank": src})
    out = {"format": MOVES_FORMAT, "version": MOVES_VERSION, "old_plan": layout.digest,
           "new_plan": layout_digest(workload.topology.world_size, tables),
           "ranks": {str(new): old for new, old in sorted(old_of.items())},
           "moved_bytes": sum(m["bytes"] for m in moves + restored), "moves": moves, "initialised": initialised}
    if layout.lost:  # moved_bytes counts both: what peers send and what the checkpoint supplies
        out.update(lost_ranks=sorted(layout.lost), restored=restored, restored_bytes=sum(m["bytes"] for m in restored))
    return out


def _rect(piece) -> Rect:
    (r0, r1), (c0, c1) = piece.rows, piece.cols
    return r0, c0, r1 - r0, c1 - c0


def _area(rect: Rect) -> int:
    return rect[2] * rect[3]


def _tiles(pieces: list[Rect], parts: list[Rect]) -> bool:
    """``pieces`` cover ``parts`` exactly: none overlaps another, each lies in a part, areas agree."""
    overlapping = any(overlap(a, b) for i, a in enumerate(pieces) for b in pieces[i + 1:])
    outside = any(not any(overlap(g, p) == g for p in parts) for g in pieces)
    return not overlapping and not outside and sum(map(_area, pieces)) == sum(map(_area, parts))


def check_moves(workload: Workload, old: Plan, new: Plan, manifest: Manifest | dict) -> list[str]:
    """What is wrong with ``manifest`` as the way from ``old`` to ``new``; empty when it is exact.
    A dict is read as a moves file first (ShardoptError where it is not one)."""
    if isinstance(manifest, dict):
        manifest = manifest_from_dict(manifest)
    lost = frozenset(manifest.lost_ranks)
    layout = OldLayout.of(old, lost)
    problems = _pair_problems(manifest, old, new, lost)
    arriving: dict[tuple[str, int], list[Rect]] = {}
    created: dict[tuple[str, int], list[Rect]] = {}
    total = 0
    for i, move in enumerate(manifest.moves):
        rect, name = _rect(move), move.table
        if move.from_rank in lost:
            problems.append(f"moves[{i}]: old rank {move.from_rank} was lost; its pieces come from the checkpoint"
                            " (restored)")
        elif not any(overlap(rect, h) == rect for h in layout.pieces.get(name, {}).get(move.from_rank, ())):
            problems.append(f"moves[{i}]: old rank {move.from_rank} did not hold rows {list(move.rows)} cols"
                            f" {list(move.cols)} of {name!r}")
        problems += _bytes_problem(workload, f"moves[{i}]", move)
        total += move.bytes
        arriving.setdefault((name, move.to_rank), []).append(rect)
    for i, piece in enumerate(manifest.restored):
        rect, name = _rect(piece), piece.table
        if not _held_only_by(layout, name, rect, lost):
            problems.append(f"restored[{i}]: rows {list(piece.rows)} cols {list(piece.cols)} of {name!r}: not"
                            " held by lost ranks alone (a live rank sends what it held)")
        problems += _bytes_problem(workload, f"restored[{i}]", piece)
        total += piece.bytes
        arriving.setdefault((name, piece.to_rank), []).append(rect)
    for piece in manifest.initialised:
        created.setdefault((piece.table, piece.rank), []).append(_rect(piece))
    if manifest.moved_bytes != total:
        problems.append(f"moved_bytes: {manifest.moved_bytes}, where its moves and restored pieces add up to {total}")
    restored_total = sum(p.bytes for p in manifest.restored)
    if manifest.restored_bytes is not None and manifest.restored_bytes != restored_total:
        problems.append(f"restored_bytes: {manifest.restored_bytes}, where its restored pieces add up to {restored_total}")
    problems += _rebuild_problems(workload, layout, new, manifest.old_of, arriving, created)
    return problems


def _pair_problems(manifest: Manifest, old: Plan, new: Plan, lost: frozenset[int]) -> list[str]:
    """Whether the manifest is of this plan pair and its ranks are of their worlds."""
    out = []
    for field, plan in (("old_plan", old), ("new_plan", new)):
        digest = getattr(manifest, field)
        if digest is not None and digest != layout_digest(plan.world_size, plan.tables):
            out.append(f"{field}: the manifest is for another {field.replace('_', ' ')} (layout digest {digest[:12]})")
    for new_rank, old_rank in sorted(manifest.old_of.items()):
        if new_rank >= new.world_size:
            out.append(f"ranks: new rank {new_rank} is outside the new plan's world of {new.world_size}")
        if old_rank >= old.world_size:
            out.append(f"ranks: old rank {old_rank} is outside the old plan's world of {old.world_size}")
        if old_rank in lost:
            out.append(f"ranks: new rank {new_rank} is old rank {old_rank}, which was lost")
    out += [f"lost_ranks: rank {r} is outside the old plan's world of {old.world_size}" for r in lost if r >= old.world_size]
    for what, pieces in (("moves", manifest.moves), ("restored", manifest.restored)):
        out += [f"{what}[{i}]: to_rank {p.to_rank} is outside the new plan's world of {new.world_size}"
                for i, p in enumerate(pieces) if p.to_rank >= new.world_size]
    return out


def _bytes_problem(workload: Workload, where: str, piece) -> list[str]:
    table = workload.tables_by_name.get(piece.table)
    if table is None:
        return [f"{where}: table {piece.table!r} is not in the workload"]
    want = rect_bytes(workload, table, _rect(piece))
    if piece.bytes != want:
        return [f"{where}.bytes: {piece.bytes}, where rows {list(piece.rows)} cols {list(piece.cols)} of"
                f" {piece.table!r} hold {want} (weights and {workload.optimizer} state)"]
    return []


def _held_only_by(layout: OldLayout, name: str, rect: Rect, lost: frozenset[int]) -> bool:
    """``rect`` lay within the old plan and no live old rank held any of it."""
    by_rank = layout.pieces.get(name, {})
    extent = layout.extent.get(name)
    inside = extent is not None and overlap(rect, (0, 0, *extent)) == rect
    return inside and not any(overlap(rect, h) for r, held in by_rank.items() if r not in lost for h in held)


def _rebuild_problems(workload: Workload, layout: OldLayout, new: Plan, old_of: Mapping[int, int],
                      arriving: dict, created: dict) -> list[str]:
    """Every new piece: what existed, from its kept and arriving rows exactly; what did not, from
    its initialised rows exactly."""
    problems = []
    for tp in new.tables:
        table = workload.tables_by_name.get(tp.name)
        if table is None:
            problems.append(f"new plan: table {tp.name!r} is not in the workload")
            continue
        for rank, rect in rects_of(tp):
            part = existing(layout, table, rect)
            parts, fresh = ([part] if part else []), minus([rect], [part] if part else [])
            home = layout.pieces.get(tp.name, {}).get(old_of.get(rank, -1), ())
            kept = [o for p in parts for h in home if (o := overlap(p, h))]
            got = [g for g in arriving.get((tp.name, rank), []) if any(overlap(g, p) for p in [rect])]
            made = [c for c in created.get((tp.name, rank), []) if overlap(c, rect)]
            if not _tiles(kept + got, parts):
                problems.append(f"table {tp.name!r} rank {rank}: kept and arriving rows do not rebuild its pieces"
                                " exactly (a hole, a piece twice, or rows it does not hold)")
            if not _tiles(made, fresh):
                problems.append(f"table {tp.name!r} rank {rank}: its initialised rows are not exactly the rows that"
                                " did not exist (one initialised twice, or a row that existed initialised instead of"
                                " moved)")
    problems += _strays(new, arriving, "moves / restored: table {0!r} sent to rank {1}")
    problems += _strays(new, created, "initialised: table {0!r} on rank {1}")
    return problems


def _strays(new: Plan, pieces: dict, text: str) -> list[str]:
    """Pieces for a (table, rank) that holds no piece of the table, or lying outside every one."""
    held: dict[tuple[str, int], list[Rect]] = {}
    for tp in new.tables:
        for rank, rect in rects_of(tp):
            held.setdefault((tp.name, rank), []).append(rect)
    out = []
    for key, rects in pieces.items():
        homes = held.get(key, [])
        if not homes or any(not any(overlap(r, h) == r for h in homes) for r in rects):
            out.append(text.format(*key) + ", which holds no such piece of it")
    return out
