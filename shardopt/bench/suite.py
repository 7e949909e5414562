"""Run planners side by side on benchmark tasks: plan, score, check, and (optionally) replay.

Per task every planner plans the same workload; each plan is scored by the pinned default model
(predicted bottleneck), checked (validity), sized (memory headroom) and, with ``rounds``, replayed in
interleaved rounds (every planner's every rank in a shuffled order each round, per-rank medians
kept), so a drift of the machine hits every planner and rank alike. The lower bound is
shardopt's for the task.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from shardopt.bench.tasks import Task
from shardopt.errors import ShardoptError

# Kernels (weights and optimizer state of every planner's shards) a replay window may hold at once.
REPLAY_MEMORY_BYTES = 6 * 2**30

PLANNERS = ("shardopt", "shardopt-learned", "torchrec", "random", "size-greedy", "dim-greedy",
            "lookup-greedy", "size-lookup-greedy")


@dataclass
class Entry:
    """One planner on one task."""

    task: str
    planner: str
    valid: bool
    plan_s: float
    predicted_ms: Optional[float] = None
    replayed_ms: Optional[float] = None
    replayed_runs: list = field(default_factory=list)
    headroom: Optional[float] = None  # 1 - the fullest rank's memory over the cap
    lower_bound_ms: Optional[float] = None
    note: str = ""

    @property
    def gap(self) -> Optional[float]:
        if self.predicted_ms is None or not self.lower_bound_ms:
            return None
        return self.predicted_ms / self.lower_bound_ms - 1


def planner_search(name: str, time_limit_s: float = 5.0):
    """The search object behind a planner name (TorchRec's is run separately)."""
    from shardopt.bench.baselines import RandomTableWise, TableWiseGreedy
    from shardopt.search.ilp import IlpSearch

    if name in ("shardopt", "shardopt-learned"):
        return IlpSearch(time_limit_s=time_limit_s, candidates="torchrec")
    if name == "random":
        return RandomTableWise(seed=0)
    return TableWiseGreedy(name)


def run_suite(
    tasks: list[Task],
    planners: tuple[str, ...] = PLANNERS,
    *,
    rounds: int = 0,
    time_limit_s: float = 5.0,
    searches: Optional[dict[str, Callable]] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> tuple[list[Entry], dict]:
    """Entries for every (task, planner), and the plans themselves keyed the same way."""
    from shardopt.costmodel.registry import resolve_cost_model
    from shardopt.memory import plan_memory
    from shardopt.plan_checks import check_plan
    from shardopt.planner import plan_workload

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
                    from shardopt.torchrec.convert import torchrec_plan

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
                predicted_ms=max(r.total_ms for r in per_rank),
                headroom=1 - max(hbm.values(), default=0) / workload.topology.hbm_cap,
            ))
            plans[task.name, planner] = plan
        for e in entries:
            if e.task == task.name:
                e.lower_bound_ms = bound
        if progress:
            progress(f"{task.name}: planned by {len([e for e in entries if e.task == task.name])} planners")
        if rounds:
            _replay_rounds(task, [e for e in entries if e.task == task.name and e.valid], plans, rounds)
            if progress:
                progress(f"{task.name}: replayed")
    return entries, plans


def _replay_rounds(task: Task, entries: list[Entry], plans: dict, rounds: int,
                   memory_bytes: int = REPLAY_MEMORY_BYTES) -> None:
    """Every plan replayed ``rounds`` times, all ranks and planners side by side.

    The kernels of every (planner, rank) in a window are built once and timed in turns, in a new
    shuffled order each round; a window holds as many ranks as fit ``memory_bytes`` (all of them
    for the bench's tasks). Timing one rank at a time instead gave each rank its own stretch of
    the machine's drift: on the 2-core VMs a rank's compute moved ~20% between such stretches,
    alike for every planner (correlation 0.91), so which rank came out the bottleneck was chance
    and evenly balanced plans paid most for it. A plan's replayed bottleneck is the max over
    ranks of each rank's median: medians first, so timing noise on several near-equal ranks does
    not inflate the max. ``replayed_runs`` keeps each round's bottleneck.
    """
    import numpy as np
    import torch

    from shardopt.replay import PlanReplay, packaged_cpu_comm

    torch.set_num_threads(1)  # one CPU rank is one intra-op thread, as the profile assumes
    comm = packaged_cpu_comm()
    replays = {e.planner: PlanReplay(task.workload, plans[task.name, e.planner], comm=comm) for e in entries}
    world = task.workload.topology.world_size
    timed: dict[str, list[list]] = {e.planner: [[] for _ in range(world)] for e in entries}
    rng = np.random.default_rng(0)
    for ranks in _rank_windows([sum(r.hbm[rank] for r in replays.values()) for rank in range(world)],
                               memory_bytes):
        kernels = {(e.planner, rank): replays[e.planner].build_rank(rank) for rank in ranks for e in entries}
        turns = list(kernels)
        for _ in range(rounds):
            for i in rng.permutation(len(turns)):
                planner, rank = turns[i]
                timed[planner][rank].append(
                    replays[planner].time_rank(rank, kernels[planner, rank], warmup=2, iters=5)
                )
        del kernels
    for e in entries:
        replay = replays[e.planner]
        per_rank = [
            replay.rank_replay(
                rank,
                statistics.median(r.measured.fwd_compute_ms for r in timed[e.planner][rank]),
                statistics.median(r.measured.bwd_compute_ms for r in timed[e.planner][rank]),
            ).measured
            for rank in range(world)
        ]
        e.replayed_ms = max(r.total_ms for r in per_rank)
        e.replayed_runs = [max(timed[e.planner][rank][i].measured.total_ms for rank in range(world))
                           for i in range(rounds)]
        plans[task.name, e.planner, "replayed"] = tuple(per_rank)


def _rank_windows(rank_bytes: list[int], budget: int) -> list[list[int]]:
    """Consecutive ranks grouped so each group's kernels (every planner's) fit ``budget`` bytes;
    a rank bigger than the budget alone is a group of its own."""
    windows: list[list[int]] = []
    held = 0
    for rank, size in enumerate(rank_bytes):
        if windows and held + size <= budget:
            windows[-1].append(rank)
            held += size
        else:
            windows.append([rank])
            held = size
    return windows


def entries_to_json(entries: list[Entry]) -> list[dict]:
    return [{**asdict(e), "gap": e.gap} for e in entries]
