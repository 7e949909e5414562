"""How far a workload's statistics moved since a plan was made: the data changed, re-plan.

A table has drifted when its pooling factor changed by more than the tolerance (relative), or the
share of lookups its hottest 1% of rows draw moved by more than the tolerance (absolute: 0.1 is
10 points). Tables in one workload only are reported too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from shardopt.arithmetic.access import row_buckets
from shardopt.core.workload import Table, Workload

HOT_SHARE = 0.01  # the skew compared: the hottest 1% of a table's rows


@dataclass(frozen=True)
class TableDrift:
    name: str
    pooling: tuple[Optional[float], Optional[float]]  # old, new
    hot_share: tuple[Optional[float], Optional[float]]  # old, new: lookups on the hottest 1% of rows
    drifted: bool
    why: str


def hot_share(table: Table) -> float:
    """The share of lookups the hottest ``HOT_SHARE`` of the table's rows draw, under its access."""
    return row_buckets(table).top_share(HOT_SHARE * table.num_embeddings)


def drift(old: Workload, new: Workload, tolerance: float) -> list[TableDrift]:
    """Every table of either workload, old first then those only in the new one."""
    out = []
    for table in old.tables:
        now = new.tables_by_name.get(table.name)
        if now is None:
            out.append(TableDrift(table.name, (table.pooling_factor, None), (hot_share(table), None), True,
                                  "no longer in the workload"))
            continue
        pooling = (table.pooling_factor, now.pooling_factor)
        share = (hot_share(table), hot_share(now))
        reasons = []
        if abs(pooling[1] / pooling[0] - 1) > tolerance:
            reasons.append(f"pooling {pooling[0]:.3g} -> {pooling[1]:.3g} ({pooling[1] / pooling[0] - 1:+.0%})")
        if abs(share[1] - share[0]) > tolerance:
            reasons.append(f"hottest 1% of rows {share[0]:.0%} -> {share[1]:.0%} of lookups")
        out.append(TableDrift(table.name, pooling, share, bool(reasons), "; ".join(reasons)))
    for table in new.tables:
        if table.name not in old.tables_by_name:
            out.append(TableDrift(table.name, (None, table.pooling_factor), (None, hot_share(table)), True,
                                  "new in the workload"))
    return out


def drift_table(rows: list[TableDrift], tolerance: float) -> str:
    moved = [r for r in rows if r.drifted]
    lines = [f"{len(moved)} of {len(rows)} tables drifted beyond {tolerance:.0%}" + (":" if moved else "")]
    for r in moved:
        lines.append(f"  {r.name}: {r.why}")
    return "\n".join(lines)
