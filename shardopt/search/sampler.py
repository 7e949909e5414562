"""Random plans: a baseline planner and a source of varied plans for judging cost models.

Each table takes a random candidate and its free pieces random ranks with room; fixed pieces keep
their ranks, host-bound ones a random host. Memory is respected; seeded, so reproducible.
"""

from __future__ import annotations

import numpy as np

from shardopt.contracts import ShardSpec
from shardopt.costmodel.base import CostModel
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.arithmetic.memory import shard_memory
from shardopt.core.plan import Shard, TablePlan
from shardopt.search.bound import balance_lower_bound
from shardopt.search.candidates import table_candidates
from shardopt.contracts import SearchResult
from shardopt.search.candidates import piece_costs
from shardopt.core.workload import Workload

ATTEMPTS = 50


class PlanSampler:
    """Random plans that fit (seeded): varied plans for judging cost models, not a planner."""

    name = "sampled"
    objective = None  # minimises nothing

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def search(self, workload: Workload, cost_model: CostModel) -> SearchResult:
        rng = np.random.default_rng(self.seed)
        candidates = {t.name: table_candidates(workload, t) for t in workload.tables}
        for _ in range(ATTEMPTS):
            plan = _try_random(workload, candidates, rng)
            if plan is not None:
                costs = {
                    name: [piece_costs(workload, cost_model, c) for c in cands]
                    for name, cands in candidates.items()
                }
                return SearchResult(plan, balance_lower_bound(workload, cost_model, candidates, costs),
                                    algorithm=self.name, status="SAMPLED")
        raise ShardoptError(
            f"no random plan fit in memory in {ATTEMPTS} attempts", kind=ErrorKind.INFEASIBLE
        )


def _try_random(workload: Workload, candidates, rng) -> tuple[TablePlan, ...] | None:
    topo = workload.topology
    free = [topo.hbm_cap] * topo.world_size
    out = []
    for table in workload.tables:
        cands = candidates[table.name]
        cand = cands[int(rng.integers(len(cands)))]
        host = int(rng.integers(topo.num_hosts))
        host_ranks = list(range(host * topo.ranks_per_host, (host + 1) * topo.ranks_per_host))
        shards = []
        for i, piece in enumerate(cand.pieces):
            need = shard_memory(workload.optimizer, ShardSpec(
                table, cand.sharding_type, piece.rows, piece.cols, cand.compute_kernel,
                cand.cache_load_factor)).hbm_bytes
            if cand.replicated_rows:
                need += shard_memory(workload.optimizer, ShardSpec(
                    table, "data_parallel", cand.replicated_rows, piece.cols)).hbm_bytes
            if cand.placement == "fixed":
                rank = i
            elif cand.placement == "host" and cand.sharding_type == "table_row_wise":
                rank = host_ranks[i]
            else:
                pool = host_ranks if cand.placement == "host" else range(topo.world_size)
                fits = [r for r in pool if free[r] >= need]
                if not fits:
                    return None
                rank = int(rng.choice(fits))
            if free[rank] < need:
                return None
            free[rank] -= need
            shards.append(Shard(rank=rank, offsets=(piece.row_offset, piece.col_offset),
                                sizes=(piece.rows, piece.cols)))
        out.append(TablePlan(name=table.name, sharding_type=cand.sharding_type, shards=tuple(shards),
                             compute_kernel=cand.compute_kernel,
                             cache_load_factor=cand.cache_load_factor,
                             replicated_rows=cand.replicated_rows))
    return tuple(out)
