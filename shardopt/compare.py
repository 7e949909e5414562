"""shardopt against TorchRec's planner on one workload: both plans, scored by one cost model and,
optionally, replayed side by side on this machine's kernels (the CLI's ``compare`` and
``benchmarks/vs_torchrec.py`` share it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from shardopt.contracts import Breakdown, PlanConfig
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.torchrec.bounded import NOT_FINISHED


@dataclass
class Side:
    """One planner's plan, how long planning took, and its predicted (and measured) step."""

    plan: Optional[Plan]
    plan_s: float
    predicted: Optional[Breakdown] = None
    measured: Optional[tuple[float, float]] = None  # (step ms, bottleneck ms) of per-rank centres
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
    torchrec_timeout_s: Optional[int] = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Comparison:
    """Plan with shardopt (``config``) and with TorchRec's planner, score both with ``model`` and,
    with ``rounds``, replay both side by side (``comm``: the all-to-all source; None: the
    comm-source rule's for ``model``, as its predictions have). ``torchrec_timeout_s`` bounds
    TorchRec's side (``shardopt.torchrec.bounded``); where it does not finish, its side holds no
    plan and a note, and shardopt's side is still scored and replayed."""
    from shardopt.planner import plan_with

    out = Comparison(workload, model.name, rounds=rounds)
    progress(f"shardopt: planning {len(workload.tables)} tables on {workload.topology.world_size} ranks")
    ours, ours_s = timed(lambda: plan_with(workload, config, cost_model=model, sha256=sha256))
    progress(f"shardopt: planned in {ours_s:.1f} s; TorchRec's planner: planning"
             + (f" (search bound {torchrec_timeout_s} s)" if torchrec_timeout_s else ""))
    out.sides["shardopt"] = Side(ours, ours_s, predicted(model, workload, ours))
    started = time.perf_counter()
    try:
        if torchrec_timeout_s is None:
            from shardopt.torchrec.to_model import torchrec_plan

            theirs, theirs_s = timed(lambda: torchrec_plan(workload, sha256))
            note = ""
        else:
            from shardopt.torchrec.bounded import bounded_torchrec_plan

            bounded = bounded_torchrec_plan(workload, sha256, torchrec_timeout_s, progress)
            theirs, theirs_s, note = bounded.plan, bounded.seconds, bounded.note
    except ShardoptError as exc:
        if exc.kind != ErrorKind.INFEASIBLE:
            raise
        # TorchRec found no plan where shardopt found one: that is the comparison's answer.
        theirs, theirs_s, note = None, time.perf_counter() - started, str(exc)
    ended = "planned" if theirs is not None else "stopped" if NOT_FINISHED in note else "found no plan"
    progress(f"TorchRec's planner: {ended} after {theirs_s:.1f} s")
    out.sides["torchrec"] = Side(theirs, theirs_s, predicted(model, workload, theirs) if theirs else None, note=note)
    if rounds:
        from shardopt.measure.replay import comm_for, replay_side_by_side

        comm = comm or comm_for(workload, model)
        plans = {name: side.plan for name, side in out.sides.items() if side.plan is not None}
        progress(f"replaying {' and '.join(plans)} side by side, {rounds} rounds")
        result = replay_side_by_side(workload, plans, rounds, comm=comm)
        for name in plans:
            out.sides[name].measured = (result.step_ms(name), result.bottleneck_ms(name))
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
        if side.plan is None:
            lines.append(f"{name:<10} {side.plan_s:>7.1f} {'no plan: ' + side.note:>15}")
            continue
        line = (f"{name:<10} {side.plan_s:>7.1f} {side.predicted.step_ms:>15.3f}"
                f" {side.predicted.bottleneck_ms:>11.3f}")
        if replayed:
            line += f" {side.measured[0]:>14.3f} {side.measured[1]:>11.3f}"
        lines.append(line + (f"   ({side.note})" if side.note else ""))
    ours, theirs = c.sides["shardopt"], c.sides["torchrec"]
    if theirs.plan is None:
        lines.append("shardopt / torchrec: no ratio, TorchRec's planner gave no plan"
                     + (" in time" if NOT_FINISHED in theirs.note else ""))
        return "\n".join(lines)
    ratio = (f"shardopt / torchrec: predicted {ours.predicted.step_ms / theirs.predicted.step_ms:.3f} per step"
             f" ({ours.predicted.bottleneck_ms / theirs.predicted.bottleneck_ms:.3f} by bottleneck)")
    if replayed:
        ratio += (f", replayed {ours.measured[0] / theirs.measured[0]:.3f} per step"
                  f" ({ours.measured[1] / theirs.measured[1]:.3f} by bottleneck;"
                  f" per-rank centres of {c.rounds} rounds side by side; comm: {c.comm_name})")
    lines.append(ratio)
    return "\n".join(lines)
