"""Tables measured alone: each replica the search may choose, timed in TorchRec's dense kernel
(``calibrate --workload``'s replica factors), and the plan that puts every table on a rank of its
own (``benchmarks/beyond_bench.py``).

Tables in the fused kernel are not priced from measurements alone: on the 2-core AMD VM, factors
fitted to each table alone put the model further off the measured ranks of the workload's plans
(0.075 against 0.054 per rank; with another CPU's model rescaled, 0.141 against 0.075:
``benchmarks/results/alone_factors.md``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from shardopt.core.fields import MAX_WORLD
from shardopt.core.plan import Plan, Shard, TablePlan, WorkloadRef
from shardopt.core.workload import Workload, workload_from_dict, workload_to_dict
from shardopt.costmodel.table_factors import MAX_LOG_FACTOR, TableFactor

ALONE_HBM = 2**50  # a measurement, not a plan: no rank is short of memory
# The last rank holds a table with next to nothing to look up: its time is what any kernel costs
# (on a 2-core AMD VM 0.24 ms forward, 0.12 ms backward: 1.7x and 1.3x the packaged model's figures),
# taken off every table's.
EMPTY_ROWS = 64
# A replica is timed over this many distinct batches, with these warm-up and timed iterations.
REPLICA_BATCHES, REPLICA_WARMUP, REPLICA_ITERS = 3, 2, 7


def measurable(workload: Workload) -> bool:
    """Whether each table can have a rank of its own (and the empty kernel one more)."""
    return len(workload.tables) + 1 <= MAX_WORLD


def alone_plan(workload: Workload) -> Optional[tuple[Workload, Plan]]:
    """(the workload on one rank per table and one more, the plan of each table whole on its own
    rank and an all-but-empty table on the last), each table's lookups as in the workload (the
    global batch spread over the ranks, rounded); None where the tables outnumber the ranks a
    workload may have."""
    if not measurable(workload):
        return None
    count = len(workload.tables)
    data = workload_to_dict(workload)
    batch = workload.batch_size * workload.topology.world_size
    data["batch_size"] = max(1, round(batch / (count + 1)))
    topology = {k: v for k, v in data["topology"].items() if k not in ("ranks", "ddr_cap")}
    data["topology"] = {**topology, "world_size": count + 1, "local_world_size": count + 1, "hbm_cap": ALONE_HBM}
    data.pop("parallelism", None)
    names = {t.name for t in workload.tables}
    empty = next(f"empty-kernel-{i}" for i in range(count + 1) if f"empty-kernel-{i}" not in names)
    data["tables"].append({"name": empty, "num_embeddings": EMPTY_ROWS,
                           "embedding_dim": min(t.embedding_dim for t in workload.tables), "pooling_factor": 1.0})
    alone = workload_from_dict(data, source="<tables alone>")
    tables = tuple(TablePlan(name=t.name, sharding_type="table_wise",
                             shards=(Shard(rank=i, offsets=(0, 0), sizes=(t.num_embeddings, t.embedding_dim)),))
                   for i, t in enumerate(alone.tables))
    return alone, Plan(format="shardopt-plan", version=3, workload=WorkloadRef(name=alone.name),
                       world_size=count + 1, tables=tables)


def replicable(model, workload: Workload) -> list:
    """The tables the search may replicate (a data-parallel candidate among the default's)."""
    from shardopt.contracts import PlanConfig
    from shardopt.search.candidates import workload_candidates

    candidates, _ = workload_candidates(workload, model, PlanConfig().candidates)
    return [t for t in workload.tables if any(c.sharding_type == "data_parallel" for c in candidates[t.name])]


def replica_factors(model, workload: Workload, *, device: str = "cpu", backend: str = "auto",
                    warmup: int = REPLICA_WARMUP, iters: int = REPLICA_ITERS) -> tuple[TableFactor, ...]:
    """Each table the search may replicate (it has a data-parallel candidate), its replica timed
    alone at a rank's batch in TorchRec's dense kernel, beside ``model``'s price of it: its factor
    in that kernel. The replica's algorithm is not the fused kernel's (no sort of its ids, a step
    over every row), so a table's own factor does not carry to it: on a 2-core AMD CPU a narrow
    table pooled 276 times was 3.1x the packaged model's price whole and 1.1x it replicated. An
    all-but-empty replica's time, less its price, comes off each, as for the tables alone."""
    import math

    import numpy as np

    from shardopt.contracts import ShardSpec
    from shardopt.profile.bags import sample_bags
    from shardopt.profile.kernels import KernelSpec
    from shardopt.profile.precision import measured_precision
    from shardopt.profile.tbe import measure_kernel

    tables = replicable(model, workload)
    if not tables:
        return ()
    empty = replace(min(tables, key=lambda t: t.embedding_dim), name="empty-replica", num_embeddings=EMPTY_ROWS,
                    pooling_factor=1.0, feature_names=None)

    def timed(table):
        precision = measured_precision(table.data_type, device)
        batches = [[sample_bags(table, workload.batch_size, np.random.default_rng([i, 7]))]
                   for i in range(REPLICA_BATCHES)]
        m = measure_kernel([KernelSpec(table.num_embeddings, table.embedding_dim)], batches, backend=backend,
                           device=device, precision=precision, warmup=warmup, iters=iters, dense=True)
        priced = model.shard_cost(workload, ShardSpec(table, "data_parallel", table.num_embeddings,
                                                      table.embedding_dim, "dense"))
        return (m.fwd.median_us / 1e3, m.bwd.median_us / 1e3), (priced.fwd_compute_ms, priced.bwd_compute_ms)

    (empty_ms, empty_priced) = timed(empty)
    overhead = [max(0.0, m - p) for m, p in zip(empty_ms, empty_priced)]
    out = []
    for table in tables:
        measured, priced = timed(table)
        factor = [math.exp(min(MAX_LOG_FACTOR, max(-MAX_LOG_FACTOR, math.log(max(m - o, 1e-6) / p))))
                  if p > 0 else 1.0 for m, o, p in zip(measured, overhead, priced)]
        out.append(TableFactor(table.name, table.num_embeddings, table.embedding_dim, float(table.pooling_factor),
                               round(factor[0], 6), round(factor[1], 6), "dense"))
    return tuple(out)
