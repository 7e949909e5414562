"""A sweep's table (markdown), its data (JSON) and its plot: step and scaling efficiency over ranks."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

from shardopt.core.units import format_bytes
from shardopt.planner.sweep import SweepPoint, smallest_meeting


def sweep_table(points: Sequence[SweepPoint], target_ms: Optional[float]) -> str:
    if any(p.group_size is not None for p in points):
        return group_table(points, target_ms)
    lines = ["| ranks | HBM per rank | step (ms) | fwd lookups | fwd comm | bwd comm | bwd lookups"
             " | headroom | scaling efficiency | meets target |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        meets = "" if target_ms is None else ("yes" if p.feasible and p.step_ms <= target_ms else "no")
        if not p.feasible:
            lines.append(f"| {p.world_size} | {format_bytes(p.hbm_cap)} | no plan | | | | | | | {meets} |")
            continue
        phases = " | ".join(f"{v:.3f}" for v in p.phases_ms)
        lines.append(f"| {p.world_size} | {format_bytes(p.hbm_cap)} | {p.step_ms:.3f} | {phases}"
                     f" | {p.headroom:.0%} | {p.efficiency:.2f} | {meets} |")
    reasons = [f"- {p.world_size} rank{'s' if p.world_size > 1 else ''}, {format_bytes(p.hbm_cap)}: {p.reason}"
               for p in points if not p.feasible]
    return "\n".join(lines + (["", "No plan:"] + reasons if reasons else []))


def group_table(points: Sequence[SweepPoint], target_ms: Optional[float]) -> str:
    """The trade per sharding group size: the step with the sync, the group's phases, the sync."""
    lines = ["| ranks | group | replicas | HBM per rank | step with sync (ms) | fwd lookups | fwd comm | bwd comm"
             " | bwd lookups | sync (ms) | headroom | meets target |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    feasible = [p for p in points if p.feasible]
    best = min(feasible, key=lambda p: (p.step_ms, -p.group_size), default=None)
    for p in points:
        meets = "" if target_ms is None else ("yes" if p.feasible and p.step_ms <= target_ms else "no")
        head = f"| {p.world_size} | {p.group_size} | {p.world_size // p.group_size} | {format_bytes(p.hbm_cap)}"
        if not p.feasible:
            lines.append(f"{head} | no plan | | | | | | | {meets} |")
            continue
        phases = " | ".join(f"{v:.3f}" for v in p.phases_ms)
        mark = " (best)" if p is best else ""
        lines.append(f"{head} | {p.step_ms:.3f}{mark} | {phases} | {p.sync_ms:.3f} | {p.headroom:.0%} | {meets} |")
    reasons = [f"- groups of {p.group_size} over {p.world_size} ranks: {p.reason}" for p in points if not p.feasible]
    return "\n".join(lines + (["", "No plan:"] + reasons if reasons else []))


def group_png(points: Sequence[SweepPoint], title: str, path: Path) -> None:
    """Step with the sync, the group's own step and the sync over group sizes (one line set per world)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fig, (step_ax, room_ax) = plt.subplots(1, 2, figsize=(9, 3.6))
    for world in sorted({p.world_size for p in points}):
        ok = sorted((p for p in points if p.world_size == world and p.feasible), key=lambda p: p.group_size)
        xs = [p.group_size for p in ok]
        line, = step_ax.plot(xs, [p.step_ms for p in ok], "o-", label=f"{world} ranks: step with sync")
        step_ax.plot(xs, [p.step_ms - p.sync_ms for p in ok], "--", color=line.get_color(), lw=0.9,
                     label=f"{world} ranks: group's own step")
        synced = [p for p in ok if p.sync_ms > 0]  # one group over the world syncs nothing
        step_ax.plot([p.group_size for p in synced], [p.sync_ms for p in synced], ":", color=line.get_color(),
                     lw=0.9, label=f"{world} ranks: sync")
        room_ax.plot(xs, [p.headroom for p in ok], "o-", color=line.get_color(), label=f"{world} ranks")
    step_ax.set_yscale("log")
    step_ax.set_ylabel("predicted ms per step")
    room_ax.set_ylabel("HBM headroom (fullest rank)")
    _finish(fig, (step_ax, room_ax), sorted({p.group_size for p in points}), "sharding group size (ranks)", title, path)


def _finish(fig, axes, ticks, xlabel: str, title: str, path: Path) -> None:
    """Both panels on a log-2 axis of ``ticks``, the right one a share in [0, 1]; written, closed."""
    import matplotlib.pyplot as plt

    from shardopt.core.files import write_figure

    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.legend(fontsize=6)
    axes[1].set_ylim(0, 1.05)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    write_figure(fig, path)
    plt.close(fig)


def verdict(points: Sequence[SweepPoint], target_ms: Optional[float]) -> Optional[str]:
    if target_ms is None:
        return None
    best = smallest_meeting(points, target_ms)
    if best is None:
        return f"no point of the sweep meets the target step of {target_ms:g} ms"
    return (f"the smallest cluster meeting {target_ms:g} ms: {best.world_size} ranks with"
            f" {format_bytes(best.hbm_cap)} of HBM each (step {best.step_ms:.3f} ms)")


def sweep_json(points: Sequence[SweepPoint], settings: dict, target_ms: Optional[float]) -> str:
    best = smallest_meeting(points, target_ms) if target_ms is not None else None
    return json.dumps({"settings": settings, "target_ms": target_ms,
                       "smallest_meeting_target": asdict(best) if best else None,
                       "points": [asdict(p) for p in points]}, indent=1)


def sweep_png(points: Sequence[SweepPoint], title: str, target_ms: Optional[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fig, (step_ax, eff_ax) = plt.subplots(1, 2, figsize=(9, 3.6))
    for cap in sorted({p.hbm_cap for p in points}):
        mine = sorted((p for p in points if p.hbm_cap == cap), key=lambda p: p.world_size)
        ok = [p for p in mine if p.feasible]
        label = format_bytes(cap)
        line, = step_ax.plot([p.world_size for p in ok], [p.step_ms for p in ok], "o-", label=label)
        bad = [p.world_size for p in mine if not p.feasible]
        if bad:
            floor = min((p.step_ms for p in ok), default=1.0)
            step_ax.plot(bad, [floor] * len(bad), "x", color=line.get_color(), label=f"{label}: no plan")
        eff_ax.plot([p.world_size for p in ok], [p.efficiency for p in ok], "o-", label=label)
    if target_ms is not None:
        step_ax.axhline(target_ms, color="grey", ls="--", lw=0.8, label="target")
    step_ax.set_ylabel("predicted step (ms)")
    eff_ax.set_ylabel("weak-scaling efficiency")
    _finish(fig, (step_ax, eff_ax), sorted({p.world_size for p in points}), "ranks", title, path)
