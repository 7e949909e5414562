"""Benchmark tasks drawn the way NeuroShard and DreamShard evaluate sharding.

A pool of DLRM-like tables is drawn from the public dlrm_datasets statistics (``shardopt synth``,
dims from {16, 32, 64, 128, 256}); DreamShard keeps training and test pools disjoint, so the pool is
split in two halves and tasks sample only the test half (shardopt's models were fitted to profiles
that hold none of these tables anyway). Each task (NeuroShard) takes 10-60 tables, 4 CPU ranks and
a memory cap of twice a balanced share, at sizes this machine replays in about a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardopt.core.layout import shard_bytes
from shardopt.traces.synth import SynthSpec, synth_workload
from shardopt.core.workload import Workload, workload_from_dict

POOL_SIZE = 400
WORLD = 4
BATCH = 256
ROWS_SCALE = 0.005  # ~20k rows on average: a replay in about a second on 2 cores
CAP_OVER_BALANCED = 2.0


@dataclass(frozen=True)
class Task:
    name: str
    workload: Workload
    source: str  # how it was made, for the report


def table_pool(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train pool, test pool): one draw of POOL_SIZE tables split in disjoint halves."""
    spec = SynthSpec(name="pool", num_tables=POOL_SIZE, world_size=WORLD, local_world_size=WORLD,
                     batch_size=BATCH, rows_scale=ROWS_SCALE, seed=seed)
    tables = synth_workload(spec)["tables"]
    order = np.random.default_rng(seed + 1).permutation(len(tables))
    half = len(tables) // 2
    return [tables[i] for i in order[:half]], [tables[i] for i in order[half:]]


def sampled_tasks(count: int, seed: int = 0, min_tables: int = 10, max_tables: int = 60) -> list[Task]:
    """``count`` tasks of 10-60 tables from the test pool, each with its own memory cap."""
    _, pool = table_pool(seed)
    rng = np.random.default_rng(seed + 2)
    out = []
    for i in range(count):
        n = int(rng.integers(min_tables, max_tables + 1))
        picked = [dict(pool[j], name=f"t{k:02d}") for k, j in enumerate(sorted(rng.choice(len(pool), n, replace=False)))]
        data = {"version": 1, "name": f"task{i:02d}", "batch_size": BATCH,
                "topology": {"world_size": WORLD, "compute_device": "cpu", "hbm_cap": 1}, "tables": picked}
        workload = workload_from_dict({**data, "topology": {**data["topology"], "hbm_cap": 10**12}})
        total = sum(shard_bytes(workload.optimizer, t, t.num_embeddings, t.embedding_dim) for t in workload.tables)
        biggest = max(shard_bytes(workload.optimizer, t, t.num_embeddings, t.embedding_dim) for t in workload.tables)
        cap = int(max(CAP_OVER_BALANCED * total / WORLD, 1.2 * biggest))
        data["topology"]["hbm_cap"] = cap
        out.append(Task(f"task{i:02d}", workload_from_dict(data), f"{n} tables, seed {seed}"))
    return out
