"""Candidates: the ways one table can be cut into shards, before any rank is chosen.

A candidate lists its pieces (row/col rectangles) and how their ranks are chosen: ``free`` pieces
go to any rank, ``host`` pieces to the ranks of one host (piece i on the host's i-th rank when
``fixed`` too), ``fixed`` pieces to ranks 0..W-1 in order.

Beyond TorchRec's kinds over all ranks, three come from the research:
- row-wise over a subset of 2, 4, ... ranks (a big table's memory spread without paying every
  rank's partial-sum traffic);
- data-parallel replicas of small hot tables (no all-to-all, a gradient all-reduce instead);
- RecShard's hot/cold tiers: on GPUs, a ``fused_uvm_caching`` table whose HBM cache holds the rows
  that draw 80/90/95/99% of its lookups, the load factor read off the table's access CDF;
- FlexShard's hot rows: the few rows that draw half (or 80%) of a skewed table's lookups
  replicated on every rank, the rest row-wise (``shardopt/arithmetic/hotrows.py``).
"""

from __future__ import annotations

from functools import lru_cache
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import Literal, NamedTuple, Optional, Sequence

from shardopt.arithmetic.checks import UVM_KERNELS
from shardopt.core.plan import Shard, TablePlan
from shardopt.costmodel.base import CostModel, ShardCost
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.layout import shard_bytes
from shardopt.core.workload import Table, Workload
from shardopt.search.pricing import piece_costs, pieces_total
from shardopt.search.rules import pinned_cuts
from shardopt.search.shared import shared
from shardopt.search.tiers import uvm_tiers

MIN_CW_DIM = 32  # narrower column shards waste FBGEMM's 4-wide vector lanes per warp
SUBSET_MIN_CAP_SHARE = 1 / 4  # row-wise subsets for tables at least this share of a rank's HBM
DP_MAX_CAP_SHARE = 1 / 64  # data-parallel replicas only for tables at most this share
# A table whose cheapest single piece costs more than this share of a balanced rank's load is
# hot: however small in memory, it gets every cut that spreads its lookups (the ILP chooses).
HOT_COST_SHARE = 0.25
HOT_MAX_SUBSET = 8  # row-wise subsets of hot tables over 2, 4, 8 ranks (each piece free to go anywhere)
HOT_DP_MAX_CAP_SHARE = 1 / 8  # a hot table may be replicated up to this share of a rank's memory
# What runs with what, for a table whose compute_kernels leave no cut (refused in one line).
KERNEL_PAIRS = ("shardopt plans fused, fused_uvm and fused_uvm_caching on cuda with a ddr_cap, and dense for"
                " data_parallel")

Placement = Literal["free", "host", "fixed"]
# "torchrec": only cuts TorchRec's sharders can run (no row-wise subsets, no hot-row replicas;
# on CPU only data-parallel, table-, column- and table-column-wise). "all": every candidate.
CandidateSet = Literal["all", "torchrec"]
TORCHREC_TYPES = {
    "cpu": ("data_parallel", "table_wise", "column_wise", "table_column_wise"),
    "cuda": ("data_parallel", "table_wise", "column_wise", "table_column_wise", "row_wise",
             "table_row_wise"),
}


class Piece(NamedTuple):
    """A rectangle of a table: a named tuple, since a row-wise cut over 1024 ranks makes 1024."""

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
    cache_load_factor: Optional[float] = None
    replicated_rows: Optional[int] = None  # FlexShard: hot rows on every rank beside the pieces

    @property
    def label(self) -> str:
        n = len(self.pieces)
        base = self.sharding_type if n == 1 else f"{self.sharding_type}x{n}"
        if self.compute_kernel == "fused_uvm_caching":
            base += f"@uvm{self.cache_load_factor:g}"
        if self.replicated_rows:
            base += f"+hot{self.replicated_rows}"
        return base


def split_evenly(total: int, parts: int, unit: int = 1) -> list[int]:
    """``parts`` sizes that add to ``total``, multiples of ``unit``, as equal as possible."""
    units, rest = divmod(total // unit, parts)
    sizes = [(units + (1 if i < rest else 0)) * unit for i in range(parts)]
    sizes[-1] += total - sum(sizes)
    return sizes


def _row_pieces(table: Table, parts: int) -> tuple[Piece, ...]:
    return _even_row_pieces(table.num_embeddings, table.embedding_dim, parts)


@lru_cache(maxsize=4096)
def _even_row_pieces(rows: int, dim: int, parts: int) -> tuple[Piece, ...]:
    """Shared between tables of one shape: 5000 tables over 1024 ranks made five million pieces."""
    sizes = split_evenly(rows, parts)
    # tuple.__new__ in C: the named tuple's own __new__ (Python) was 5 s of 5000 x 1024's plan
    fields = zip(accumulate(sizes[:-1], initial=0), repeat(0), sizes, repeat(dim))
    return tuple(map(tuple.__new__, repeat(Piece), fields))


def release_pieces() -> None:
    """Forget the row-wise pieces kept for tables of one shape once a plan is made: at 800 tables x
    4096 ranks they are 470 MB that a planner plugin's training process would otherwise keep."""
    _even_row_pieces.cache_clear()


def _col_pieces(table: Table, parts: int) -> tuple[Piece, ...]:
    pieces, offset = [], 0
    for cols in split_evenly(table.embedding_dim, parts, unit=4):
        pieces.append(Piece(0, offset, table.num_embeddings, cols))
        offset += cols
    return tuple(pieces)


def column_splits(table: Table, max_parts: int) -> list[int]:
    """Powers of two k >= 2, up to ``max_parts``, whose shards keep at least the table's
    min_partition columns (else MIN_CW_DIM); with a min_partition, also TorchRec's own cut (blocks
    of the least multiple of 4 from min_partition up that divides the width): a user who set
    min_partition 8 on 84 columns gets the 7 shards of 12 TorchRec's planner offers."""
    dim, narrowest = table.embedding_dim, table.min_partition or MIN_CW_DIM
    out, k = [], 2
    while k <= max_parts and dim // k >= narrowest:
        if min(split_evenly(dim, k, unit=4)) >= narrowest:
            out.append(k)
        k *= 2
    if table.min_partition:
        block = next((i for i in range(narrowest, dim) if dim % i == 0 and i % 4 == 0), dim)
        if 2 <= dim // block <= max_parts and dim // block not in out:
            out = sorted([*out, dim // block])
    return out


def table_candidates(workload: Workload, table: Table, which: CandidateSet = "all") -> list[Candidate]:
    """Candidates ordered from least to most split, of the table's allowed sharding types only.

    Every allowed type yields at least one candidate, so an allow-list is always honoured: a table
    too narrow to split by columns gets a one-piece column-wise cut, and one with fewer rows than
    ranks a row-wise cut over as many ranks as it has rows.
    """
    topo = workload.topology
    world, local = topo.world_size, topo.ranks_per_host
    rows = table.num_embeddings
    allowed = set(table.allowed_sharding_types)
    research = which == "all"
    if not research:
        allowed &= set(TORCHREC_TYPES[topo.compute_device])
        if not allowed:
            raise ShardoptError(
                f"table {table.name!r}: none of its sharding_types {list(table.allowed_sharding_types)}"
                f" runs in TorchRec on {topo.compute_device} (TorchRec allows"
                f" {', '.join(TORCHREC_TYPES[topo.compute_device])})",
                kind=ErrorKind.INFEASIBLE,
            )
    whole = (Piece(0, 0, rows, table.embedding_dim),)
    size = shard_bytes(workload.optimizer, table, rows, table.embedding_dim)
    out: list[Candidate] = []
    if "table_wise" in allowed:
        out.append(Candidate(table.name, "table_wise", whole, "free"))
    if (
        "data_parallel" in allowed
        and world > 1
        and rows <= workload.batch_size * world  # its all-reduce is no bigger than its all-to-all
        and size <= topo.hbm_cap * DP_MAX_CAP_SHARE
    ):
        out.append(Candidate(table.name, "data_parallel", whole * world, "fixed", "dense"))
    # Column-wise on any ranks dominates the same cut held to one host; offer the latter only alone.
    cw_splits = []
    if "column_wise" in allowed:
        cw_splits = column_splits(table, world)
        for k in cw_splits or [1]:
            out.append(Candidate(table.name, "column_wise", _col_pieces(table, k), "free"))
    elif "table_column_wise" in allowed:
        cw_splits = column_splits(table, local)
        for k in cw_splits or [1]:
            out.append(Candidate(table.name, "table_column_wise", _col_pieces(table, k), "host"))
    # On one host, table-row-wise is row-wise by another name; offer it alone then.
    if "table_row_wise" in allowed and (topo.num_hosts > 1 or "row_wise" not in allowed):
        pieces = _row_pieces(table, min(local, rows))
        out.append(Candidate(table.name, "table_row_wise", pieces, "host"))
    if "row_wise" in allowed:
        # Row-wise over a subset: for tables too big for one rank's share, or too narrow to be
        # cut as finely by columns.
        k = 2
        while research and k < world and k <= rows:
            if size >= topo.hbm_cap * SUBSET_MIN_CAP_SHARE or k > max(cw_splits, default=1):
                out.append(Candidate(table.name, "row_wise", _row_pieces(table, k), "free"))
            k *= 2
        out.append(Candidate(table.name, "row_wise", _row_pieces(table, min(world, rows)), "fixed"))
        if research and "data_parallel" in allowed and world > 1:
            out += _hot_rows(workload, table)
    if "data_parallel" in allowed and not out:
        # Replicating a table on every rank is a candidate only when nothing else is allowed.
        out.append(Candidate(table.name, "data_parallel", whole * world, "fixed", "dense"))
    if "table_wise" in allowed:
        # A one-piece column or row cut is table-wise under another name.
        out = [c for c in out if len(c.pieces) > 1 or c.sharding_type in ("table_wise", "data_parallel")]
    out += uvm_tiers(workload, table, size, out)
    if table.compute_kernels is not None:
        out = _with_kernels(workload, table, out, "data_parallel" in allowed, whole * world)
    return out


def _with_kernels(workload: Workload, table: Table, out: list[Candidate], replicable: bool,
                  replica: tuple[Piece, ...]) -> list[Candidate]:
    """The candidates that run with the table's compute_kernels (TorchRec's constraint); none: refused."""
    kept = [c for c in out if c.compute_kernel in table.compute_kernels]
    if not kept and replicable and "dense" in table.compute_kernels:
        # Replicas are pruned above to tables small enough to gain by one; a table whose kernels
        # leave only the dense one asks for a replica, as TorchRec's constraint does.
        kept = [Candidate(table.name, "data_parallel", replica, "fixed", "dense")]
    if not kept:
        reason = "; UVM keeps rows in host memory: declare topology.ddr_cap" if uvm_without_host(workload, table) \
            else f" ({KERNEL_PAIRS})"
        raise ShardoptError(f"table {table.name!r}: no cut of its sharding_types runs with its compute_kernels"
                            f" {list(table.compute_kernels)}{reason}", kind=ErrorKind.INFEASIBLE)
    return kept


def uvm_without_host(workload: Workload, table: Table) -> bool:
    """The table lists a UVM kernel for a CUDA cluster that declares no host memory (ddr_cap) to
    hold its rows: what to declare rather than which kernel to give up."""
    topo = workload.topology
    return topo.compute_device == "cuda" and topo.ddr_cap is None and bool(set(table.compute_kernels or ()) & set(UVM_KERNELS))


def workload_candidates(
    workload: Workload, model: CostModel, which: CandidateSet = "all"
) -> tuple[dict[str, list[Candidate]], dict[str, list[list[ShardCost]]]]:
    """Every table's candidates and their piece costs (computed once per workload and model: the
    caller must not change them)."""
    return shared(model, workload, ("candidates", which), lambda: _workload_candidates(workload, model, which))


def _workload_candidates(
    workload: Workload, model: CostModel, which: CandidateSet
) -> tuple[dict[str, list[Candidate]], dict[str, list[list[ShardCost]]]]:
    """Every table's candidates and their piece costs, chosen by cost as well as memory.

    :func:`table_candidates` cuts tables by their bytes; a table small in memory but carrying a
    large share of the lookups (a few hundred thousand rows pooled a hundred times) would stay
    whole and set the step. Any table whose cheapest single piece exceeds HOT_COST_SHARE of a
    balanced rank's load gets the cuts that spread it: row-wise subsets, table-row-wise and
    column-wise as its sharding types allow, and data-parallel replicas when small.
    """
    candidates = {t.name: table_candidates(workload, t, which) for t in workload.tables}
    costs = {name: [piece_costs(workload, model, c) for c in cands] for name, cands in candidates.items()}
    world = workload.topology.world_size
    if world == 1:
        return candidates, costs  # one rank: a pin can only name it
    balanced = sum(min(map(pieces_total, per)) for per in costs.values()) / world
    for table in workload.tables:
        cands, per = candidates[table.name], costs[table.name]
        single = min((pieces_total(pieces) for c, pieces in zip(cands, per) if len(c.pieces) == 1),
                     default=0.0)
        if single <= HOT_COST_SHARE * balanced:
            continue
        known = {(c.sharding_type, c.pieces, c.compute_kernel) for c in cands}
        for extra in hot_table_cuts(workload, table, which):
            if (extra.sharding_type, extra.pieces, extra.compute_kernel) not in known:
                cands.append(extra)
                per.append(piece_costs(workload, model, extra))
    pinned_cuts(workload, candidates, costs)
    return candidates, costs


def whole_row_cut(workload: Workload, table: Table) -> int | None:
    """Into how many pieces :func:`hot_table_cuts` cuts the table row-wise over every rank, or
    None when its sharding types or kernels allow no such cut."""
    rows = table.num_embeddings
    if "row_wise" not in table.allowed_sharding_types or rows < 2:
        return None
    if table.compute_kernels is not None and "fused" not in table.compute_kernels:
        return None
    return min(workload.topology.world_size, rows)


def hot_table_cuts(
    workload: Workload, table: Table, which: CandidateSet = "all", whole_rows: bool = True
) -> list[Candidate]:
    """The cuts that spread a hot table's lookups, whatever its size (see :func:`workload_candidates`)."""
    topo = workload.topology
    world, rows = topo.world_size, table.num_embeddings
    allowed = set(table.allowed_sharding_types)
    if which != "all":
        allowed &= set(TORCHREC_TYPES[topo.compute_device])
    out: list[Candidate] = []
    if "row_wise" in allowed:
        k = 2
        while which == "all" and k < world and k <= min(rows, HOT_MAX_SUBSET):
            out.append(Candidate(table.name, "row_wise", _row_pieces(table, k), "free"))
            k *= 2
        if rows >= 2 and whole_rows:
            out.append(Candidate(table.name, "row_wise", _row_pieces(table, min(world, rows)), "fixed"))
    if "table_row_wise" in allowed and rows >= 2 and topo.ranks_per_host > 1:
        out.append(Candidate(table.name, "table_row_wise", _row_pieces(table, min(topo.ranks_per_host, rows)),
                             "host"))
    if "column_wise" in allowed:
        out += [Candidate(table.name, "column_wise", _col_pieces(table, k), "free")
                for k in column_splits(table, world)]
    size = shard_bytes(workload.optimizer, table, rows, table.embedding_dim)
    if "data_parallel" in allowed and size <= topo.hbm_cap * HOT_DP_MAX_CAP_SHARE:
        out.append(Candidate(table.name, "data_parallel", (Piece(0, 0, rows, table.embedding_dim),) * world,
                             "fixed", "dense"))
    if table.compute_kernels is not None:  # the user's kernels, as table_candidates keeps them
        out = [c for c in out if c.compute_kernel in table.compute_kernels]
    return out


def finest_cuts(workload: Workload, table: Table, whole_rows: bool = True) -> list[Candidate]:
    """The finest cut of each kind the table's sharding types allow: what a lower bound must
    consider so that its gap is a gap to what is possible, not to what was offered. Without
    ``whole_rows``, the row-wise cut over every rank is left out (see :func:`whole_row_cut`)."""
    cuts = hot_table_cuts(workload, table, "all", whole_rows=whole_rows)
    finest: dict[str, Candidate] = {}
    for c in cuts:
        if c.sharding_type not in finest or len(c.pieces) > len(finest[c.sharding_type].pieces):
            finest[c.sharding_type] = c
    return list(finest.values())


def _hot_rows(workload: Workload, table: Table) -> list[Candidate]:
    """FlexShard: replicate the hottest rows on every rank, row-wise shard the rest."""
    from shardopt.arithmetic.hotrows import hot_row_counts

    world = workload.topology.world_size
    out = []
    for hot in hot_row_counts(table):
        cold = table.num_embeddings - hot
        replica = shard_bytes(workload.optimizer, table, hot, table.embedding_dim)
        if cold < world or replica > workload.topology.hbm_cap * DP_MAX_CAP_SHARE:
            continue
        pieces, offset = [], hot
        for rows in split_evenly(cold, world):
            pieces.append(Piece(offset, 0, rows, table.embedding_dim))
            offset += rows
        out.append(Candidate(table.name, "row_wise", tuple(pieces), "fixed", replicated_rows=hot))
    return out


def table_plan(cand: Candidate, ranks: Sequence[int]) -> TablePlan:
    """The candidate's pieces on the ranks chosen for them, as a plan's table."""
    shards = tuple(
        Shard(rank=rank, offsets=(p.row_offset, p.col_offset), sizes=(p.rows, p.cols))
        for rank, p in zip(ranks, cand.pieces)
    )
    return TablePlan(
        name=cand.table, sharding_type=cand.sharding_type, compute_kernel=cand.compute_kernel,
        cache_load_factor=cand.cache_load_factor, replicated_rows=cand.replicated_rows, shards=shards,
    )
