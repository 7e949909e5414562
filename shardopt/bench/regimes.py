"""Benchmark tasks in three regimes of a real cluster, with the links they run on declared.

The plain tasks (:mod:`shardopt.bench.tasks`) declare no links, so replay and the model would read
comm from the same curve and comm is never tested against compute. Here every task declares its
topology, and the comm-source rule prices comm from it in the plan and in replay alike, while
replay measures compute on real kernels:

- ``compute``: one host, fast links: the lookups set the step;
- ``comm``: two hosts of two ranks, a slow inter-host link: traffic rivals the lookups;
- ``hot``: one host, fast links, and two or more tables that fit in a cache (at most
  ``HOT_BYTES``) but are pooled 100-300 times and carry at least half of the lookups (a
  table-wise plan is set by one of them; the packaged CPU profile pools at most 100, so their
  cost is the model's extrapolation).

Seeds are split: ``tuning`` tasks (seeds 0..) are for choosing constants, ``held-out`` tasks
(seeds 1000..) for judging them, so a figure is never read off the tasks it was tuned on.
"""

from __future__ import annotations

import numpy as np

from shardopt.bench.tasks import BATCH, WORLD, Task, table_pool
from shardopt.core.layout import shard_bytes
from shardopt.core.workload import workload_from_dict

REGIMES = ("compute", "comm", "hot")
HALVES = {"tuning": 0, "held-out": 1000}
LINKS = {
    "compute": {"local_world_size": WORLD, "intra_host_bw": 100.0, "comm_latency_us": 10.0},
    "comm": {"local_world_size": 2, "intra_host_bw": 50.0, "inter_host_bw": 0.5, "comm_latency_us": 50.0},
    "hot": {"local_world_size": WORLD, "intra_host_bw": 100.0, "comm_latency_us": 10.0},
}
HOT_POOLING = (100.0, 300.0)
HOT_BYTES = 4 * 2**20  # fp32 weights of a hot table: an LLC share of a CPU, a tenth of an H100's L2
HOT_SHARE = 0.5  # the hot tables carry at least this share of the lookups
CAP_OVER_BALANCED = 3.0  # memory is not what these regimes test: room for replicas and TorchRec's margins


def regime_task(regime: str, seed: int) -> Task:
    """One task of ``regime`` drawn with ``seed`` from the table pool's test half."""
    _, pool = table_pool(0)
    rng = np.random.default_rng([seed, REGIMES.index(regime)])
    n = int(rng.integers(12, 41))
    picked = [dict(pool[j], name=f"t{k:02d}") for k, j in enumerate(sorted(rng.choice(len(pool), n, replace=False)))]
    if regime == "hot":
        _make_hot(picked, rng)
    name = f"{regime}-{seed:04d}"
    data = {"version": 1, "name": name, "batch_size": BATCH,
            "topology": {"world_size": WORLD, "compute_device": "cpu", "hbm_cap": 10**12, **LINKS[regime]},
            "tables": picked}
    workload = workload_from_dict(data)
    sizes = [shard_bytes(workload.optimizer, t, t.num_embeddings, t.embedding_dim) for t in workload.tables]
    data["topology"]["hbm_cap"] = int(max(CAP_OVER_BALANCED * sum(sizes) / WORLD, 1.2 * max(sizes)))
    return Task(name, workload_from_dict(data), f"{regime} regime, {n} tables, seed {seed}")


def _make_hot(tables: list[dict], rng: np.random.Generator) -> None:
    """Turn two to four tables of at most HOT_BYTES hot: pooled within HOT_POOLING, and together
    at least HOT_SHARE of all lookups (more of the small tables turn hot where a few do not)."""
    count = int(rng.integers(2, 5))
    size = [t["num_embeddings"] * t["embedding_dim"] * 4 for t in tables]
    small = sorted(range(len(tables)), key=lambda i: size[i])
    fits = [i for i in small if size[i] <= HOT_BYTES] or small[:count]
    hot = [int(i) for i in rng.choice(fits, min(count, len(fits)), replace=False)]
    rest = [i for i in fits if i not in hot]
    for i in hot:
        tables[i]["pooling_factor"] = round(float(rng.uniform(*HOT_POOLING)), 1)

    def short() -> bool:
        cold = sum(t["pooling_factor"] for i, t in enumerate(tables) if i not in hot)
        return sum(tables[i]["pooling_factor"] for i in hot) < cold * HOT_SHARE / (1 - HOT_SHARE)

    while short() and rest:
        i = rest.pop(0)
        tables[i]["pooling_factor"] = round(float(rng.uniform(*HOT_POOLING)), 1)
        hot.append(i)
    if short():  # no small table left: the hot ones pool more than HOT_POOLING
        cold = sum(t["pooling_factor"] for i, t in enumerate(tables) if i not in hot)
        warm = sum(tables[i]["pooling_factor"] for i in hot)
        for i in hot:
            tables[i]["pooling_factor"] = round(tables[i]["pooling_factor"] * cold / warm + 0.05, 1)


def regime_tasks(per_regime: int, half: str = "held-out") -> list[Task]:
    """``per_regime`` tasks of each regime from one half of the seeds."""
    base = HALVES[half]
    return [regime_task(regime, base + i) for regime in REGIMES for i in range(per_regime)]
