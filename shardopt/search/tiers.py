"""Host-memory tiers of a table's cuts (``fused_uvm_caching``, ``fused_uvm``): on cuda, with a
declared ddr_cap.

With access statistics, RecShard's hot/cold tiers read off them (tables big enough to matter).
Without (uniform access: no hot set to read), when HBM is short or the table's kernels ask for
UVM, TorchRec's default cache share and plain UVM. A fixed ``cache_load_factor`` (the user's
CacheParams.load_factor) replaces the chosen shares.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING

from shardopt.arithmetic.access import row_buckets
from shardopt.arithmetic.memory import UVM_CACHE_LOAD_FACTOR
from shardopt.core.layout import shard_bytes, weight_bytes
from shardopt.core.workload import Table, Workload

if TYPE_CHECKING:
    from shardopt.search.candidates import Candidate

# RecShard tiers: cache the rows drawing these shares of a table's lookups.
HOT_SHARES = (0.8, 0.9, 0.95, 0.99)
MAX_LOAD_FACTOR = 0.5  # a bigger cache is not worth the UVM tier: keep the table in HBM
HBM_TIGHT = 0.9  # tables filling more of the cluster's HBM than this get UVM tiers without statistics
TIERED_MIN_CAP_SHARE = 1 / 64  # only tables at least this share of a rank's HBM get tiers


def cache_load_factors(table: Table) -> list[float]:
    """RecShard's split points: the HBM share of rows that serves each of HOT_SHARES of lookups."""
    buckets = row_buckets(table)
    out: list[float] = []
    for share in HOT_SHARES:
        factor = math.ceil(100 * buckets.rows_for_share(share) / table.num_embeddings) / 100
        factor = max(factor, 0.01)
        if factor <= MAX_LOAD_FACTOR and factor not in out:
            out.append(factor)
    return out


def uvm_tiers(workload: Workload, table: Table, size: int, cuts: list[Candidate]) -> list[Candidate]:
    """The tiers of the least-split cut; where its cache alone outgrows a rank's HBM, of every cut
    whose cached pieces fit too (TorchRec's planner tiers column pieces: 84 columns with
    min_partition 8 on 64 MB ranks, seven cached shards of 12 where the whole table's cache did
    not fit and shardopt refused)."""
    topo = workload.topology
    if topo.compute_device != "cuda" or not topo.ddr_cap:
        return []
    cuts = [c for c in cuts if c.sharding_type != "data_parallel"]
    base = next((c for c in cuts if len(c.pieces) == 1), cuts[0] if cuts else None)
    if base is None:
        return []
    factors = cache_load_factors(table) if size >= topo.hbm_cap * TIERED_MIN_CAP_SHARE else []
    plain = False
    wants_uvm = table.compute_kernels is not None and "fused" not in table.compute_kernels
    if not factors and (wants_uvm or size > topo.hbm_cap or _hbm_short(workload)):
        factors, plain = [UVM_CACHE_LOAD_FACTOR], True
    if table.cache_load_factor is not None:
        factors = [table.cache_load_factor]
    # Kernels that name plain UVM get it, whatever the tiers read off the access statistics.
    plain = plain or (table.compute_kernels is not None and "fused_uvm" in table.compute_kernels)
    bases = [base]
    if factors and _cache_bytes(table, base, min(factors)) > topo.hbm_cap:
        bases += [c for c in cuts if c is not base and _cache_bytes(table, c, min(factors)) <= topo.hbm_cap]
    out = [replace(b, compute_kernel="fused_uvm_caching", cache_load_factor=factor, replicated_rows=None)
           for b in bases for factor in factors]
    if plain:
        out.append(replace(base, compute_kernel="fused_uvm", cache_load_factor=None, replicated_rows=None))
    return out


def _cache_bytes(table: Table, cut: Candidate, factor: float) -> float:
    """The HBM cache of the cut's largest piece at ``factor`` (as shard_memory lays it out)."""
    return max(weight_bytes(table, p.rows, p.cols) for p in set(cut.pieces)) * factor


@lru_cache(maxsize=16)
def _hbm_short(workload: Workload) -> bool:
    """Whether the tables' weights and optimizer state fill the cluster's HBM past HBM_TIGHT
    (whole tables pack into ranks with some slack lost, so full is short)."""
    total = sum(shard_bytes(workload.optimizer, t, t.num_embeddings, t.embedding_dim) for t in workload.tables)
    return total > HBM_TIGHT * workload.topology.hbm_cap * workload.topology.world_size
