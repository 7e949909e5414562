"""Why plans lose to TorchRec where they do: replayed diagnostics on tasks other than the
held-out ones (seeds 2000.. by default), each printing one line per task.

    python benchmarks/robust_diagnose.py MODE [--seed 2000] [--per-regime 4] [--regimes compute,comm,hot] [--rounds 7] [--calibrated FILE]
    python benchmarks/robust_diagnose.py repeat --tasks hot-1005,compute-1007|held-out [--rounds 15] [--runs 3] [--cut TABLE]

- ``rank-error``: the packaged model's per-rank compute error here (log of measured over predicted,
  less the plan's mean: what unbalances ranks) beside the per-rank spread its doubt implies
  (``costmodel.uncertainty``), for the nominal plan and TorchRec's;
- ``floor``: the nominal plan replayed twice under two names (the replay's own noise) and every
  table cut row-wise evenly over all ranks (ranks of identical shapes: the imbalance floor);
- ``ablate``: the robust objective without its scales, without its per-table penalty, whole, and off;
- ``models``: the default path, the packaged learned model (robust and not), and a ``shardopt
  calibrate`` model of this machine (``--calibrated``) as analytic and as learned;
- ``passes``: per pass, the packaged model's error here (measured over predicted, summed over
  ranks), the backward's share of the measured lookups, and each pass's slowest rank over the
  mean, measured and predicted, for the default plan and TorchRec's;
- ``repeat``: the default plan and TorchRec's replayed ``--runs`` times (each run ``--rounds``
  rounds), per run each plan's step and its step with ranks made level (each phase's mean rank)
  over TorchRec's step: whether a task's loss is noise, imbalance, or work (``--tasks hot-1005,...``,
  or ``held-out``: seeds 1000-1007 of every regime), and over all runs each task's median; ``--cut
  TABLE`` adds the default search with that table held to column-wise pieces;
- ``replicas``: the default plan beside the same workload planned with its hot tables (pooled at
  least ``HOT_POOLING``, at most ``HOT_REPLICA_BYTES``) held to data-parallel replicas: whether
  spreading a hot table's lookups over every rank's local batch pays in TorchRec's dense kernel.

Cells: replayed step over TorchRec's (lower is better) / slowest rank's lookups over the mean rank's.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import time
import warnings

import numpy as np


HOT_POOLING = 100.0
HOT_REPLICA_BYTES = 8 * 2**20  # fp32 weights: twice the bench's hot tables' bound


def _held_to(workload, kind: str, chosen):
    """``workload`` with the tables ``chosen`` picks allowed ``kind`` alone."""
    return dataclasses.replace(workload, tables=tuple(
        dataclasses.replace(t, sharding_types=(kind,)) if chosen(t) else t for t in workload.tables))


def _replicated(workload):
    """``workload`` with its hot small tables allowed data-parallel replicas only."""
    return _held_to(workload, "data_parallel", lambda t: t.pooling_factor >= HOT_POOLING
                    and t.num_embeddings * t.embedding_dim * 4 <= HOT_REPLICA_BYTES)


def _rw_plan(workload, like):
    from shardopt.core.plan import Shard, TablePlan
    from shardopt.search.candidates import split_evenly

    world, tables = workload.topology.world_size, []
    for t in workload.tables:
        offsets = np.cumsum([0, *split_evenly(t.num_embeddings, world)])
        shards = tuple(Shard(rank=r, offsets=(int(offsets[r]), 0), sizes=(int(offsets[r + 1] - offsets[r]), t.embedding_dim))
                       for r in range(world))
        tables.append(TablePlan(name=t.name, sharding_type="row_wise", shards=shards))
    return dataclasses.replace(like, tables=tuple(tables))


def _variant_maker(args):
    """The mode's plans of one task, by name (the robust objective's parts switched as asked)."""
    from shardopt.contracts import PlanConfig
    from shardopt.costmodel import uncertainty
    from shardopt.planner.factory import plan_with

    part = {"which": None}
    whole = uncertainty.robust_objective

    def ablated(*a, **k):
        objective = whole(*a, **k)
        if part["which"] == "no-scales":
            return dataclasses.replace(objective, scales=(1.0,))
        if part["which"] == "no-penalty":
            return dataclasses.replace(objective, variance=())
        return objective

    uncertainty.robust_objective = ablated

    def variants(w, packaged):
        if args.mode == "passes":
            out = {"default": plan_with(w, PlanConfig())}
            if args.foreign:
                out["foreign"] = plan_with(w, PlanConfig(cost_model=f"analytic@{args.foreign}", robust="on"))
            return out
        if args.mode == "replicas":
            return {"default": plan_with(w, PlanConfig()), "hot-replicas": plan_with(_replicated(w), PlanConfig())}
        if args.mode in ("rank-error", "floor"):
            nominal = plan_with(w, PlanConfig(robust="off"), cost_model=packaged)
            extra = {"nominal-again": nominal, "row-wise": _rw_plan(w, nominal)} if args.mode == "floor" else {}
            return {"nominal": nominal, **extra}
        if args.mode == "ablate":
            out = {}
            for name in ("off", "whole", "no-scales", "no-penalty"):
                part["which"] = name
                out[name] = plan_with(w, PlanConfig(robust="off" if name == "off" else "on"), cost_model=packaged)
            return out
        out = {"default": plan_with(w, PlanConfig()),
               "learned": plan_with(w, PlanConfig(cost_model="learned")),
               "learned-off": plan_with(w, PlanConfig(cost_model="learned", robust="off"))}
        if args.calibrated:
            out["cal-analytic"] = plan_with(w, PlanConfig(cost_model=f"analytic@{args.calibrated}"))
            out["cal-learned"] = plan_with(w, PlanConfig(cost_model=f"learned@{args.calibrated}"))
        return out

    return variants


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.bench.regimes import REGIMES, regime_task
    from shardopt.contracts import Breakdown
    from shardopt.costmodel import uncertainty
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.torchrec.to_model import torchrec_plan

    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("rank-error", "floor", "ablate", "models", "passes", "repeat", "replicas"))
    parser.add_argument("--seed", type=int, default=2000)
    parser.add_argument("--per-regime", type=int, default=4)
    parser.add_argument("--regimes", default=",".join(REGIMES), help="comma-separated regimes (default: all)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calibrated", help="a `shardopt calibrate` model file (models)")
    parser.add_argument("--foreign", help="passes: also a model file fitted on another machine, robust,"
                        " its passes priced by it (benchmarks/models/cpu-avx2.json)")
    parser.add_argument("--tasks", default="", help="repeat: comma-separated task names (regime-seed),"
                        " or held-out (seeds 1000-1007 of every regime)")
    parser.add_argument("--runs", type=int, default=3, help="repeat: replays of the same plans")
    parser.add_argument("--cut", default="", help="repeat: also the default search with this table held to"
                        " column-wise pieces (plan 'cut'): whether cutting the table that bounds a rank pays")
    args = parser.parse_args()
    if args.mode == "repeat":
        if not args.tasks:
            parser.error("repeat needs --tasks (e.g. hot-1005,compute-1007)")
        return _repeat(args)

    variants = _variant_maker(args)

    started, ratios, spread, passes = time.perf_counter(), {}, {"measured": [], "doubt": []}, {}
    for regime in args.regimes.split(","):
        for i in range(args.per_regime):
            task = regime_task(regime, args.seed + i)
            w = task.workload
            packaged, _ = resolve_cost_model("analytic", w)
            try:
                plans = {"torchrec": torchrec_plan(w)}
            except Exception:  # TorchRec's planner found no plan: nothing to compare with
                print(task.name, "TorchRec: no plan", flush=True)
                continue
            plans.update(variants(w, packaged))
            result = replay_side_by_side(w, plans, args.rounds, comm=comm_for(w, packaged))
            base = Breakdown.of(result.per_rank["torchrec"]).step_ms
            cells = []
            for name, plan in plans.items():
                measured = np.array([r.fwd_compute_ms + r.bwd_compute_ms for r in result.per_rank[name]])
                if args.mode == "passes":
                    model = resolve_cost_model(f"analytic@{args.foreign}", w)[0] if name == "foreign" else packaged
                    cells.append(f"{name}: " + _passes(w, model, plan, result.per_rank[name], passes.setdefault(name, [])))
                    continue
                if args.mode == "rank-error" and name in ("nominal", "torchrec"):
                    cells.append(f"{name}: " + _rank_error(w, packaged, plan, measured, spread, uncertainty))
                    continue
                ratio = Breakdown.of(result.per_rank[name]).step_ms / base
                ratios.setdefault(name, []).append((ratio, measured.max() / measured.mean()))
                if name != "torchrec":
                    cells.append(f"{name}={ratio:.3f}/{measured.max() / measured.mean():.2f}")
            print(task.name, " ".join(cells), f"({time.perf_counter() - started:.0f} s)", flush=True)
    if args.mode == "passes":
        for name, rows in passes.items():
            m = np.median(np.array(rows), axis=0)
            print(f"{name} ({len(rows)} tasks), medians: error fwd x{m[0]:.2f} bwd x{m[1]:.2f}; slowest/mean"
                  f" fwd {m[2]:.2f} (model {m[3]:.2f}) bwd {m[4]:.2f} (model {m[5]:.2f})")
        return
    if args.mode == "rank-error":
        rms = {k: math.sqrt(float(np.mean(np.square(v)))) for k, v in spread.items()}
        print(f"all ranks: measured rms {rms['measured']:.3f}, doubt's {rms['doubt']:.3f}")
        return
    for name, rows in ratios.items():
        r, imb = np.array(rows).T
        print(f"{name}: geomean {math.exp(float(np.mean(np.log(r)))):.3f}, worst {r.max():.3f},"
              f" slowest/mean median {np.median(imb):.3f}, <= 1.10 on {np.mean(imb <= 1.10):.0%}")


def _rank_error(w, model, plan, measured, spread, uncertainty) -> str:
    """Measured per-rank error (demeaned log) and the doubt's per-rank spread, both rms."""
    sigma = uncertainty.doubt_for(model, w).table_sigma()
    s = np.array([sigma[t.name] for t in w.tables])
    predicted = np.array([r.fwd_compute_ms + r.bwd_compute_ms for r in model.breakdown(w, plan.tables)])
    ok = predicted > 0
    log_ratio = np.log(measured[ok] / predicted[ok])
    resid = log_ratio - log_ratio.mean()
    rank, table, pair = uncertainty._table_shares(w, model, plan.tables)  # entries: (rank, table, shares)
    shares = np.zeros((len(predicted), len(w.tables)))
    shares[rank, table] = pair.mean(axis=1)
    shares = shares[ok]
    doubt = np.sqrt(((shares * s) ** 2).sum(axis=1)) * math.sqrt((ok.sum() - 1) / ok.sum())
    spread["measured"] += list(resid)
    spread["doubt"] += list(doubt)
    return (f"measured {math.sqrt(np.mean(resid ** 2)):.3f}"
            f" doubt {math.sqrt(np.mean(doubt ** 2)):.3f} scale {math.exp(log_ratio.mean()):.2f}")


def _passes(w, model, plan, ranks, rows: list) -> str:
    """Per pass: measured over predicted (all ranks), then slowest rank over the mean, both ways."""
    predicted = np.array([[r.fwd_compute_ms, r.bwd_compute_ms] for r in model.breakdown(w, plan.tables)])
    measured = np.array([[r.fwd_compute_ms, r.bwd_compute_ms] for r in ranks])
    error = measured.sum(axis=0) / predicted.sum(axis=0)
    slow_m, slow_p = measured.max(axis=0) / measured.mean(axis=0), predicted.max(axis=0) / predicted.mean(axis=0)
    rows.append((error[0], error[1], slow_m[0], slow_p[0], slow_m[1], slow_p[1]))
    return (f"error fwd x{error[0]:.2f} bwd x{error[1]:.2f}, bwd share {measured[:, 1].sum() / measured.sum():.2f},"
            f" slowest/mean fwd {slow_m[0]:.2f} (model {slow_p[0]:.2f}) bwd {slow_m[1]:.2f} (model {slow_p[1]:.2f})")


def _repeat(args) -> None:
    """Each named task's default plan and TorchRec's, replayed ``args.runs`` times side by side;
    then each task's median over the runs and what the issue's criteria read off those medians."""
    from shardopt.bench.regimes import regime_task, regime_tasks
    from shardopt.contracts import Breakdown, PlanConfig, rank_phases
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.measure.replay import comm_for, replay_side_by_side
    from shardopt.planner.factory import plan_with
    from shardopt.torchrec.to_model import torchrec_plan

    tasks = (regime_tasks(8) if args.tasks == "held-out"
             else [regime_task(regime, int(seed)) for regime, seed in (n.rsplit("-", 1) for n in args.tasks.split(","))])
    medians = {}
    for task in tasks:
        name, w = task.name, task.workload
        packaged, _ = resolve_cost_model("analytic", w)
        try:
            plans = {"torchrec": torchrec_plan(w)}
        except Exception:  # TorchRec's planner found no plan: nothing to compare with, as in main()
            print(name, "TorchRec: no plan", flush=True)
            continue
        plans["default"] = plan_with(w, PlanConfig())
        if args.cut:
            plans["cut"] = plan_with(_held_to(w, "column_wise", lambda t: t.name == args.cut), PlanConfig())
        runs = []
        for run in range(args.runs):
            result = replay_side_by_side(w, plans, args.rounds, comm=comm_for(w, packaged))
            base = Breakdown.of(result.per_rank["torchrec"]).step_ms
            cells = []
            for plan_name, per_rank in result.per_rank.items():
                phases = np.array([rank_phases(r) for r in per_rank])
                lookups = phases[:, 0] + phases[:, 2]
                row = (Breakdown.of(per_rank).step_ms / base, phases.mean(axis=0).sum() / base,
                       lookups.max() / lookups.mean())
                if plan_name == "default":
                    runs.append(row)
                cells.append(f"{plan_name}: step {row[0]:.3f}, level {row[1]:.3f}, slowest/mean {row[2]:.2f}")
            print(name, f"run {run}:", " | ".join(cells), flush=True)
        medians[name] = np.median(np.array(runs), axis=0)
    if len(medians) > 1:
        step, level, slow = np.array(list(medians.values())).T
        over = [n for n, m in medians.items() if m[0] > 0.95]
        print(f"default, medians of {args.runs} runs over {len(medians)} tasks: step geomean"
              f" {math.exp(float(np.mean(np.log(step)))):.3f} (level {math.exp(float(np.mean(np.log(level)))):.3f}),"
              f" slowest/mean <= 1.10 on {np.mean(slow <= 1.10):.0%}, above 0.95: {', '.join(over) or 'none'}")


if __name__ == "__main__":
    main()
