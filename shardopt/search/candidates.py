"""Candidates: the ways one table can be cut into shards, before any rank is chosen.

A candidate lists its pieces (row/col rectangles) and how their ranks are chosen: ``free`` pieces
go to any rank, ``host`` pieces to the ranks of one host (piece i on the host's i-th rank when
``fixed`` too), ``fixed`` pieces to ranks 0..W-1 in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shardopt.workload import Table, Workload

MIN_CW_DIM = 32  # narrower column shards waste FBGEMM's 4-wide vector lanes per warp

Placement = Literal["free", "host", "fixed"]


@dataclass(frozen=True)
class Piece:
    row_offset: int
    col_offset: int
    rows: int
    cols: int


@dataclass(frozen=True)
class Candidate:
    """One way to cut a table: its sharding type, pieces, and how ranks are picked."""

    table: str
    sharding_type: str
    pieces: tuple[Piece, ...]
    placement: Placement
    compute_kernel: str = "fused"

    @property
    def label(self) -> str:
        n = len(self.pieces)
        return self.sharding_type if n == 1 else f"{self.sharding_type}x{n}"


def split_evenly(total: int, parts: int, unit: int = 1) -> list[int]:
    """``parts`` sizes that add to ``total``, multiples of ``unit``, as equal as possible."""
    units, rest = divmod(total // unit, parts)
    sizes = [(units + (1 if i < rest else 0)) * unit for i in range(parts)]
    sizes[-1] += total - sum(sizes)
    return sizes


def _row_pieces(table: Table, parts: int) -> tuple[Piece, ...]:
    pieces, offset = [], 0
    for rows in split_evenly(table.num_embeddings, parts):
        pieces.append(Piece(offset, 0, rows, table.embedding_dim))
        offset += rows
    return tuple(pieces)


def _col_pieces(table: Table, parts: int) -> tuple[Piece, ...]:
    pieces, offset = [], 0
    for cols in split_evenly(table.embedding_dim, parts, unit=4):
        pieces.append(Piece(0, offset, table.num_embeddings, cols))
        offset += cols
    return tuple(pieces)


def column_splits(table: Table, max_parts: int) -> list[int]:
    """Powers of two k >= 2, up to ``max_parts``, whose shards keep at least MIN_CW_DIM columns."""
    out, k = [], 2
    while k <= max_parts and table.embedding_dim // k >= MIN_CW_DIM:
        out.append(k)
        k *= 2
    return out


def table_candidates(workload: Workload, table: Table) -> list[Candidate]:
    """Candidates ordered from least to most split, of the table's allowed sharding types only.

    Every allowed type yields at least one candidate, so an allow-list is always honoured: a table
    too narrow to split by columns gets a one-piece column-wise cut, and one with fewer rows than
    ranks a row-wise cut over as many ranks as it has rows.
    """
    topo = workload.topology
    world, local = topo.world_size, topo.ranks_per_host
    rows = table.num_embeddings
    allowed = set(table.allowed_sharding_types)
    whole = (Piece(0, 0, rows, table.embedding_dim),)
    out: list[Candidate] = []
    if "table_wise" in allowed:
        out.append(Candidate(table.name, "table_wise", whole, "free"))
    # Column-wise on any ranks dominates the same cut held to one host; offer the latter only alone.
    if "column_wise" in allowed:
        for k in column_splits(table, world) or [1]:
            out.append(Candidate(table.name, "column_wise", _col_pieces(table, k), "free"))
    elif "table_column_wise" in allowed:
        for k in column_splits(table, local) or [1]:
            out.append(Candidate(table.name, "table_column_wise", _col_pieces(table, k), "host"))
    # On one host, table-row-wise is row-wise by another name; offer it alone then.
    if "table_row_wise" in allowed and (topo.num_hosts > 1 or "row_wise" not in allowed):
        pieces = _row_pieces(table, min(local, rows))
        out.append(Candidate(table.name, "table_row_wise", pieces, "host"))
    if "row_wise" in allowed:
        out.append(Candidate(table.name, "row_wise", _row_pieces(table, min(world, rows)), "fixed"))
    if "data_parallel" in allowed and not out:
        # Replicating a table on every rank is a candidate only when nothing else is allowed.
        out.append(Candidate(table.name, "data_parallel", whole * world, "fixed"))
    if "table_wise" in allowed:
        # A one-piece column or row cut is table-wise under another name.
        out = [c for c in out if len(c.pieces) > 1 or c.sharding_type == "table_wise"]
    return out
