"""Host-bound cuts: every host weighed at once picks what weighing them one by one picks."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings, strategies as st

from shardopt.core.workload import workload_from_dict
from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import ShardCost
from shardopt.search.greedy import _Ranks
from shardopt.search.hosts import _best_host, _best_in_order

KINDS = ["table_wise", "column_wise", "table_row_wise", "data_parallel"]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), pieces=st.integers(1, 4), hosts=st.integers(1, 5),
       ties=st.booleans(), ddr=st.booleans())
def test_every_host_at_once_picks_the_host_one_by_one_picks(seed, pieces, hosts, ties, ddr):
    rng = np.random.default_rng(seed)
    workload = workload_from_dict({
        "version": 1, "name": "h", "batch_size": 64,
        "topology": {"world_size": 4 * hosts, "local_world_size": 4, "compute_device": "cuda", "hbm_cap": "1GB",
                     **({"ddr_cap": "2GB"} if ddr else {})},
        "tables": [{"name": "t", "num_embeddings": 1000, "embedding_dim": 16}]})
    model, ranks = AnalyticCostModel(), _Ranks.empty(workload)
    # Ranks already holding pieces of other kinds: loads (equal ones where ties), room, host memory.
    ranks.load_ms[:] = np.round(rng.uniform(0, 3, ranks.load_ms.size), 0 if ties else 6)
    ranks.free_bytes[:] = rng.integers(0, 1 << 30, ranks.free_bytes.size)
    ranks.free_ddr[:] = rng.integers(0, 1 << 31, ranks.free_ddr.size) if ddr else 0
    ranks.kinds = [Counter({k: 1 for k in rng.choice(KINDS, rng.integers(0, 3))}) for _ in ranks.kinds]
    pcosts = [ShardCost(*np.round(rng.uniform(0, 1, 4), 0 if ties else 6), int(rng.integers(0, 1 << 29)),
                        int(rng.integers(0, 1 << 28)) if ddr else 0) for _ in range(pieces)]
    kind = "table_row_wise"
    one_by_one = _best_host(workload, model, ranks, SimpleNamespace(sharding_type=kind), pcosts,
                            np.ones(ranks.load_ms.size, dtype=bool))
    at_once = _best_in_order(workload, ranks, pcosts, ranks.overheads_with(workload, model, kind))
    assert at_once == one_by_one
