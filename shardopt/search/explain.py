"""What the greedy could not place, said with numbers and fixes (the smallest conflicting set of
requirements, found with CP-SAT, is ``conflict.py``'s)."""

from __future__ import annotations

from dataclasses import dataclass

from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.units import format_bytes


@dataclass(frozen=True)
class Unplaceable(Exception):
    table: str
    piece_bytes: int
    rank: int  # the tightest place it was refused: the rank with the most room left
    free_bytes: int
    rule: str = ""  # a placement rule left it no rank, not memory


def greedy_failure(workload, costs, failure: Unplaceable) -> ShardoptError:
    """An error that says what did not fit and what would make it fit, with the real numbers."""
    topo = workload.topology
    if failure.rule:
        return ShardoptError(f"the greedy search could not place table {failure.table!r} under the {failure.rule}",
                             kind=ErrorKind.INFEASIBLE)
    need = sum(min(sum(p.hbm_bytes for p in pieces) for pieces in per) for per in costs.values())
    cap = topo.hbm_cap
    ranks_needed = -(-need // cap)
    biggest = max(
        (min(max(p.hbm_bytes for p in pieces) for pieces in per), name) for name, per in costs.items()
    )
    fixes = [f"raise topology.hbm_cap to at least {format_bytes(max(biggest[0], -(-need // topo.world_size)))}"]
    if ranks_needed > topo.world_size:
        fixes.append(f"use at least {ranks_needed} ranks")
    # Row-wise cuts shrink a table's pieces most; where it is allowed and still does not fit (or
    # the device's TorchRec runs no row-wise: a CPU), naming it would send the user nowhere.
    if "row_wise" not in workload.table(biggest[1]).allowed_sharding_types:
        fixes.append(f"allow row_wise for table {biggest[1]!r}")
    fixes.append("use a smaller data_type for the largest tables")
    # Only a cluster too small in total proves that no plan exists; otherwise say what was searched.
    cluster = sum(topo.rank_caps)
    verdict = "no plan fits in memory" if need > cluster else (
        "the greedy search found no plan that fits in memory"
    )
    return ShardoptError(
        f"{verdict}: table {failure.table!r} has a shard of"
        f" {format_bytes(failure.piece_bytes)} that fits on no rank (the roomiest, rank"
        f" {failure.rank} on host {topo.host_of(failure.rank)}, has {format_bytes(failure.free_bytes)}"
        f" left); the tables need at least"
        f" {format_bytes(need)} against {format_bytes(cluster)} in the cluster"
        f" ({topo.world_size} ranks x hbm_cap {format_bytes(cap)}{'' if topo.uniform else ', less reserved'})."
        " Possible fixes: "
        + "; ".join(fixes),
        kind=ErrorKind.INFEASIBLE,
    )
