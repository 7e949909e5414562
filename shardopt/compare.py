"""shardopt against TorchRec's planner on one workload: both plans, scored by one cost model and,
optionally, replayed side by side on this machine's kernels (the CLI's ``compare`` and
``benchmarks/vs_torchrec.py`` share it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from shardopt.contracts import Breakdown, PlanConfig
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel


@dataclass
class Side:
    """One planner's plan, how long planning took, and its predicted (and measured) step."""

    plan: Optional[Plan]
    plan_s: float
    predicted: Optional[Breakdown] = None
    measured: Optional[tuple[float, float]] = None  # (step ms, bottleneck ms) of per-rank medians
    note: str = ""


@dataclass
class Comparison:
    workload: Workload
    model_name: str
    sides: dict[str, Side] = field(default_factory=dict)
    rounds: int = 0
    comm_name: Optional[str] = None


def predicted(model: CostModel, workload: Workload, plan: Plan) -> Breakdown:
    """A plan scored by ``model`` (whoever made it)."""
    return Breakdown.of(model.breakdown(workload, plan.tables))


def timed(make: Callable[[], Plan]) -> tuple[Plan, float]:
    started = time.perf_counter()
    plan = make()
    return plan, time.perf_counter() - started


def compare_with_torchrec(
    workload: Workload,
    model: CostModel,
    config: PlanConfig = PlanConfig(),
    *,
    sha256: Optional[str] = None,
    rounds: int = 0,
    comm=None,
) -> Comparison:
    """Plan with TorchRec's planner and with shardopt (``config``), score both with ``model`` and,
    with ``rounds``, replay both side by side (``comm``: the all-to-all source; None: the
    comm-source rule's for ``model``, as its predictions have)."""
    from shardopt.planner import plan_with
    from shardopt.torchrec.to_model import torchrec_plan

    out = Comparison(workload, model.name, rounds=rounds)
    theirs, theirs_s = timed(lambda: torchrec_plan(workload, sha256))
    ours, ours_s = timed(lambda: plan_with(workload, config, cost_model=model, sha256=sha256))
    for name, plan, seconds in (("shardopt", ours, ours_s), ("torchrec", theirs, theirs_s)):
        out.sides[name] = Side(plan, seconds, predicted(model, workload, plan))
    if rounds:
        from shardopt.measure.replay import comm_for, replay_side_by_side

        comm = comm or comm_for(workload, model)
        result = replay_side_by_side(workload, {"shardopt": ours, "torchrec": theirs}, rounds, comm=comm)
        for name, side in out.sides.items():
            side.measured = (result.step_ms(name), result.bottleneck_ms(name))
        out.comm_name = comm.name
    return out


def comparison_text(c: Comparison) -> str:
    """The side-by-side table the CLI prints, and the ratios."""
    wl, replayed = c.workload, bool(c.rounds)
    lines = [f"{wl.name}: {len(wl.tables)} tables on {wl.topology.world_size} ranks; cost model {c.model_name}",
             "ms per step (critical path: each phase's slowest rank, summed) and of the bottleneck rank",
             f"{'planner':<10} {'plan s':>7} {'predicted step':>15} {'bottleneck':>11}"
             + (f" {'replayed step':>14} {'bottleneck':>11}" if replayed else "")]
    for name, side in c.sides.items():
        line = (f"{name:<10} {side.plan_s:>7.1f} {side.predicted.step_ms:>15.3f}"
                f" {side.predicted.bottleneck_ms:>11.3f}")
        if replayed:
            line += f" {side.measured[0]:>14.3f} {side.measured[1]:>11.3f}"
        lines.append(line)
    ours, theirs = c.sides["shardopt"], c.sides["torchrec"]
    ratio = (f"shardopt / torchrec: predicted {ours.predicted.step_ms / theirs.predicted.step_ms:.3f} per step"
             f" ({ours.predicted.bottleneck_ms / theirs.predicted.bottleneck_ms:.3f} by bottleneck)")
    if replayed:
        ratio += (f", replayed {ours.measured[0] / theirs.measured[0]:.3f} per step"
                  f" ({ours.measured[1] / theirs.measured[1]:.3f} by bottleneck;"
                  f" per-rank medians of {c.rounds} rounds side by side; comm: {c.comm_name})")
    lines.append(ratio)
    return "\n".join(lines)
