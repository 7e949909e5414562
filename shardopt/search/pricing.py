"""A candidate's pieces priced by the cost model, each shape once (with a hot-row replica's share)."""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Sequence

from shardopt.contracts import ShardSpec
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel, ShardCost

if TYPE_CHECKING:
    from shardopt.search.candidates import Candidate

_SHAPE = itemgetter(2, 3)  # a Piece's (rows, cols)


def piece_costs(workload: Workload, model: CostModel, cand: Candidate, floor: bool = False) -> list[ShardCost]:
    """Each piece's cost on its own (with a hot-row replica's share on its rank, if any); with
    ``floor``, the model's floor under it (what a lower bound adds up)."""
    table = workload.table(cand.table)
    cost = model.shard_floor if floor else model.shard_cost
    if cand.replicated_rows:
        return _hot_row_costs(workload, cost, cand, table)
    return _by_shape(cand, lambda rows, cols: cost(workload, ShardSpec(
        table, cand.sharding_type, rows, cols, cand.compute_kernel, cand.cache_load_factor)))


def _hot_row_costs(workload, cost, cand: Candidate, table) -> list[ShardCost]:
    from shardopt.arithmetic.hotrows import split_table

    hot, cold = split_table(table, cand.replicated_rows)
    replica = cost(workload, ShardSpec(hot, "data_parallel", hot.num_embeddings, table.embedding_dim))

    def with_replica(rows: int, cols: int) -> ShardCost:
        c = cost(workload, ShardSpec(cold, cand.sharding_type, rows, cols, cand.compute_kernel))
        return ShardCost(
            c.fwd_compute_ms + replica.fwd_compute_ms, c.bwd_compute_ms + replica.bwd_compute_ms,
            c.fwd_comm_ms + replica.fwd_comm_ms, c.bwd_comm_ms + replica.bwd_comm_ms,
            c.hbm_bytes + replica.hbm_bytes, c.ddr_bytes + replica.ddr_bytes,
        )

    return _by_shape(cand, with_replica)


def _by_shape(cand: Candidate, price) -> list[ShardCost]:
    """``price(rows, cols)`` once per distinct shape, in order of first piece, one object per shape
    (the loops run in C: a cut over 1024 ranks has 1024 pieces and two shapes)."""
    shapes = list(map(_SHAPE, cand.pieces))
    by_shape = {shape: price(*shape) for shape in dict.fromkeys(shapes)}
    return list(map(by_shape.__getitem__, shapes))


def pieces_total(pieces: Sequence[ShardCost]) -> float:
    """``sum(p.total_ms for p in pieces)``, the same float in the same order, each distinct cost
    object totalled once: a cut's pieces share one object per shape, and 5000 tables x 1024 ranks
    summed 6.7 million of them per pass (the loops below run in C)."""
    if len(pieces) == 1:
        return pieces[0].total_ms
    ids = list(map(id, pieces))
    totals = {key: p.total_ms for key, p in dict(zip(ids, pieces)).items()}
    return sum(map(totals.__getitem__, ids))


def pieces_max(pieces: Sequence[ShardCost]) -> float:
    """``max(p.total_ms for p in pieces)``, each distinct cost object totalled once."""
    if len(pieces) == 1:
        return pieces[0].total_ms
    return max(p.total_ms for p in distinct(pieces))


def distinct(pieces: Sequence[ShardCost]):
    """The distinct cost objects of ``pieces``, in order of first piece (deduplicated in C: a cut
    over 1024 ranks shares one object per shape)."""
    return dict(zip(map(id, pieces), pieces)).values()
