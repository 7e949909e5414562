"""The benchmark report people read: a Markdown table per task and planner, aggregates against
TorchRec, and PNG plots (per-rank stacked cost bars, the distribution of ratios to TorchRec)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Sequence

from shardopt.bench.suite import Entry
from shardopt.core.files import FIGURE_MAX_IN, RANK_TICKS, write_atomic, write_figure
from shardopt.core.plan import RankBreakdown

PARTS = (("fwd_compute_ms", "forward compute"), ("bwd_compute_ms", "backward compute"),
         ("fwd_comm_ms", "forward comm"), ("bwd_comm_ms", "backward comm"))


# Past this many ranks a bar each would be a hair wide: the parts are drawn as stacked steps.
STEPS_FROM = 256


def draw_rank_bars(ax, per_rank: Sequence[RankBreakdown], title: str) -> None:
    """Stacked per-rank bars of one plan's cost parts, the bottleneck marked."""
    bottom = [0.0] * len(per_rank)
    ranks = [r.rank for r in per_rank]
    for attr, label in PARTS:
        values = [getattr(r, attr) for r in per_rank]
        top = [b + v for b, v in zip(bottom, values)]
        if len(per_rank) >= STEPS_FROM:
            ax.stairs(top, [ranks[0] - 0.5, *(r + 0.5 for r in ranks)], baseline=bottom, fill=True, label=label)
        else:
            ax.bar(ranks, values, bottom=bottom, label=label)
        bottom = top
    worst = max(range(len(per_rank)), key=lambda i: (bottom[i], -i))
    ax.annotate("bottleneck", (ranks[worst], bottom[worst]), ha="center", va="bottom", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("rank")
    ax.set_ylabel("ms per iteration")
    if len(per_rank) <= RANK_TICKS:
        ax.set_xticks(ranks)


def plan_bars_png(per_rank: Sequence[RankBreakdown], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(min(FIGURE_MAX_IN, max(4, 0.6 * len(per_rank) + 2)), 3.5))
    draw_rank_bars(ax, per_rank, title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    write_figure(fig, path)
    plt.close(fig)


def _ratios(entries: list[Entry], metric: str) -> dict[str, list[float]]:
    by_task = {}
    for e in entries:
        by_task.setdefault(e.task, {})[e.planner] = e
    out: dict[str, list[float]] = {}
    for planners in by_task.values():
        ref = planners.get("torchrec")
        base = getattr(ref, metric) if ref and ref.valid else None
        if not base:
            continue
        for name, e in planners.items():
            value = getattr(e, metric) if e.valid else None
            if value is not None and name != "torchrec":
                out.setdefault(name, []).append(value / base)
    return out


def aggregates(entries: list[Entry], metric: str = "replayed_step_ms") -> list[tuple[str, int, float, float, float]]:
    """(planner, tasks, mean ratio to TorchRec, geometric mean, win rate) per planner."""
    rows = []
    for name, ratios in _ratios(entries, metric).items():
        geo = math.exp(statistics.fmean(math.log(r) for r in ratios))
        rows.append((name, len(ratios), statistics.fmean(ratios), geo, sum(r < 1 for r in ratios) / len(ratios)))
    return sorted(rows, key=lambda r: r[2])


IMBALANCE_OK = 1.10  # measured bottleneck over the mean rank that counts as balanced


def imbalance_lines(entries: list[Entry]) -> list[str]:
    """Measured imbalance (bottleneck rank / mean rank) per planner: median, worst, share balanced."""
    lines = ["## Measured imbalance (replayed bottleneck rank / mean rank)", "",
             f"| planner | tasks | median | worst | within {IMBALANCE_OK:.2f} |", "|---|---|---|---|---|"]
    by_planner: dict[str, list[float]] = {}
    for e in entries:
        if e.valid and e.replayed_imbalance is not None:
            by_planner.setdefault(e.planner, []).append(e.replayed_imbalance)
    for name, values in sorted(by_planner.items(), key=lambda kv: statistics.median(kv[1])):
        ok = sum(v <= IMBALANCE_OK for v in values) / len(values)
        lines.append(f"| {name} | {len(values)} | {statistics.median(values):.3f} | {max(values):.3f} | {ok:.0%} |")
    return lines + [""]


def write_report(entries: list[Entry], plans: dict, tasks, out_dir: Path, command: str) -> Path:
    """Markdown report plus PNGs into ``out_dir``; returns the report's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    replayed = any(e.replayed_ms is not None for e in entries)
    metric = "replayed_step_ms" if replayed else "predicted_step_ms"
    how = "replayed (measured)" if replayed else "predicted"
    lines = ["# Plan-quality benchmark", "", f"Command: `{command}`", ""]
    lines += [f"Tasks: {len(tasks)} ({', '.join(sorted({t.source.split(',')[0] for t in tasks})[:3])} ...);"
              f" planners: {', '.join(sorted({e.planner for e in entries}))}. Ratios are to TorchRec's plan"
              f" on the same task, {how}; tasks where TorchRec found no plan are left out of the ratios.",
              "", "The step time is the critical path of a synchronous step: every all-to-all waits for its"
              " slowest rank, so a step takes each phase's slowest rank (forward lookups, forward all-to-all,"
              " backward lookups, backward all-to-all), summed. The bottleneck is the slowest rank's total,"
              " which a plan can lower by trading one rank's lookups against another's traffic without"
              " the step getting any faster.", ""]
    for title, field in (("step time (critical path)", metric),
                         ("bottleneck rank", "replayed_ms" if replayed else "predicted_ms")):
        lines += [f"## Aggregates: {title}", "",
                  "| planner | tasks | mean ratio to TorchRec | geometric mean | win rate |", "|---|---|---|---|---|"]
        for name, n, mean, geo, win in aggregates(entries, field):
            lines.append(f"| {name} | {n} | {mean:.3f} | {geo:.3f} | {win:.0%} |")
        lines.append("")
    if replayed:
        lines += imbalance_lines(entries)
    ratios = _ratios(entries, metric)
    if ratios:
        lines += ["", "![ratio to TorchRec](ratios.png)", ""]
        _ratio_plot(ratios, metric, out_dir / "ratios.png")
    else:
        lines += ["", "(No TorchRec plans in this run: no ratios.)", ""]
    # Per-rank bars of one task for every planner (the first task every planner planned).
    shown = next((t for t in tasks if all((t.name, e.planner) in plans for e in entries if e.task == t.name)), None)
    if shown is not None:
        planners = [e.planner for e in entries if e.task == shown.name and (shown.name, e.planner) in plans]
        cols = min(4, len(planners))
        rows = math.ceil(len(planners) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False, sharey=True)
        for ax, name in zip(axes.flat, planners):
            per_rank = plans.get((shown.name, name, "replayed"))
            label = "replayed"
            if per_rank is None:
                per_rank, label = plans[shown.name, name].predicted.per_rank, "predicted"
            draw_rank_bars(ax, per_rank, f"{name} ({label})")
        for ax in list(axes.flat)[len(planners):]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=6)
        fig.tight_layout()
        write_figure(fig, out_dir / "rank_bars.png")
        plt.close(fig)
        lines += [f"## Per-rank cost of every planner on {shown.name}", "", "![per-rank bars](rank_bars.png)", ""]
    lines += ["## Every task", "",
              "| task | planner | valid | replayed step ms | predicted step ms | replayed bottleneck ms"
              " | predicted bottleneck ms | bound ms | gap | measured imbalance | headroom | plan s | note |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x, p=3: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
    for e in entries:
        lines.append(
            f"| {e.task} | {e.planner} | {'yes' if e.valid else 'no'} | {fmt(e.replayed_step_ms)}"
            f" | {fmt(e.predicted_step_ms)} | {fmt(e.replayed_ms)} | {fmt(e.predicted_ms)}"
            f" | {fmt(e.lower_bound_ms)} | {'-' if e.gap is None else f'{e.gap:.1%}'} | {fmt(e.replayed_imbalance)} |"
            f" {'-' if e.headroom is None else f'{e.headroom:.0%}'} | {e.plan_s:.1f} | {e.note} |"
        )
    path = out_dir / "report.md"
    write_atomic(path, "\n".join(lines) + "\n")
    return path


def _ratio_plot(ratios: dict[str, list[float]], metric: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    names = sorted(ratios, key=lambda n: statistics.median(ratios[n]))
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.boxplot([ratios[n] for n in names], showfliers=True)
    ax.set_xticks(range(1, len(names) + 1), names, rotation=30, ha="right", fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(f"{'replayed' if metric.startswith('replayed') else 'predicted'} step / TorchRec's")
    fig.tight_layout()
    write_figure(fig, path)
    plt.close(fig)
