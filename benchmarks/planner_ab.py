"""A/B planner variants on tasks from the *training* half of the bench's table pool.

    python benchmarks/planner_ab.py [--tasks 14] [--rounds 5] analytic scale:1.15 ensemble

Ideas for the planner are tried here, not on the bench's test tasks, so the report stays a
held-out measure. Each variant plans with ``IlpSearch`` (TorchRec's cuts, 5 s) under a changed
cost model; TorchRec's plan is the reference. All plans of a task are replayed side by side as
the bench replays them (``shardopt.measure.replay.replay_side_by_side``), and the mean replayed ratio to
TorchRec printed, by step (critical path) and by bottleneck rank.

Variants: ``analytic`` (shardopt's default), ``learned``, ``analytic@FILE`` and ``learned@FILE``
(either model of another model file, e.g. one trained on a new profile), ``scale:K`` (compute times K: how the
plan moves if the machine is slower than the profile), ``critical-path`` / ``bottleneck`` (the default model
under either objective, ``shardopt/contracts.py``),
``ensemble`` (compute averaged over the analytic and learned models).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import CostModel


class ScaledCompute(AnalyticCostModel):
    """The analytic model with every compute coefficient times ``factor``."""

    def __init__(self, base: AnalyticCostModel, factor: float) -> None:
        super().__init__(base._hardware, base.calibration)
        self.factor = factor

    def _coefficients(self, hw, dense=False):
        fwd, bwd = super()._coefficients(hw, dense)
        return fwd * self.factor, bwd * self.factor


class EnsembleCompute(CostModel):
    """Compute averaged over two models; communication and memory from the first."""

    floor_below_cost = True

    def __init__(self, a: CostModel, b: CostModel) -> None:
        self.a, self.b = a, b
        self.name = f"ensemble({a.name}, {b.name})"

    def _mixed(self, x, y, floor=False):
        pick = min if floor else (lambda u, v: (u + v) / 2)
        return dataclasses.replace(x, fwd_compute_ms=pick(x.fwd_compute_ms, y.fwd_compute_ms),
                                   bwd_compute_ms=pick(x.bwd_compute_ms, y.bwd_compute_ms))

    def shard_cost(self, *args):
        return self._mixed(self.a.shard_cost(*args), self.b.shard_cost(*args))

    def shard_floor(self, *args):
        return self._mixed(self.a.shard_floor(*args), self.b.shard_floor(*args), floor=True)

    def comm_floor_ms(self, *args, **kwargs):
        return self.a.comm_floor_ms(*args, **kwargs)

    def comm_curves(self, workload):
        return self.a.comm_curves(workload)

    def additive(self, workload):
        return False

    def compute_overhead_ms(self, workload, kinds):
        return (self.a.compute_overhead_ms(workload, kinds) + self.b.compute_overhead_ms(workload, kinds)) / 2

    def rank_overhead_ms(self, workload, kinds):
        return (self.a.rank_overhead_ms(workload, kinds) + self.b.rank_overhead_ms(workload, kinds)) / 2

    def placed_breakdown(self, workload, tables):
        out = []
        for x, y in zip(self.a.breakdown(workload, tables), self.b.breakdown(workload, tables)):
            mixed = self._mixed(x, y)
            out.append(dataclasses.replace(
                mixed, total_ms=mixed.fwd_compute_ms + mixed.bwd_compute_ms + x.fwd_comm_ms + x.bwd_comm_ms))
        return out


class VariantSearch:
    """shardopt's bench search under a variant of the cost model it is handed."""

    def __init__(self, variant: str) -> None:
        from shardopt.bench.suite import planner_search

        self.variant = variant
        self.inner = planner_search("shardopt")

    def search(self, workload, cost_model):
        from shardopt.costmodel.registry import resolve_cost_model

        kind, _, path = self.variant.partition("@")
        if path and kind in ("analytic", "learned"):
            from shardopt.costmodel.learned import LearnedCostModel
            from shardopt.costmodel.store import load_model

            parts, _ = load_model(path)  # as benchmarks/accuracy.py --also reads a model file
            cost_model = (AnalyticCostModel(calibration=parts.calibration) if kind == "analytic"
                          else LearnedCostModel(parts, device=workload.topology.compute_device))
        elif self.variant == "learned":
            cost_model, _ = resolve_cost_model("learned", workload)
        elif self.variant == "ensemble":
            cost_model = EnsembleCompute(cost_model, resolve_cost_model("learned", workload)[0])
        elif self.variant in ("critical-path", "bottleneck"):
            from shardopt.contracts import OBJECTIVES

            self.inner.objective = OBJECTIVES[self.variant]
        elif self.variant.startswith("scale:"):
            cost_model = ScaledCompute(cost_model, float(self.variant.split(":", 1)[1]))
        elif self.variant != "analytic":
            raise SystemExit(f"unknown variant {self.variant!r}")
        return self.inner.search(workload, cost_model)


def train_pool_tasks(count: int, seed: int = 0):
    """Tasks drawn like the bench's, from the half of the pool the bench never samples."""
    import shardopt.bench.tasks as tasks

    train, test = tasks.table_pool(seed)
    original = tasks.table_pool
    tasks.table_pool = lambda s=0: (test, train)
    try:
        return tasks.sampled_tasks(count, seed + 100)
    finally:
        tasks.table_pool = original


def main() -> None:
    from shardopt.bench.suite import run_suite

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--tasks", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    started = time.perf_counter()
    ratios: dict[str, list[float]] = {v: [] for v in args.variants}
    bottlenecks: dict[str, list[float]] = {v: [] for v in args.variants}
    for task in train_pool_tasks(args.tasks):
        searches = {v: VariantSearch(v) for v in args.variants}
        entries, _ = run_suite([task], tuple(searches) + ("torchrec",), rounds=args.rounds, searches=searches)
        by = {e.planner: e for e in entries}
        line = [task.name]
        for v in args.variants:
            ratios[v].append(by[v].replayed_step_ms / by["torchrec"].replayed_step_ms)
            bottlenecks[v].append(by[v].replayed_ms / by["torchrec"].replayed_ms)
            predicted = by[v].predicted_step_ms / by["torchrec"].predicted_step_ms
            line.append(f"{v} {ratios[v][-1]:.3f} (predicted {predicted:.3f}; bottleneck {bottlenecks[v][-1]:.3f})")
        print("  ".join(line), flush=True)
    for v in args.variants:
        print(f"mean replayed ratio to TorchRec, {v}: step {np.mean(ratios[v]):.4f},"
              f" bottleneck {np.mean(bottlenecks[v]):.4f}")
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
