"""Check a plan against its workload: coverage, bounds, ranks, sharding rules, memory and placement rules.

Every violation is collected (not just the first) so a user fixing a hand-edited or foreign plan
sees all of them at once.
"""

from __future__ import annotations

from pathlib import Path

from dataclasses import dataclass, field

import numpy as np

from shardopt.arithmetic.memory import plan_memory
from shardopt.arithmetic.placement import placement_violations
from shardopt.core.plan import Plan, TablePlan
from shardopt.core.units import format_bytes
from shardopt.core.workload import Table, Workload

ROW_CUT = ("row_wise", "table_row_wise")
COL_CUT = ("column_wise", "table_column_wise")
ONE_HOST = ("table_row_wise", "table_column_wise")
UVM_KERNELS = ("fused_uvm", "fused_uvm_caching")


@dataclass
class PlanReport:
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.violations


def check_plan(workload: Workload, plan: Plan, workload_sha256: str | None = None) -> PlanReport:
    report = PlanReport()
    if workload.parallelism is not None or plan.parallelism is not None:
        workload = _group_view(workload, plan, report)
        if not report.valid:
            return report
    topo = workload.topology
    if plan.workload.sha256 and workload_sha256 and plan.workload.sha256 != workload_sha256:
        report.warnings.append(
            "workload.sha256: the plan was made for another version of this workload file"
        )
    if plan.world_size != topo.world_size:
        report.violations.append(
            f"world_size: plan has {plan.world_size}, workload topology has {topo.world_size}"
        )
    report.violations.extend(tables_violations(workload, plan.tables, placement=not report.violations))
    return report


def planned_workload(workload: Workload, plan: Plan) -> Workload:
    """The workload ``plan`` is for: one sharding group's, where the workload is 2D (unchecked:
    :func:`check_plan` says when the two do not belong together)."""
    report = PlanReport()
    view = _group_view(workload, plan, report) if workload.parallelism is not None else workload
    return view if report.valid else workload


def _group_view(workload: Workload, plan: Plan, report: PlanReport) -> Workload:
    """A 2D workload as the one group its plan is for; what does not match goes in ``report``."""
    from shardopt.arithmetic.groups import group_workload, layout_of

    par, block = workload.parallelism, plan.parallelism
    if par is None:
        report.violations.append("parallelism: the plan is for one sharding group of a 2D world;"
                                 " the workload declares no parallelism block")
        return workload
    if block is None:
        report.violations.append("parallelism: the workload is 2D (parallelism block); the plan is not a group plan")
        return workload
    if block.world_size != workload.topology.world_size:
        report.violations.append(f"parallelism.world_size: plan has {block.world_size},"
                                 f" workload topology has {workload.topology.world_size}")
    if not par.auto and block.sharding_group_size != par.sharding_group_size:
        report.violations.append(f"parallelism.sharding_group_size: plan has {block.sharding_group_size},"
                                 f" workload has {par.sharding_group_size}")
    for name in ("sync_every", "strategy", "inter_host_allreduce"):
        if getattr(block, name) != getattr(par, name):
            report.violations.append(f"parallelism.{name}: plan has {getattr(block, name)!r},"
                                     f" workload has {getattr(par, name)!r}")
    try:
        layout_of(workload, block.sharding_group_size)
    except ValueError as exc:
        report.violations.append(f"parallelism.sharding_group_size: {exc}")
    if not report.valid:
        return workload
    return group_workload(workload, block.sharding_group_size)


def tables_violations(workload: Workload, planned, placement: bool = True) -> list[str]:
    """What ``check_plan`` finds in a plan's tables: coverage, bounds, ranks, rules, memory and
    (with ``placement``, where nothing else is wrong) the placement rules."""
    out: list[str] = []
    tables = {t.name: t for t in workload.tables}
    seen: dict[str, int] = {}
    for i, table_plan in enumerate(planned):
        where = f"tables[{i}]"
        if table_plan.name not in tables:
            out.append(f"{where}.name: no table {table_plan.name!r} in the workload")
            continue
        if table_plan.name in seen:
            out.append(f"{where}.name: table {table_plan.name!r} planned twice (also tables[{seen[table_plan.name]}])")
            continue
        seen[table_plan.name] = i
        out.extend(_table_violations(workload, tables[table_plan.name], table_plan, where))
    for name in tables:
        if name not in seen:
            out.append(f"tables: workload table {name!r} is missing from the plan")
    out.extend(_memory_violations(workload, planned))
    if placement and not out:
        out.extend(placement_violations(workload, planned))
    return out


def _table_violations(workload: Workload, table: Table, tp: TablePlan, where: str) -> list[str]:
    topo = workload.topology
    out: list[str] = []
    rows, cols = table.num_embeddings, table.embedding_dim
    kind = tp.sharding_type
    if kind not in table.allowed_sharding_types:
        out.append(
            f"{where}.sharding_type: {kind} is not in the table's sharding_types"
            f" {list(table.allowed_sharding_types)}"
        )
    if tp.compute_kernel in UVM_KERNELS and topo.compute_device == "cpu":
        out.append(f"{where}.compute_kernel: {tp.compute_kernel} needs a cuda compute_device")
    if table.compute_kernels is not None and tp.compute_kernel not in table.compute_kernels:
        out.append(f"{where}.compute_kernel: {tp.compute_kernel} is not in the table's"
                   f" compute_kernels {list(table.compute_kernels)}")
    if tp.cache_load_factor is not None and tp.compute_kernel != "fused_uvm_caching":
        out.append(f"{where}.cache_load_factor: only a fused_uvm_caching table has a cache,"
                   f" this one is {tp.compute_kernel}")
    hot = tp.replicated_rows or 0
    if hot:
        if kind != "row_wise":
            out.append(f"{where}.replicated_rows: hot rows are replicated beside a row_wise cut,"
                       f" not {kind}")
        if "data_parallel" not in table.allowed_sharding_types:
            out.append(f"{where}.replicated_rows: replicating hot rows needs data_parallel in the"
                       f" table's sharding_types {list(table.allowed_sharding_types)}")
        if hot >= rows:
            out.append(f"{where}.replicated_rows: {hot} is not below the table's {rows} rows")
            return out
    in_bounds = []
    for j, shard in enumerate(tp.shards):
        at = f"{where}.shards[{j}]"
        if shard.rank >= topo.world_size:
            out.append(f"{at}.rank: {shard.rank} is not below world_size {topo.world_size}")
        (r0, c0), (nr, nc) = shard.offsets, shard.sizes
        if r0 + nr > rows or c0 + nc > cols:
            out.append(
                f"{at}: rows [{r0}, {r0 + nr}) x cols [{c0}, {c0 + nc}) leave the table's"
                f" {rows} x {cols}"
            )
            continue
        in_bounds.append(shard)
        full_rows, full_cols = (r0, nr) == (0, rows), (c0, nc) == (0, cols)
        if kind in ("table_wise", "data_parallel") and not (full_rows and full_cols):
            out.append(f"{at}.sizes: a {kind} shard holds the whole table {rows} x {cols}")
        elif hot and r0 < hot:
            out.append(f"{at}.offsets: rows below {hot} are the replicated hot rows, not a shard's")
        elif kind in ROW_CUT and not full_cols:
            out.append(f"{at}.sizes: a {kind} shard holds all {cols} columns")
        elif kind in COL_CUT and not full_rows:
            out.append(f"{at}.sizes: a {kind} shard holds all {rows} rows")
    if kind == "table_wise" and len(tp.shards) != 1:
        out.append(f"{where}.shards: a table_wise table has one shard, got {len(tp.shards)}")
    if kind in ONE_HOST and len({topo.host_of(s.rank) for s in tp.shards}) > 1:
        out.append(f"{where}.shards: {kind} keeps all shards on one host")
    if kind == "data_parallel":
        ranks = [s.rank for s in tp.shards]
        if len(set(ranks)) != len(ranks):
            out.append(f"{where}.shards: a data_parallel table lists a rank twice")
    elif len(in_bounds) == len(tp.shards):
        out.extend(_coverage_violations(tp, rows, cols, where, first_row=hot))
    return out


def layout_problems(plan: Plan) -> list[str]:
    """What makes ``plan`` unusable as the old side of a re-shard, read without its workload: a
    table listed twice, a rank outside its world, or pieces of a table that leave holes in its
    extent or overlap."""
    problems, seen = [], {}
    for i, tp in enumerate(plan.tables):
        where = f"tables[{i}] ({tp.name})"
        if tp.name in seen:
            problems.append(f"{where}: table {tp.name!r} is listed twice (also tables[{seen[tp.name]}])")
        seen.setdefault(tp.name, i)
        ranks = [s.rank for s in tp.shards]
        if max(ranks) >= plan.world_size:
            problems.append(f"{where}: rank {max(ranks)} is outside its world of {plan.world_size}")
        if tp.sharding_type != "data_parallel" and not tp.replicated_rows:
            rows = max(s.offsets[0] + s.sizes[0] for s in tp.shards)
            cols = max(s.offsets[1] + s.sizes[1] for s in tp.shards)
            problems.extend(_coverage_violations(tp, rows, cols, where))
    return problems


def _coverage_violations(
    tp: TablePlan, rows: int, cols: int, where: str, first_row: int = 0
) -> list[str]:
    """Each cell covered exactly once, checked on the grid the shard edges cut the table into.

    Rows below ``first_row`` (replicated hot rows) are held by every rank, not by the shards.
    """
    row_edges = np.unique([first_row, rows] + [s.offsets[0] + d for s in tp.shards for d in (0, s.sizes[0])])
    row_edges = row_edges[row_edges >= first_row]
    col_edges = np.unique([0, cols] + [s.offsets[1] + d for s in tp.shards for d in (0, s.sizes[1])])
    counts = np.zeros((len(row_edges) - 1, len(col_edges) - 1), dtype=np.int64)
    for s in tp.shards:
        r = np.searchsorted(row_edges, [s.offsets[0], s.offsets[0] + s.sizes[0]])
        c = np.searchsorted(col_edges, [s.offsets[1], s.offsets[1] + s.sizes[1]])
        counts[r[0] : r[1], c[0] : c[1]] += 1
    out = []
    for label, mask in (("not covered", counts == 0), ("covered more than once", counts > 1)):
        if mask.any():
            i, j = np.argwhere(mask)[0]
            out.append(
                f"{where}.shards: rows [{row_edges[i]}, {row_edges[i + 1]}) x cols"
                f" [{col_edges[j]}, {col_edges[j + 1]}) {label}"
            )
    return out


def _memory_violations(workload: Workload, planned) -> list[str]:
    topo = workload.topology
    hbm, ddr = plan_memory(workload, planned)
    out = []
    for rank in sorted(hbm):
        cap = topo.rank_caps[rank] if rank < topo.world_size else topo.hbm_cap
        if hbm[rank] > cap:
            what = "hbm_cap" if cap == topo.hbm_cap else "its HBM for shards (topology.ranks)"
            out.append(f"memory: rank {rank} holds {format_bytes(hbm[rank])}, over {what} {format_bytes(cap)}")
    for host in sorted(ddr):
        if ddr[host] and (topo.ddr_cap is None or ddr[host] > topo.ddr_cap):
            cap = format_bytes(topo.ddr_cap) if topo.ddr_cap else "none declared"
            out.append(f"memory: host {host} needs {format_bytes(ddr[host])} of ddr for UVM, ddr_cap {cap}")
    return out


def read_checked(workload_path: str | Path, plan_path: str | Path) -> tuple[Workload, str, Plan]:
    """A workload and a plan read together, the plan checked against it: what replay, evaluate
    and report need (a plan that does not fit is an input error naming both files). The workload
    returned is the one the plan is for: its sharding group's, where the workload is 2D."""
    from shardopt.core.errors import ShardoptError
    from shardopt.core.plan import read_plan
    from shardopt.core.workload import read_workload

    workload, sha = read_workload(workload_path)
    plan = read_plan(plan_path)
    report = check_plan(workload, plan, sha)
    if not report.valid:
        raise ShardoptError(f"{plan_path}: does not fit {workload_path}: {report.violations[0]}")
    return planned_workload(workload, plan), sha, plan
