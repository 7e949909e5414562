"""How a replay is shown: measured beside predicted per rank, as text or JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Sequence

from shardopt.core.plan import RankBreakdown
from shardopt.measure.replay import ReplayResult
from shardopt.contracts import Breakdown
from shardopt.core.workload import Workload


def replay_table(
    workload: Workload, result: ReplayResult, model: str, predicted: Sequence[RankBreakdown]
) -> str:
    lines = [
        f"{'rank':>4} {'fwd_comp':>9} {'bwd_comp':>9} {'fwd_comm':>9} {'bwd_comm':>9}"
        f" {'measured':>9} {'spread':>7} {'predicted':>9} {'ratio':>6}"
    ]
    for r, pred in zip(result.ranks, predicted):
        m = r.measured
        ratio = m.total_ms / pred.total_ms if pred.total_ms else float("nan")
        lines.append(
            f"{m.rank:>4} {m.fwd_compute_ms:>9.3f} {m.bwd_compute_ms:>9.3f} {m.fwd_comm_ms:>9.3f}"
            f" {m.bwd_comm_ms:>9.3f} {m.total_ms:>9.3f} {r.fwd_spread_ms + r.bwd_spread_ms:>7.3f}"
            f" {pred.total_ms:>9.3f} {ratio:>6.2f}"
        )
    b = result.bottleneck
    p = max(predicted, key=lambda r: (r.total_ms, -r.rank))
    lines.append(
        f"replayed bottleneck: rank {b.rank} at {b.total_ms:.3f} ms"
        f" (predicted by {model}: rank {p.rank} at {p.total_ms:.3f} ms)"
    )
    lines.append(
        f"replayed step (critical path, each phase's slowest rank summed):"
        f" {Breakdown.of(result.per_rank).step_ms:.3f} ms (predicted {Breakdown.of(predicted).step_ms:.3f} ms)"
    )
    lines.append(
        f"compute: {result.backend} kernels on this machine's {result.device}, medians;"
        f" spread = p75 - p25; communication: {result.comm_source}"
    )
    lines.extend(f"note: {n}" for n in result.notes)
    return "\n".join(lines)


def replay_json(result: ReplayResult, model: str, predicted: Sequence[RankBreakdown]) -> str:
    b = result.bottleneck
    data = {
        "backend": result.backend,
        "device": result.device,
        "comm_source": result.comm_source,
        "bottleneck": {"rank": b.rank, "total_ms": b.total_ms},
        "step_ms": Breakdown.of(result.per_rank).step_ms,  # the critical path of a synchronous step
        "measured": [
            {**dataclasses.asdict(r.measured), "fwd_spread_ms": r.fwd_spread_ms,
             "bwd_spread_ms": r.bwd_spread_ms}
            for r in result.ranks
        ],
        "predicted": {"cost_model": model, "per_rank": [dataclasses.asdict(r) for r in predicted]},
        "notes": list(result.notes),
    }
    return json.dumps(data, indent=1)
