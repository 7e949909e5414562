"""Run planners side by side on benchmark tasks: plan, score, check, and (optionally) replay.

Per task every planner plans the same workload; each plan is scored by the pinned default model
(predicted bottleneck), checked (validity), sized (memory headroom) and, with ``rounds``, replayed in
interleaved rounds (every planner's every rank built afresh and timed in a shuffled order each
round, per-rank centres kept: :func:`shardopt.measure.replay.rank_centre`), so a drift of the
machine hits every planner and rank alike. The lower bound is shardopt's for the task.
"""

from __future__ import annotations

from shardopt.contracts import DEFAULT_TIME_LIMIT_S

import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from shardopt.bench.tasks import Task
from shardopt.core.errors import ShardoptError

PLANNERS = ("shardopt", "shardopt-learned", "torchrec", "random", "size-greedy", "dim-greedy",
            "lookup-greedy", "size-lookup-greedy")


@dataclass
class Entry:
    """One planner on one task."""

    task: str
    planner: str
    valid: bool
    plan_s: float
    predicted_ms: Optional[float] = None  # the bottleneck rank's total
    replayed_ms: Optional[float] = None
    predicted_step_ms: Optional[float] = None  # the critical path: slowest rank per phase, summed
    replayed_step_ms: Optional[float] = None
    replayed_runs: list = field(default_factory=list)
    headroom: Optional[float] = None  # 1 - the fullest rank's memory over the cap
    lower_bound_ms: Optional[float] = None
    replayed_imbalance: Optional[float] = None  # measured: the bottleneck rank over the mean rank
    note: str = ""

    @property
    def gap(self) -> Optional[float]:
        if self.predicted_ms is None or not self.lower_bound_ms:
            return None
        return self.predicted_ms / self.lower_bound_ms - 1


def planner_search(name: str, time_limit_s: float = DEFAULT_TIME_LIMIT_S):
    """The search object behind a planner name (TorchRec's is run separately)."""
    from shardopt.bench.baselines import RandomTableWise, TableWiseGreedy
    from shardopt.contracts import PlanConfig
    from shardopt.planner import build_search

    if name in ("shardopt", "shardopt-learned"):
        return build_search(PlanConfig(time_limit_s=time_limit_s))
    if name == "random":
        return RandomTableWise(seed=0)
    return TableWiseGreedy(name)


def run_suite(
    tasks: list[Task],
    planners: tuple[str, ...] = PLANNERS,
    *,
    rounds: int = 0,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    searches: Optional[dict[str, Callable]] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> tuple[list[Entry], dict]:
    """Entries for every (task, planner), and the plans themselves keyed the same way."""
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.arithmetic.memory import plan_memory
    from shardopt.arithmetic.checks import check_plan
    from shardopt.planner import plan_workload
    from shardopt.contracts import Breakdown

    entries: list[Entry] = []
    plans: dict = {}
    for task in tasks:
        workload = task.workload
        model, _ = resolve_cost_model("analytic", workload)
        bound = None
        for planner in planners:
            started = time.perf_counter()
            try:
                if planner == "torchrec":
                    from shardopt.torchrec.to_model import torchrec_plan

                    plan = torchrec_plan(workload)
                else:
                    search = (searches or {}).get(planner) or planner_search(planner, time_limit_s)
                    plan_model = model
                    if planner == "shardopt-learned":
                        plan_model, _ = resolve_cost_model("learned", workload)
                    plan = plan_workload(workload, cost_model=plan_model, search=search, source=task.name)
            except ShardoptError as exc:
                entries.append(Entry(task.name, planner, False, time.perf_counter() - started,
                                     note=str(exc).split(": ", 1)[-1][:120]))
                continue
            seconds = time.perf_counter() - started
            if planner == "shardopt":
                bound = plan.predicted.lower_bound_ms
            per_rank = model.breakdown(workload, plan.tables)
            hbm, _ = plan_memory(workload, plan.tables)
            entries.append(Entry(
                task.name, planner, check_plan(workload, plan).valid, seconds,
                predicted_ms=Breakdown.of(per_rank).bottleneck_ms,
                predicted_step_ms=Breakdown.of(per_rank).step_ms,
                headroom=1 - max(hbm.values(), default=0) / workload.topology.hbm_cap,
            ))
            plans[task.name, planner] = plan
        for e in entries:
            if e.task == task.name:
                e.lower_bound_ms = bound
        if progress:
            progress(f"{task.name}: planned by {len([e for e in entries if e.task == task.name])} planners")
        if rounds:
            _replay_rounds(task, [e for e in entries if e.task == task.name and e.valid], plans, rounds, model)
            if progress:
                progress(f"{task.name}: replayed")
    return entries, plans


def _replay_rounds(task: Task, entries: list[Entry], plans: dict, rounds: int, model) -> None:
    """Every valid plan of the task replayed side by side (:func:`shardopt.measure.replay.replay_side_by_side`):
    compute measured, communication by the comm-source rule (the task's declared links), as
    predicted. ``replayed_runs`` keeps each round's bottleneck."""
    from shardopt.measure.replay import comm_for, replay_side_by_side

    result = replay_side_by_side(task.workload, {e.planner: plans[task.name, e.planner] for e in entries},
                                 rounds, comm=comm_for(task.workload, model))
    for e in entries:
        e.replayed_ms = result.bottleneck_ms(e.planner)
        e.replayed_step_ms = result.step_ms(e.planner)
        e.replayed_runs = result.runs[e.planner]
        per_rank = result.per_rank[e.planner]
        totals = [r.total_ms for r in per_rank]
        e.replayed_imbalance = max(totals) / (sum(totals) / len(totals)) if sum(totals) > 0 else None
        plans[task.name, e.planner, "replayed"] = per_rank


def entries_to_json(entries: list[Entry]) -> list[dict]:
    return [{**asdict(e), "gap": e.gap} for e in entries]
