"""The work one shard does per iteration, split into terms that hardware constants multiply.

Forward: a per-table cost, a per-lookup cost, index bytes read, row bytes served by cache (hits)
and by memory (misses, per dim class and per memory tier), pooled output bytes written.
Backward: the same bookkeeping twice (sort and scatter), output-gradient bytes, per-lookup
gradient accumulation, and a read-modify-write of weights and optimizer state per distinct row.
A cost model is a set of coefficients over these terms; the analytic model takes them from a
hardware profile, the calibrated one fits them to measurements.
"""

from __future__ import annotations

import math
import numpy as np

from shardopt.arithmetic.access import cache_buckets, row_buckets
from shardopt.arithmetic.exact import dot
from typing import Sequence

from shardopt.arithmetic.traffic import INDEX_BYTES, OUTPUT_BYTES
from shardopt.costmodel.cpu_cache import CacheRows, characteristic_time
from shardopt.core.hardware import Hardware
from shardopt.arithmetic.memory import UVM_CACHE_LOAD_FACTOR
from shardopt.core.layout import optimizer_state_bytes
from shardopt.core.workload import Table

DIM_CLASSES = (32, 64, 128, 256)  # effective bandwidth differs with how many lanes a row fills
DENSE_PASSES = 6  # a dense replica's step over each row: gradient, weights, Adagrad state, read and written

FWD_TERMS = (
    "table",
    "lookup",
    "index_bytes",
    "hit_bytes",
    "llc_bytes",
    "accum_bytes",
    *(f"miss_bytes_d{d}" for d in DIM_CLASSES),
    "miss_bytes_half",
    "miss_bytes_far",
    "uvm_miss_bytes",
    "out_bytes",
    "repeat_miss_bytes",  # since model version 3; older files read 0 (repeats within an iteration hit)
)
# The learned nets read the terms of the files they were trained in (version 2's), so that a
# version 2 file's nets load unchanged.
LEARNED_FWD_TERMS = FWD_TERMS[:-1]
BWD_TERMS = (
    "table",
    "lookup",
    "index_bytes",
    "out_bytes",
    "accum_bytes",
    "update_hit_bytes",
    *(f"update_bytes_d{d}" for d in DIM_CLASSES),
    "update_bytes_half",
    "update_bytes_far",
    "uvm_update_bytes",
)


def dim_class(cols: int) -> int:
    for d in DIM_CLASSES:
        if cols <= d:
            return d
    return DIM_CLASSES[-1]


def line_rounded(size: int, line: int) -> int:
    """Memory moves in whole cache lines (or GPU sectors)."""
    return max(line, int(math.ceil(size / line)) * line) if size else 0


def _row_bytes(hw: Hardware, table: Table, cols: int, optimizer: str) -> tuple[int, int]:
    """Bytes a row of the shard and its optimizer state occupy, in whole lines."""
    row_bytes = line_rounded(cols * table.element_bytes, hw.min_access_bytes)
    state_bytes = line_rounded(optimizer_state_bytes(optimizer, 1, cols), hw.min_access_bytes)
    return row_bytes, state_bytes


def cache_rows(
    hw: Hardware, table: Table, rows: int, cols: int, *, lookups: float, optimizer: str = "rowwise_adagrad"
) -> CacheRows:
    """The shard's rows as a shared cache sees them: bytes (row and optimizer state, both touched
    each iteration) and draws per iteration, per access bucket.

    Ids are hashed into row blocks, so a row-wise shard holds a ``rows / num_embeddings`` slice of
    every popularity level, and each of its rows is drawn as often as in the whole table.
    """
    return _rows_seen(_context(hw, table, optimizer), rows, cols, lookups)[1]


def _rows_seen(ctx: "_TableContext", rows: int, cols: int, lookups: float) -> tuple[np.ndarray, CacheRows]:
    """(each access bucket's rows in the shard, :func:`cache_rows`)."""
    row_frac = rows / ctx.table.num_embeddings
    row_bytes, state_bytes = ctx.row_bytes(cols)
    share = ctx.counts * row_frac
    return share, CacheRows(bytes=share * (row_bytes + state_bytes), rate=ctx.probs * (lookups / row_frac))


def cache_times(hw: Hardware, rows: Sequence[CacheRows]) -> tuple[float, float]:
    """Che's characteristic times of the near cache and the last level for shards sharing them."""
    near = characteristic_time(rows, hw.cache_bytes)
    llc = characteristic_time(rows, hw.llc_bytes) if hw.llc_bytes else near
    return near, max(llc, near)


def kernel_cache(
    hw: Hardware, shards: Sequence[tuple[Table, int, int, float]], optimizer: str = "rowwise_adagrad"
) -> tuple[tuple[float, float], float]:
    """(cache times, footprint bytes) of one fused kernel's shards, given as (table, rows, cols,
    lookups): what each of them passes to :func:`shard_terms` as ``cache_time`` and ``kernel_bytes``."""
    rows = [cache_rows(hw, t, r, c, lookups=n, optimizer=optimizer) for t, r, c, n in shards]
    span = sum(r * c * t.element_bytes for t, r, c, _ in shards)
    return cache_times(hw, rows), span


class _TableContext:
    """What :func:`shard_terms` reads of one table on one machine, gathered once: a search prices
    tens of thousands of pieces of a thousand tables, and hashing the table and the hardware (the
    keys of cached lookups) cost as much as the arithmetic."""

    __slots__ = ("table", "hw", "optimizer", "buckets", "counts", "probs", "features", "half", "lines", "alone")

    def __init__(self, hw: Hardware, table: Table, optimizer: str) -> None:
        self.table, self.hw, self.optimizer = table, hw, optimizer
        self.buckets = row_buckets(table)
        coarse = cache_buckets(table)
        self.counts, self.probs = coarse.counts, coarse.probs
        self.features = len(table.features)
        self.half = table.data_type in ("fp16", "bf16")
        self.lines: dict[int, tuple[int, int]] = {}  # cols -> _row_bytes
        self.alone: dict[tuple, tuple[float, float]] = {}  # (rows, cols, lookups) -> cache times alone

    def row_bytes(self, cols: int) -> tuple[int, int]:
        held = self.lines.get(cols)
        if held is None:
            held = self.lines[cols] = _row_bytes(self.hw, self.table, cols, self.optimizer)
        return held


_CONTEXTS: dict[tuple[int, int, str], _TableContext] = {}
_CONTEXTS_MAX = 1 << 14


def _context(hw: Hardware, table: Table, optimizer: str) -> _TableContext:
    """The table's context, by identity (the context holds both objects, so no id is reused while
    it lives)."""
    held = _CONTEXTS.get((id(hw), id(table), optimizer))
    if held is None or held.hw is not hw or held.table is not table:
        if len(_CONTEXTS) >= _CONTEXTS_MAX:
            _CONTEXTS.clear()
        held = _CONTEXTS[(id(hw), id(table), optimizer)] = _TableContext(hw, table, optimizer)
    return held


class ShardBasis:
    """A shard's terms before its kernel's caches are known: everything but the characteristic
    times. A search prices one shard on an average rank, alone (a bound's floor) and in the
    kernels of the ranks it tries, and only the caches differ between them."""

    __slots__ = ("table", "cols", "lookups", "row_bytes", "cached", "alone", "unique_rows", "unique", "repeat_rows",
                 "in_memory", "outputs", "grad_outputs", "update_bytes", "rows_span", "miss_slot", "fwd_fixed",
                 "bwd_fixed", "dense")

    def __init__(self, hw: Hardware, table: Table, rows: int, cols: int, lookups: float, samples: int,
                 optimizer: str, compute_kernel: str, cache_load_factor: float | None) -> None:
        ctx = _context(hw, table, optimizer)
        row_frac = rows / table.num_embeddings
        row_bytes, state_bytes = ctx.row_bytes(cols)
        share, cached = _rows_seen(ctx, rows, cols, lookups)
        alone = ctx.alone.get((rows, cols, lookups))
        if alone is None:
            alone = ctx.alone[(rows, cols, lookups)] = cache_times(hw, [cached])
        # Distinct rows drawn per bucket this iteration; repeats within the iteration hit the cache,
        # first draws hit if the row was drawn within the cache's characteristic time.
        unique_rows = share * -np.expm1(-cached.rate)
        unique = float(unique_rows.sum())
        in_memory = _device_share(rows, row_frac, compute_kernel, ctx.buckets, cache_load_factor)
        self.table, self.cols, self.lookups, self.row_bytes = table, cols, lookups, row_bytes
        self.cached, self.alone, self.unique_rows, self.unique = cached, alone, unique_rows, unique
        self.repeat_rows = np.maximum(share * cached.rate - unique_rows, 0.0)
        self.in_memory = in_memory
        # Output rows: one pooled row per feature and sample, or (a sequence table) one per id.
        self.outputs = samples * ctx.features if table.pooled else lookups
        # The backward reads the output gradient for the ids it holds: a row-wise piece of a
        # table pays its lookups' share of it, not every bag's (measured: a quarter's backward is a
        # quarter of its table's, benchmarks/results/cut_pieces.md; whole tables are unchanged).
        whole = samples * table.pooling_factor
        self.grad_outputs = self.outputs * min(1.0, lookups / whole) if table.pooled and whole > 0 else self.outputs
        self.update_bytes = unique * 2 * (row_bytes + state_bytes)
        self.rows_span = rows * row_bytes
        # A data-parallel replica (TorchRec's dense kernel, shardopt/profile/dense.py): its backward
        # scatters every lookup into a gradient as large as the table, and Adagrad then reads and
        # writes the gradient, the weights and a state per element: every row, six times its bytes.
        self.dense = compute_kernel == "dense"
        if self.dense:
            self.update_bytes = rows * DENSE_PASSES * row_bytes
        # 16-bit rows are converted to fp32 on the fly, at a cost of their own.
        self.miss_slot = -1 if ctx.half else DIM_CLASSES.index(dim_class(cols))
        # Rows left in host memory (UVM) leave the GPU's caches between iterations (the backward writes
        # them back over the host link): each distinct row drawn is read over the link once per iteration.
        self.fwd_fixed = (unique * row_bytes * (1 - in_memory), self.outputs * cols * OUTPUT_BYTES)
        self.bwd_fixed = self.update_bytes * (1 - in_memory)  # written back to host memory each iteration


def shard_terms(
    hw: Hardware,
    table: Table,
    rows: int,
    cols: int,
    *,
    lookups: float,
    samples: int,
    optimizer: str = "rowwise_adagrad",
    compute_kernel: str = "fused",
    cache_load_factor: float | None = None,
    cache_time: tuple[float, float] | None = None,
    kernel_bytes: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward terms, backward terms) in the order of FWD_TERMS and BWD_TERMS.

    ``cache_time`` holds the characteristic times (near cache, last level) of the caches this
    shard shares with the rest of its kernel (:func:`cache_times` over all its shards), and
    ``kernel_bytes`` the kernel's whole footprint; without them the shard runs alone.
    """
    basis = ShardBasis(hw, table, rows, cols, lookups, samples, optimizer, compute_kernel, cache_load_factor)
    return terms_in_cache(hw, basis, cache_time, kernel_bytes)


def terms_in_cache(
    hw: Hardware, basis: ShardBasis, cache_time: tuple[float, float] | None = None, kernel_bytes: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`shard_terms` of a shard's basis in a kernel whose caches have ``cache_time``."""
    b = basis
    lookups, row_bytes, cols, in_memory = b.lookups, b.row_bytes, b.cols, b.in_memory
    # Sharing the caches can only shorten the shard's characteristic times.
    near_time, llc_time = b.alone if cache_time is None else (min(x, y) for x, y in zip(b.alone, cache_time))
    repeats = max(lookups - b.unique, 0.0)
    if lookups > 0:
        # One cache level (a GPU's), or both holding every row: the same sum once.
        near_hit = b.cached.hit(near_time)
        llc_hit = near_hit if llc_time == near_time else b.cached.hit(llc_time)
        near_rows = dot(b.unique_rows, near_hit)
        llc_rows = near_rows if llc_time == near_time else dot(b.unique_rows, llc_hit)
        # Repeats are priced as hits above; the draws among them that Che's approximation would
        # miss (a row back after the last level let it go) are a term of their own, whose constant
        # the fit weighs: 0 keeps repeats hits (a version 2 file), a miss's extra cost prices every
        # draw by Che. Measured on one CPU, the fit chose about a fifth of that.
        repeat_miss = 0.0 if repeats <= 0 or math.isinf(llc_time) else dot(b.repeat_rows, 1.0 - llc_hit)
        near, hit = (repeats + near_rows) / lookups, (repeats + llc_rows) / lookups
    else:
        near = hit = repeat_miss = 0.0
    near = min(near, hit)
    miss_bytes = lookups * row_bytes * (1 - hit)
    # The backward pass updates each drawn row less than an iteration after the forward read it:
    # still cached if the last level holds an iteration's worth of the kernel's rows (T >= 1).
    # A dense replica's step streams the whole table: cached where its passes fit the last level.
    update_hit = min(1.0, llc_time) if not b.dense else float(b.update_bytes <= (hw.llc_bytes or hw.cache_bytes))
    update_miss = b.update_bytes * (1 - update_hit)
    # Far from the cache (TLB misses, DRAM pages) a miss costs more: a term growing with log2 of how many
    # cache sizes the kernel spans (its tables share the TLB as the cache) bends bandwidth with footprint.
    span = max(b.rows_span, kernel_bytes or 0.0, 1.0)
    far = max(0.0, math.log2(span / hw.cache_bytes))
    fwd_miss = [0.0] * (len(DIM_CLASSES) + 1)  # per dim class, then 16-bit rows
    fwd_miss[b.miss_slot] = miss_bytes * in_memory
    fwd = [
        1.0,  # table
        lookups,  # lookup
        lookups * INDEX_BYTES,  # index_bytes
        lookups * row_bytes * near,  # hit_bytes
        lookups * row_bytes * (hit - near),  # llc_bytes
        lookups * cols * OUTPUT_BYTES if b.table.pooled else 0.0,  # accum_bytes: summing rows into bags
        *fwd_miss,  # miss_bytes_d*, miss_bytes_half
        miss_bytes * in_memory * far,  # miss_bytes_far
        *b.fwd_fixed,  # uvm_miss_bytes; out_bytes: a pooled row per feature, or a row per id
        repeat_miss * row_bytes * in_memory,  # repeat_miss_bytes
    ]
    bwd_update = [0.0] * (len(DIM_CLASSES) + 1)
    bwd_update[b.miss_slot] = update_miss * in_memory
    passes = 1 if b.dense else 2  # the fused kernel sorts the ids, then scatters; the dense one scatters
    bwd = [
        1.0,  # table
        passes * lookups,  # lookup
        passes * lookups * INDEX_BYTES,  # index_bytes
        b.grad_outputs * cols * OUTPUT_BYTES,  # out_bytes
        lookups * cols * OUTPUT_BYTES,  # accum_bytes
        b.update_bytes * update_hit,  # update_hit_bytes
        *bwd_update,  # update_bytes_d*, update_bytes_half
        update_miss * in_memory * far,  # update_bytes_far
        b.bwd_fixed,  # uvm_update_bytes
    ]
    return np.array(fwd), np.array(bwd)


def _device_share(rows, row_frac, compute_kernel, buckets, cache_load_factor=None) -> float:
    """Share of missed rows read from device memory rather than over the host link (UVM).

    A caching kernel keeps the rows it sees most in HBM (LRU/LFU), so its hit share is the access
    share of the table's hottest ``load_factor x rows`` rows: RecShard's hot tier.
    """
    if compute_kernel == "fused_uvm":
        return 0.0
    if compute_kernel == "fused_uvm_caching":
        factor = UVM_CACHE_LOAD_FACTOR if cache_load_factor is None else cache_load_factor
        return buckets.top_share(factor * rows / row_frac)
    return 1.0


def hardware_coefficients(hw: Hardware) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per unit of each term, from a hardware profile's bandwidths and overheads."""
    mem, cache, uvm = 1 / (hw.mem_bw_gbps * 1e9), 1 / (hw.cache_bw_gbps * 1e9), 1 / (hw.uvm_bw_gbps * 1e9)
    bwd_mem = 1 / ((hw.bwd_mem_bw_gbps or hw.mem_bw_gbps) * 1e9)
    fwd = dict(
        table=hw.table_us * 1e-6, lookup=hw.lookup_ns * 1e-9, index_bytes=mem, hit_bytes=cache, llc_bytes=cache,
        accum_bytes=0.0, uvm_miss_bytes=uvm, repeat_miss_bytes=0.0, out_bytes=mem, miss_bytes_half=mem, miss_bytes_far=0.0,
        **{f"miss_bytes_d{d}": mem for d in DIM_CLASSES},
    )
    bwd = dict(
        table=hw.table_us * 1e-6, lookup=hw.lookup_ns * 1e-9, index_bytes=bwd_mem, out_bytes=bwd_mem,
        accum_bytes=cache, update_hit_bytes=cache, uvm_update_bytes=uvm, update_bytes_half=bwd_mem,
        update_bytes_far=0.0, **{f"update_bytes_d{d}": bwd_mem for d in DIM_CLASSES},
    )
    return np.array([fwd[k] for k in FWD_TERMS]), np.array([bwd[k] for k in BWD_TERMS])
