"""A traced job beside the model's prediction of it: per rank and phase, the critical path, the
slowest rank of each phase, and the model's error (what ``shardopt trace report`` prints and
``gate --trace`` checks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from shardopt.contracts import Breakdown
from shardopt.core.files import FIGURE_MAX_IN, RANK_TICKS
from shardopt.core.plan import Plan, RankBreakdown
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel
from shardopt.traces.kineto import MeasuredRank

PHASES = ("fwd_compute", "bwd_compute", "fwd_comm", "bwd_comm")


@dataclass(frozen=True)
class TraceComparison:
    measured: tuple[RankBreakdown, ...]  # comm as the fastest rank of each collective saw it
    predicted: tuple[RankBreakdown, ...]
    waited: tuple[tuple[float, float], ...]  # each rank's comm with its waits (fwd, bwd)
    step_ms: float  # median ProfilerStep span, slowest rank
    model: str

    @property
    def compute_mape(self) -> float:
        """Per-rank lookups (both passes), over the ranks that have any."""
        pairs = [(m.fwd_compute_ms + m.bwd_compute_ms, p.fwd_compute_ms + p.bwd_compute_ms)
                 for m, p in zip(self.measured, self.predicted)]
        errors = [abs(p / m - 1) for m, p in pairs if m > 0]
        return float(np.mean(errors)) if errors else 0.0

    def slowest(self, phase: str) -> tuple[int, int]:
        """(measured, predicted) slowest rank of a phase."""
        def rank_of(ranks):
            return max(ranks, key=lambda r: (getattr(r, f"{phase}_ms"), -r.rank)).rank
        return rank_of(self.measured), rank_of(self.predicted)


def compare_trace(workload: Workload, plan: Plan, ranks: Sequence[MeasuredRank], model: CostModel) -> TraceComparison:
    predicted = tuple(model.breakdown(workload, plan.tables))
    ranks = sorted(ranks, key=lambda r: r.rank)
    measured = []
    for m, p in zip(ranks, predicted):
        measured.append(RankBreakdown(
            rank=m.rank, fwd_compute_ms=m.fwd_compute_ms, bwd_compute_ms=m.bwd_compute_ms,
            fwd_comm_ms=m.fwd_transfer_ms, bwd_comm_ms=m.bwd_transfer_ms,
            total_ms=m.fwd_compute_ms + m.bwd_compute_ms + m.fwd_transfer_ms + m.bwd_transfer_ms,
            hbm_bytes=p.hbm_bytes,
        ))
    waited = tuple((m.fwd_comm_ms, m.bwd_comm_ms) for m in ranks)
    step = max(m.step_ms for m in ranks)
    return TraceComparison(tuple(measured), predicted, waited, step, model.name)


def trace_table(c: TraceComparison) -> str:
    head = f"{'rank':>4}" + "".join(f" {p:>17}" for p in PHASES) + f" {'waited comm':>12}"
    lines = [head, f"{'':>4}" + "".join(f" {'traced':>8} {'model':>8}" for _ in PHASES)]
    for m, p, (wf, wb) in zip(c.measured, c.predicted, c.waited):
        cells = "".join(f" {getattr(m, f'{ph}_ms'):>8.3f} {getattr(p, f'{ph}_ms'):>8.3f}" for ph in PHASES)
        lines.append(f"{m.rank:>4}{cells} {wf + wb:>12.3f}")
    traced, model = Breakdown.of(c.measured), Breakdown.of(c.predicted)
    lines.append(f"traced critical path (each phase's slowest rank summed): {traced.step_ms:.3f} ms"
                 f" (model {model.step_ms:.3f} ms); traced step (median ProfilerStep, slowest rank): {c.step_ms:.3f} ms")
    lines.append("slowest rank per phase, traced / model: " + ", ".join(
        f"{ph} {a}/{b}" for ph in PHASES for a, b in [c.slowest(ph)]))
    lines.append(f"model {c.model}: per-rank lookup error {c.compute_mape:.1%} (MAPE over ranks with lookups)")
    lines.append("comm: each collective as its fastest rank took it (the others waited for a peer; 'waited'"
                 " is a rank's own spans)")
    return "\n".join(lines)


def trace_json(c: TraceComparison) -> dict:
    return {
        "model": c.model,
        "compute_mape": c.compute_mape,
        "step_ms": c.step_ms,
        "critical_path_ms": {"traced": Breakdown.of(c.measured).step_ms, "model": Breakdown.of(c.predicted).step_ms},
        "slowest_rank": {ph: dict(zip(("traced", "model"), c.slowest(ph))) for ph in PHASES},
        "ranks": [
            {"rank": m.rank, **{f"{ph}_ms": {"traced": getattr(m, f"{ph}_ms"), "model": getattr(p, f"{ph}_ms")}
                                for ph in PHASES}, "waited_comm_ms": list(w)}
            for m, p, w in zip(c.measured, c.predicted, c.waited)
        ],
    }


def trace_bars(c: TraceComparison, path: Path) -> None:
    """Per rank, traced beside model, each bar stacked by phase (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    world = len(c.measured)
    x = np.arange(world)
    fig, ax = plt.subplots(figsize=(min(FIGURE_MAX_IN, max(4.0, 0.9 * world + 2)), 3.2))
    colors = ("#4c72b0", "#55a868", "#c44e52", "#8172b2")
    for offset, ranks, label in ((-0.2, c.measured, "traced"), (0.2, c.predicted, "model")):
        bottom = np.zeros(world)
        for ph, color in zip(PHASES, colors):
            values = np.array([getattr(r, f"{ph}_ms") for r in ranks])
            ax.bar(x + offset, values, 0.38, bottom=bottom, color=color, alpha=1.0 if label == "traced" else 0.55,
                   label=f"{ph} ({label})" if label == "traced" or ph == PHASES[0] else None)
            bottom += values
    if world <= RANK_TICKS:  # else matplotlib's own ticks: a label each would overlap
        ax.set_xticks(x, [f"rank {r}" for r in range(world)])
    ax.set_ylabel("ms per step")
    ax.set_title(f"traced (left) and {c.model} (right, pale)")
    ax.legend(fontsize=7, ncols=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
