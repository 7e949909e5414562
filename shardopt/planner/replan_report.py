"""What ``shardopt replan`` prints and plots: one replan's line, and the frontier of step
against bytes moved."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from shardopt.core.units import format_bytes
from shardopt.planner.replan import Replanned


def replan_line(r: Replanned) -> str:
    fresh = r.step_ms(r.fresh)
    return (f"replan: step {r.step_ms():.3f} ms ({r.step_ms() / fresh:.3f}x a fresh plan's {fresh:.3f} ms),"
            f" moving {format_bytes(r.moved_bytes)} of the {format_bytes(r.fresh_moved_bytes)} a fresh plan"
            f" moves (budget {format_bytes(r.budget_bytes)}; the change forces {format_bytes(r.forced_bytes)})"
            + (f"; ranks {', '.join(map(str, r.lost))} lost: {format_bytes(r.restored_bytes)} of it read from the"
               f" checkpoint, the survivors keep their order as ranks 0-{len(r.old_of) - 1}" if r.lost else ""))


def frontier_table(points: Sequence[Replanned]) -> str:
    lines = ["| budget | moved | moved / fresh's | step (ms) | step / fresh's | search |", "|---|---|---|---|---|---|"]
    for r in points:
        fresh = r.step_ms(r.fresh)
        lines.append(
            f"| {format_bytes(r.budget_bytes)} | {format_bytes(r.moved_bytes)} |"
            f" {r.moved_bytes / max(r.fresh_moved_bytes, 1):.2f} | {r.step_ms():.3f} | {r.step_ms() / fresh:.3f} |"
            f" {r.plan.predicted.search.status if r.plan.predicted and r.plan.predicted.search else ''} |")
    return "\n".join(lines)


def frontier_png(points: Sequence[Replanned], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shardopt.core.files import write_figure

    fig, ax = plt.subplots(figsize=(5, 3.5))
    gib = 2 ** 30
    ax.plot([r.moved_bytes / gib for r in points], [r.step_ms() for r in points], "o-", label="replan")
    if points:
        fresh = points[0]
        ax.plot([fresh.fresh_moved_bytes / gib], [fresh.step_ms(fresh.fresh)], "s", label="fresh plan")
        ax.axvline(fresh.forced_bytes / gib, color="grey", lw=0.8, ls="--", label="forced")
    ax.set_xlabel("bytes moved (GiB)")
    ax.set_ylabel("predicted step (ms)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    write_figure(fig, path)
    plt.close(fig)
