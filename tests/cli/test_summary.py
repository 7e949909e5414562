"""What `plan` shows on a terminal: every rank of a small world, the ranks that matter of a large
one, and while a plan is made, the stage it is in."""

from __future__ import annotations

import io
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CONFIGS
from shardopt.cli.app import stage_status
from shardopt.contracts import PlanConfig
from shardopt.core.plan import RankBreakdown
from shardopt.core.workload import read_workload, workload_from_dict
from shardopt.planner import plan_with
from shardopt.planner.summary import SUMMARY_RANKS, _scale, breakdown_table


def _workload(world: int):
    return workload_from_dict({
        "version": 1, "name": "w", "batch_size": 64,
        "topology": {"world_size": world, "compute_device": "cuda", "hardware": "h200", "hbm_cap": "80GB",
                     "local_world_size": 1},
        "tables": [{"name": "t", "num_embeddings": 1000, "embedding_dim": 16, "pooling_factor": 2.0}],
    })


def _ranks(totals, memory):
    # phases in unlike shares, so each phase's slowest rank is not the costliest's
    return [RankBreakdown(rank=r, fwd_compute_ms=t * (r % 3) / 4, bwd_compute_ms=t * (2 - r % 3) / 4,
                          fwd_comm_ms=t * (r % 2) / 2, bwd_comm_ms=t * (1 - r % 2) / 2, total_ms=t, hbm_bytes=m)
            for r, (t, m) in enumerate(zip(totals, memory))]


def _shown(table: str) -> list[int]:
    return [int(line.split()[0]) for line in table.splitlines()[1:] if line.split()[0].isdigit()]


def test_a_small_world_shows_every_rank():
    per_rank = _ranks([1.0 + r for r in range(8)], [10**9] * 8)
    table = breakdown_table(_workload(8), per_rank, most=SUMMARY_RANKS)
    assert _shown(table) == list(range(8))
    assert "ranks shown" not in table


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.0, 100.0), min_size=SUMMARY_RANKS + 1, max_size=300), st.data())
def test_a_large_world_shows_its_costliest_fullest_and_least_loaded_ranks(totals, data):
    world = len(totals)
    memory = data.draw(st.lists(st.integers(0, 70 * 10**9), min_size=world, max_size=world))
    per_rank = _ranks(totals, memory)
    bottleneck = max(per_rank, key=lambda r: (r.total_ms, -r.rank)).rank
    table = breakdown_table(_workload(world), per_rank, most=SUMMARY_RANKS)
    shown = _shown(table)
    assert len(shown) <= SUMMARY_RANKS and shown == sorted(shown)
    assert bottleneck in shown and f"{bottleneck:>4} " in next(l for l in table.splitlines() if "<- bottleneck" in l)
    assert max(range(world), key=lambda r: (memory[r], -r)) in shown
    assert min(totals) in [totals[r] for r in shown]
    for phase in ("fwd_compute_ms", "bwd_compute_ms", "fwd_comm_ms", "bwd_comm_ms"):  # the critical path's ranks
        assert max(getattr(r, phase) for r in per_rank) in [getattr(per_rank[r], phase) for r in shown]
    # no rank left out costs more than the costliest shown beyond the few kept for another reason
    left_out = set(range(world)) - set(shown)
    assert all(totals[r] <= sorted(totals, reverse=True)[SUMMARY_RANKS - 8] for r in left_out)
    assert f"{len(shown)} of {world} ranks shown" in table and f"max {max(totals):.3f}" in table


@pytest.mark.parametrize("value, text", [(1 / 3, "1/3"), (0.333333, "1/3"), (3.0, "3"), (0.5, "1/2"), (0.3, "0.3")])
def test_a_scale_reads_as_a_fraction_also_from_the_plan_files_six_digits(value, text):
    assert _scale(value) == text


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_the_stage_a_plan_is_in_and_nothing_is_left_of_it():
    workload, _ = read_workload(CONFIGS / "tiny.yaml")
    terminal, log = _Terminal(), logging.getLogger("shardopt.search")
    level, disabled = log.level, logging.root.manager.disable
    logging.disable(logging.NOTSET)  # as in a fresh `shardopt plan` (other commands run in-process disable it)
    try:
        with stage_status(terminal, every_s=0.01):
            plan_with(workload, PlanConfig(robust="on"))
    finally:
        logging.disable(disabled)
    shown = terminal.getvalue()
    for stage in ("the nominal plan", "the greedy warm start", "CP-SAT on", "the plan's breakdown"):
        assert stage in shown, shown
    assert shown.endswith("\r\x1b[K") and "\n" not in shown  # redrawn in place, wiped at the end
    assert log.level == level and not any(type(h).__name__ == "Stage" for h in log.handlers)


def test_a_pipe_or_a_log_file_sees_nothing_of_it():
    workload, _ = read_workload(CONFIGS / "tiny.yaml")
    piped = io.StringIO()
    with stage_status(piped, every_s=0.01):
        plan_with(workload, PlanConfig())
    assert piped.getvalue() == ""


@pytest.mark.parametrize("world, bars", [(8, True), (64, True), (4096, False)])
def test_a_plans_figure_stays_a_figure_at_any_world(world, bars, tmp_path):
    """A bar a rank up to 255 ranks, each part one stacked step past it; never wider than
    FIGURE_MAX_IN (4096 ranks drew a PNG 270556 pixels wide in 28 s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    from shardopt.bench.report import draw_rank_bars, plan_bars_png
    from shardopt.core.files import FIGURE_MAX_IN

    per_rank = _ranks([1.0 + (r % 7) for r in range(world)], [10**9] * world)
    fig, ax = plt.subplots()
    draw_rank_bars(ax, per_rank, "t")
    assert len(ax.patches) == (4 * world if bars else 4)
    plt.close(fig)
    plan_bars_png(per_rank, "t", tmp_path / "bars.png")
    width, height = Image.open(tmp_path / "bars.png").size
    assert width <= FIGURE_MAX_IN * 110 and height < width
