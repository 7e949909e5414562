"""What a data-parallel replica costs the rank it joins, beyond its own kernel: measured.

On a CPU rank, replicas run TorchRec's dense kernel beside the rank's fused one, and the dense
step (a gradient as large as the table, then Adagrad over every row) passes whole tables through
the caches each iteration. For each task, its hottest small table (pooled at least ``HOT_POOLING``,
at most ``HOT_REPLICA_BYTES`` of weights) is replayed three ways side by side: whole on one rank
(``whole``: the task's default plan with that table moved whole to its least-loaded rank), as a
replica on every rank (``replica``: the same plan otherwise), and alone, as replicas of a workload
holding only that table (the replica's own kernel). On every rank that does not hold the table
whole, the replica's company cost is the rank's time with the replica, less its time without it,
less the replica alone; reported as a share of the rank's time without it, forward and backward,
median over ranks and runs. ``AnalyticCostModel``'s ``REPLICA_COMPANY`` is set from these.

    python benchmarks/replica_company.py --tasks hot-1006,hot-1007,hot-7003,hot-7005 [--rounds 9] [--runs 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import warnings

import numpy as np
from robust_diagnose import HOT_POOLING, HOT_REPLICA_BYTES  # the hot small tables TorchRec would replicate


def _plans(workload, model, table, default):
    """(whole, replica) plans of ``workload``: ``default`` with ``table`` whole on its least-loaded
    rank (as ``model`` prices the rest), and with it a replica on every rank."""
    from shardopt.core.plan import Shard, TablePlan

    rest = tuple(tp for tp in default.tables if tp.name != table.name)
    loads = [r.fwd_compute_ms + r.bwd_compute_ms for r in model.breakdown(workload, rest)]
    size = (table.num_embeddings, table.embedding_dim)
    whole = TablePlan(name=table.name, sharding_type="table_wise",
                      shards=(Shard(rank=int(np.argmin(loads)), offsets=(0, 0), sizes=size),))
    replica = TablePlan(name=table.name, sharding_type="data_parallel",
                        shards=tuple(Shard(rank=r, offsets=(0, 0), sizes=size)
                                     for r in range(workload.topology.world_size)))
    order = [tp.name for tp in default.tables]
    place = lambda tp: tuple(sorted((*rest, tp), key=lambda t: order.index(t.name)))  # noqa: E731
    return (dataclasses.replace(default, tables=place(whole)), dataclasses.replace(default, tables=place(replica)))


def _company(beside, without, lone) -> list[float]:
    """One rank's company share, forward and backward: with the replica, less without it, less the
    replica alone, over without it."""
    return [(getattr(beside, f) - getattr(without, f) - getattr(lone, f)) / getattr(without, f)
            for f in ("fwd_compute_ms", "bwd_compute_ms")]


def _priced(model, w, alone_w, whole, replica, alone, holder) -> np.ndarray:
    """The same shares as the model prices them (median over the ranks not holding the table)."""
    without, beside = model.breakdown(w, whole.tables), model.breakdown(w, replica.tables)
    lone = model.breakdown(alone_w, alone.tables)
    return np.median(np.array([_company(b, o, n) for o, b, n in zip(without, beside, lone) if o.rank != holder]),
                     axis=0)


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.regimes import regime_task
    from shardopt.contracts import PlanConfig
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.planner.factory import plan_with

    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", required=True, help="comma-separated task names (regime-seed)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    shares = []
    for name in args.tasks.split(","):
        regime, seed = name.rsplit("-", 1)
        w = regime_task(regime, int(seed)).workload
        hot = [t for t in w.tables if t.pooling_factor >= HOT_POOLING
               and t.num_embeddings * t.embedding_dim * t.element_bytes <= HOT_REPLICA_BYTES]
        if not hot:
            print(name, "no hot small table", flush=True)
            continue
        table = max(hot, key=lambda t: t.pooling_factor)
        model, _ = resolve_cost_model("analytic", w)
        whole, replica = _plans(w, model, table, plan_with(w, PlanConfig()))
        alone_w = dataclasses.replace(w, tables=(table,))
        alone = dataclasses.replace(replica, tables=tuple(tp for tp in replica.tables if tp.name == table.name))
        holder = whole.tables[[tp.name for tp in whole.tables].index(table.name)].shards[0].rank
        task = []
        for run in range(args.runs):
            res = replay_side_by_side(w, {"whole": whole, "replica": replica}, args.rounds,
                                      comm=comm_for(w, model), seed=run)
            own = replay_side_by_side(alone_w, {"alone": alone}, args.rounds, comm=comm_for(alone_w, model), seed=run)
            for r in range(w.topology.world_size):
                if r == holder:
                    continue
                task.append(_company(res.per_rank["replica"][r], res.per_rank["whole"][r], own.per_rank["alone"][r]))
        med = np.median(np.array(task), axis=0)
        shares += task
        priced = _priced(model, w, alone_w, whole, replica, alone, holder)
        print(f"{name} ({table.name}: {table.num_embeddings} x {table.embedding_dim}, pooled {table.pooling_factor:.0f}):"
              f" company forward {med[0]:+.3f}, backward {med[1]:+.3f} of the rank's time without it"
              f" ({len(task)} rank readings); the model {priced[0]:+.3f}, {priced[1]:+.3f}", flush=True)
    if shares:
        med = np.median(np.array(shares), axis=0)
        q = np.percentile(np.array(shares), [25, 75], axis=0)
        print(f"all: forward {med[0]:+.3f} (quartiles {q[0, 0]:+.3f}..{q[1, 0]:+.3f}), backward {med[1]:+.3f}"
              f" (quartiles {q[0, 1]:+.3f}..{q[1, 1]:+.3f}), {len(shares)} rank readings")


if __name__ == "__main__":
    main()
