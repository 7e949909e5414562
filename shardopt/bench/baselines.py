"""The classic baselines of the sharding literature (DreamShard, NeuroShard): table-wise greedy by
one table statistic, and random. Each places whole tables, heaviest first, on the rank whose summed
statistic is lowest among those with room, so they differ only in what "heavy" means:

- size-greedy: bytes (weights + optimizer state);  dim-greedy: embedding dimension;
- lookup-greedy: ids looked up per sample (pooling factor);
- size-lookup-greedy: bytes and lookups, each as a share of the task's total, added;
- random: a uniformly random rank with room.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from shardopt.costmodel.base import CostModel
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.layout import shard_bytes
from shardopt.core.plan import Shard, TablePlan
from shardopt.contracts import SearchResult
from shardopt.core.workload import Table, Workload


def _size(w: Workload, t: Table) -> float:
    return float(shard_bytes(w.optimizer, t, t.num_embeddings, t.embedding_dim))


STATISTICS: dict[str, Callable[[Workload, Table], float]] = {
    "size-greedy": _size,
    "dim-greedy": lambda w, t: float(t.embedding_dim),
    "lookup-greedy": lambda w, t: float(t.pooling_factor),
}


class TableWiseGreedy:
    """Whole tables, heaviest first by one statistic, onto the rank with the least of it."""

    objective = None  # a baseline minimises nothing named

    def __init__(self, name: str) -> None:
        self.name = name

    def _weights(self, workload: Workload) -> dict[str, float]:
        if self.name == "size-lookup-greedy":
            size = {t.name: _size(workload, t) for t in workload.tables}
            look = {t.name: t.pooling_factor for t in workload.tables}
            s, lk = sum(size.values()), sum(look.values())
            return {n: size[n] / s + look[n] / lk for n in size}
        stat = STATISTICS[self.name]
        return {t.name: stat(workload, t) for t in workload.tables}

    def search(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        weight = self._weights(workload)
        load = [0.0] * workload.topology.world_size

        def pick(table: Table, fits: list[int]) -> int:
            rank = min(fits, key=lambda r: (load[r], r))
            load[rank] += weight[table.name]
            return rank

        order = sorted(workload.tables, key=lambda t: (-weight[t.name], t.name))
        return _place_whole(workload, order, pick, self.name)


class RandomTableWise:
    """Each table whole on a random rank with room (seeded)."""

    name = "random"
    objective = None

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def search(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        rng = np.random.default_rng(self.seed)
        return _place_whole(workload, workload.tables, lambda table, fits: int(rng.choice(fits)), "random")


def _place_whole(workload: Workload, order, pick: Callable[[Table, list[int]], int], name: str) -> SearchResult:
    """Each table whole, in ``order``, on the rank ``pick`` chooses among those with room."""
    topo = workload.topology
    free = [topo.hbm_cap] * topo.world_size
    ranks: dict[str, int] = {}
    for table in order:
        need = _size(workload, table)
        fits = [r for r in range(topo.world_size) if free[r] >= need]
        if not fits:
            raise ShardoptError(f"{name}: table {table.name!r} fits on no rank", ErrorKind.INFEASIBLE)
        rank = pick(table, fits)
        free[rank] -= need
        ranks[table.name] = rank
    return SearchResult(_table_wise(workload, ranks), 0.0, name, "HEURISTIC")


def _table_wise(workload: Workload, ranks: dict[str, int]) -> tuple[TablePlan, ...]:
    return tuple(
        TablePlan(name=t.name, sharding_type="table_wise",
                  shards=(Shard(rank=ranks[t.name], offsets=(0, 0), sizes=(t.num_embeddings, t.embedding_dim)),))
        for t in workload.tables
    )
