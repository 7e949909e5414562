"""The plan summary people read in a terminal: per-rank cost bars, bottleneck, gap to the bound."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from shardopt.contracts import PHASES, Breakdown
from shardopt.costmodel.plan_kernels import COLUMN_KINDS
from shardopt.core.plan import Plan, Predicted, RankBreakdown
from shardopt.core.units import format_bytes
from shardopt.core.workload import Workload

BAR_WIDTH = 30


# A plan's summary lists at most this many ranks: at hundreds or thousands of ranks a line each
# would bury the lines after it. The costliest are shown, with the spread over all of them.
SUMMARY_RANKS = 32


def breakdown_table(
    workload: Workload, per_rank: Sequence[RankBreakdown], bottleneck: int | None = None,
    most: int | None = None,
) -> str:
    """Per-rank costs and memory with a bar per rank, scaled to the most loaded; with ``most``,
    only that many ranks (each phase's slowest, the costliest, the fullest, the least loaded)
    and the spread over all."""
    topo = workload.topology
    peak = Breakdown.of(per_rank).bottleneck_ms or 1.0
    if bottleneck is None:
        bottleneck = max(per_rank, key=lambda r: (r.total_ms, -r.rank)).rank
    shown = _ranks_shown(per_rank, bottleneck, topo.rank_caps, most)
    lines = [
        f"{'rank':>4} {'fwd_comp':>9} {'bwd_comp':>9} {'fwd_comm':>9} {'bwd_comm':>9}"
        f" {'total_ms':>9}  {'memory':>10} {'used':>5}  cost"
    ]
    for r in shown:
        bar = "#" * max(1, round(BAR_WIDTH * r.total_ms / peak)) if r.total_ms else ""
        mark = " <- bottleneck" if r.rank == bottleneck else ""
        lines.append(
            f"{r.rank:>4} {r.fwd_compute_ms:>9.3f} {r.bwd_compute_ms:>9.3f}"
            f" {r.fwd_comm_ms:>9.3f} {r.bwd_comm_ms:>9.3f} {r.total_ms:>9.3f}"
            f"  {format_bytes(r.hbm_bytes):>10} {r.hbm_bytes / topo.rank_caps[r.rank]:>5.0%}  {bar}{mark}"
        )
    if len(shown) < len(per_rank):
        totals = np.array([r.total_ms for r in per_rank])
        lines.append(
            f"({len(shown)} of {len(per_rank)} ranks shown: each phase's slowest, the costliest, the fullest"
            " and the least loaded;"
            f" total_ms over every rank: min {totals.min():.3f}, median {np.median(totals):.3f},"
            f" 90th percentile {np.percentile(totals, 90):.3f}, max {totals.max():.3f}."
            " Every rank: `shardopt evaluate WORKLOAD PLAN`, or the plan file's predicted.per_rank)"
        )
    return "\n".join(lines)


def _ranks_shown(per_rank: Sequence[RankBreakdown], bottleneck: int, caps: Sequence[int],
                 most: int | None) -> list[RankBreakdown]:
    """Every rank, or (past ``most``) in rank order: the slowest of each phase (the critical
    path's ranks), the bottleneck, the rank with the most of its memory used, the least loaded,
    and the costliest others up to ``most``."""
    if most is None or len(per_rank) <= most:
        return list(per_rank)
    keep = {max(per_rank, key=lambda r: (getattr(r, p), -r.rank)).rank for p in PHASES}
    keep |= {bottleneck, max(per_rank, key=lambda r: (r.hbm_bytes / caps[r.rank], -r.rank)).rank,
             min(per_rank, key=lambda r: (r.total_ms, r.rank)).rank}
    for r in sorted(per_rank, key=lambda r: (-r.total_ms, r.rank)):
        if len(keep) >= most:
            break
        keep.add(r.rank)
    return [r for r in per_rank if r.rank in keep]


def _constants_line(workload: Workload) -> str:
    """Which hardware constants priced the kernels, where the model is not fitted to a machine."""
    from shardopt.core.hardware import hardware_for

    hw = hardware_for(workload.topology)
    bwd = f", {hw.bwd_mem_bw_gbps:g} GB/s backward" if hw.bwd_mem_bw_gbps else ""
    return (f"compute: priced from hardware profile '{hw.name}' ({hw.description}): memory"
            f" {hw.mem_bw_gbps:g} GB/s forward{bwd}, {hw.kernel_us:g} us per kernel call; each"
            " constant's source is in shardopt/data/hardware.yaml")


def placement_lines(workload: Workload) -> list[str]:
    """The rules and unlike ranks the plan was made under (each one kept: plans that break one
    are never written)."""
    topo = workload.topology
    out = []
    if workload.placement:
        rules = "; ".join(f"{r.describe()}" for r in workload.placement[:6])
        more = f"; and {len(workload.placement) - 6} more" if len(workload.placement) > 6 else ""
        out.append(f"placement: {len(workload.placement)} rule{'s' if len(workload.placement) > 1 else ''}"
                   f" kept ({rules}{more})")
    unlike = [(r, c) for r, c in enumerate(topo.rank_caps) if c != topo.hbm_cap] if topo.ranks else []
    if unlike:
        out.append("ranks with their own HBM for shards: " + ", ".join(
            f"rank {r} {format_bytes(c)}" for r, c in unlike[:8]) + (" ..." if len(unlike) > 8 else ""))
    slow = [(r, s) for r, s in enumerate(topo.rank_speeds) if s != 1.0] if topo.ranks else []
    if slow:
        out.append("slower ranks (lookups priced at 1/speed): " + ", ".join(
            f"rank {r} x{s:g}" for r, s in slow[:8]) + (" ..." if len(slow) > 8 else ""))
    return out


def sensitivity_lines(predicted: Predicted) -> list[str]:
    """How far the step leans on uncertain constants, and whether the search planned for it."""
    sens = predicted.sensitivity
    if sens is None:
        return []
    robust = predicted.search.robust if predicted.search else None
    scales = ", ".join(f"x{_scale(s)} {ms:.3f}" for s, ms in zip(sens.compute_scales, sens.steps_ms))
    low, mid, high = sens.expected_ms
    lines = [
        f"sensitivity: the step with compute scaled against comm {scales} ms; with each table off by its own"
        f" error (~{sens.table_error:.0%}) {low:.3f}-{high:.3f} ms (10-90%, median {mid:.3f})",
        f"robust: {'on' if robust else 'off'}, the search minimised the "
        f"{'step under that doubt' if robust else 'nominal step'}; doubt: {sens.basis}",
    ]
    if sens.extrapolated:
        names = ", ".join(sens.extrapolated[:8]) + (f" and {len(sens.extrapolated) - 8} more" if len(sens.extrapolated) > 8 else "")
        lines.append(f"outside the shapes the model was fitted on: {names} (priced by extrapolation;"
                     " shardopt calibrate --workload measures them)")
    return lines


def _scale(value: float) -> str:
    """1/3 as ``1/3``, also as the plan file keeps it (0.333333, six digits)."""
    for den in (1, 2, 3, 4):
        if abs(value * den - round(value * den)) < 1e-5:
            return f"{round(value * den)}" if den == 1 else f"{round(value * den)}/{den}"
    return f"{value:g}"


def parallelism_lines(plan: Plan) -> list[str]:
    """A group plan's place in its 2D world, and what ``auto`` weighed."""
    block = plan.parallelism
    if block is None:
        return []
    how = {"default": f"all-reduce of weights and optimizer state every {block.sync_every} step"
                      f"{'s' if block.sync_every > 1 else ''}",
           "fully_sharded": "reduce-scatter and all-gather of the weights every step"}[block.strategy]
    lines = [
        f"2D: {block.replicas} replica{'s' if block.replicas > 1 else ''} of a sharding group of"
        f" {block.sharding_group_size} ranks over {block.world_size} ({block.chosen_by} chose the size);"
        f" sync: {how}, {block.sync_ms:.3f} ms a step on the slowest replica group"
        f" ({format_bytes(block.sync_bytes)} on the rank that syncs most)",
        f"step with the sync: {block.step_ms:.3f} ms (the group's critical path {block.step_ms - block.sync_ms:.3f}"
        f" + sync {block.sync_ms:.3f})",
    ]
    if block.choices:
        parts = [f"{c.sharding_group_size}: {c.step_ms:.3f} ms" if c.step_ms is not None
                 else f"{c.sharding_group_size}: {_short(c.refused)}" for c in block.choices]
        lines.append("group sizes weighed: " + "; ".join(parts))
    return lines


def groups_hint(workload: Workload, plan: Plan) -> list[str]:
    """A 1D GPU plan with more ranks than tables, mostly waiting on its all-to-alls: each table's
    pieces reach every rank there, and 2D sharding groups (DMPCollection) were 1.5-2.3x faster on
    synthetic H200 workloads of 200-800 tables on 512-4096 ranks (benchmarks/results/plan_time.md)."""
    topo, predicted = workload.topology, plan.predicted
    if (predicted is None or plan.parallelism is not None or topo.compute_device != "cuda"
            or topo.num_hosts < 2 or topo.world_size <= len(workload.tables)):
        return []
    step = Breakdown.of(predicted.per_rank).step_ms
    comm = max(r.fwd_comm_ms for r in predicted.per_rank) + max(r.bwd_comm_ms for r in predicted.per_rank)
    if step <= 0 or comm < step / 2:
        return []
    return [f"2D not weighed: {topo.world_size} ranks for {len(workload.tables)} tables, comm {comm / step:.0%}"
            " of the step; a workload's parallelism block (sharding_group_size: auto, sync_every as training"
            " allows) plans sharding groups against their replicas' sync, `shardopt sweep` with --group-sizes"
            " all shows each size"]


def _short(reason: str | None) -> str:
    if not reason:
        return "not planned"
    return "too small to hold the tables" if "the tables need" in reason else \
        "not planned (its sync alone is slower)" if reason.startswith("not planned") else reason


def statistics_line(workload: Workload) -> list[str]:
    """Which tables' pooling and access were measured from batches, and which are assumed."""
    measured = [t for t in workload.tables if getattr(t.access, "batches", None)]
    if not measured:
        return []
    assumed = [t.name for t in workload.tables if not getattr(t.access, "batches", None)]
    counts = sorted({t.access.batches for t in measured})
    line = (f"statistics: {len(measured)} table{'s' if len(measured) > 1 else ''} measured from"
            f" {'/'.join(map(str, counts))} batches")
    if assumed:
        line += f"; {len(assumed)} assumed as the workload gives them ({', '.join(assumed[:5])}" \
                f"{' ...' if len(assumed) > 5 else ''})"
    return [line]


def plan_summary(workload: Workload, plan: Plan, hardware: str) -> str:
    from shardopt.arithmetic.checks import planned_workload

    predicted = plan.predicted
    workload = planned_workload(workload, plan)
    topo = workload.topology
    lines = [
        f"{workload.name}: {len(workload.tables)} tables on {topo.world_size} ranks"
        f" ({topo.num_hosts} host{'s' if topo.num_hosts > 1 else ''}, {topo.compute_device},"
        f" hardware {hardware}), cost model {predicted.cost_model if predicted else 'none'}"
    ]
    if predicted:
        lines.append(breakdown_table(workload, predicted.per_rank, predicted.bottleneck.rank, SUMMARY_RANKS))
        b = predicted.bottleneck
        lines.append(
            f"bottleneck: rank {b.rank} at {b.total_ms:.3f} ms; lower bound"
            f" {predicted.lower_bound_ms:.3f} ms (gap {predicted.gap:.1%});"
            f" memory cap {format_bytes(topo.hbm_cap)} per rank"
        )
        step = Breakdown.of(predicted.per_rank).step_ms
        above = f"; {step / predicted.lower_bound_ms - 1:.1%} above the lower bound" if predicted.lower_bound_ms > 0 else ""
        lines.append(
            f"critical path: {step:.3f} ms (a synchronous step: the slowest rank of each phase, summed;"
            f" no step is below the bottleneck's bound{above})"
        )
        if predicted.cost_model.startswith("analytic-v0"):
            lines.append(_constants_line(workload))
        if predicted.comm_source:
            fwd = max(r.fwd_comm_ms for r in predicted.per_rank)
            bwd = max(r.bwd_comm_ms for r in predicted.per_rank)
            lines.append(f"comm: {fwd:.3f} ms forward, {bwd:.3f} ms backward on the slowest rank;"
                         f" priced from {predicted.comm_source}")
        lines.extend(sensitivity_lines(predicted))
    lines.extend(parallelism_lines(plan) or groups_hint(workload, plan))
    lines.extend(statistics_line(workload))
    lines.extend(placement_lines(workload))
    kinds = Counter(t.sharding_type for t in plan.tables)
    whole = sum(t.sharding_type in COLUMN_KINDS and len(t.shards) == 1 for t in plan.tables)
    lines.append("sharding: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                 + (f"; {whole} of the column kinds are whole tables in one piece (TorchRec runs them in"
                    " the kernel of their rank's column cut)" if whole else ""))
    tiered = [t for t in plan.tables if t.compute_kernel == "fused_uvm_caching"]
    if tiered:
        factors = sorted({t.cache_load_factor for t in tiered if t.cache_load_factor is not None})
        lines.append(
            f"hot/cold tiers: {len(tiered)} tables cache hot rows in HBM"
            + (f" (load factors {', '.join(f'{f:g}' for f in factors)})" if factors else "")
        )
    hot = [t for t in plan.tables if t.replicated_rows]
    if hot:
        lines.append(
            f"hot rows: {len(hot)} tables replicate their hottest rows on every rank"
            f" ({sum(t.replicated_rows for t in hot)} rows in all; ids remapped hottest first)"
        )
    search = predicted.search if predicted else None
    if search:
        parts = [f"search: {search.algorithm}, status {search.status}"]
        if search.objective:
            parts.append(f"objective {search.objective}")
        if search.solver_bound_ms:  # none proven (0) says nothing
            parts.append(f"solver bound {search.solver_bound_ms:.3f} ms")
        if search.variables:
            parts.append(f"{search.variables} placements")
        if search.repair_moves is not None:
            parts.append(f"{search.repair_moves} repair moves")
        lines.append("; ".join(parts))
    return "\n".join(lines)
