"""Placement rules in the heuristic searches: which cuts a pin leaves a table, which ranks a piece
may take while the greedy places (``RankGuard``), and which tables local searches leave alone.

CP-SAT honours the rules exactly (``ilp_placement.py``); the greedy honours them as it places, and
where it cannot (a group whose cuts do not match) it says so and CP-SAT starts cold.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from shardopt.arithmetic.placement import PlacementRules
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.placement import Pin
from shardopt.core.workload import Workload
from shardopt.search.explain import Unplaceable


def pinned_cuts(workload: Workload, candidates: dict, costs: dict) -> None:
    """Drop, in place, the cuts a pinned table cannot take on its ranks: pieces fixed to ranks it
    may not use, more pieces than it has ranks, a host-bound cut on no host it may use whole."""
    topo = workload.topology
    local = topo.ranks_per_host
    for name, allowed in PlacementRules.of(workload).allowed.items():
        if name not in candidates:
            continue
        on_host = max(sum(r in allowed for r in range(h * local, (h + 1) * local)) for h in range(topo.num_hosts))
        keep = []
        for i, cand in enumerate(candidates[name]):
            n = len(cand.pieces)
            if cand.placement == "fixed":
                ok = all(r in allowed for r in range(n))
            elif cand.placement == "host":
                ok = on_host >= (local if cand.sharding_type == "table_row_wise" else n)
            else:
                ok = n <= len(allowed)
            if ok:
                keep.append(i)
        if not keep:
            pins = "; ".join(r.describe() for r in workload.placement if isinstance(r, Pin) and name in r.tables)
            raise ShardoptError(
                f"{pins}: no cut of table {name!r} fits on {len(allowed)} rank(s) {sorted(allowed)[:8]} (its"
                f" sharding_types {list(workload.table(name).allowed_sharding_types)}); pin it to more ranks or"
                " allow table_wise", kind=ErrorKind.INFEASIBLE)
        candidates[name] = [candidates[name][i] for i in keep]
        costs[name] = [costs[name][i] for i in keep]


class RankGuard:
    """While the greedy places: the ranks the next piece of a table may take under the rules."""

    def __init__(self, workload: Workload) -> None:
        self.rules = PlacementRules.of(workload)
        self.world = workload.topology.world_size
        self.placed: dict[str, list[int]] = {}

    def open_to(self, name: str) -> np.ndarray:
        mask = np.ones(self.world, dtype=bool)
        allowed = self.rules.allowed.get(name)
        if allowed is not None:
            mask[:] = False
            mask[sorted(allowed)] = True
        for group in self.rules.apart:
            if name in group:
                for other in group:
                    if other != name:
                        mask[self.placed.get(other, [])] = False
        for group in self.rules.colocate:
            partners = [self.placed[o] for o in group if o != name and o in self.placed]
            if name in group and partners:
                only = np.zeros(self.world, dtype=bool)
                only[partners[0]] = True
                mask &= only
        return mask

    def took(self, name: str, rank: int) -> None:
        if name in self.rules.grouped:
            self.placed.setdefault(name, []).append(rank)

    def grouped_last(self, pieces: Sequence[tuple]) -> list[tuple]:
        """``pieces`` (table name first) with each colocated group's later tables moved right
        after the whole of its first table, so they follow ranks already chosen."""
        if not self.rules.colocate:
            return list(pieces)
        present = {item[0] for item in pieces}
        follower = {name: group[0] for group in self.rules.colocate for name in group[1:] if group[0] in present}
        moved: dict[str, list[tuple]] = {}
        out = []
        for item in pieces:
            if item[0] in follower:
                moved.setdefault(follower[item[0]], []).append(item)
            else:
                out.append(item)
        last = {item[0]: i + 1 for i, item in enumerate(out)}
        for leader, items in sorted(moved.items(), key=lambda kv: -last[kv[0]]):
            out[last[leader]:last[leader]] = items
        return out


def same_piece_counts(workload: Workload, candidates: dict, choice: dict) -> None:
    """Colocated tables take cuts with as many pieces as the group's first (the first such cut
    from the one chosen on), or the greedy gives up and CP-SAT decides."""
    for group in PlacementRules.of(workload).colocate:
        n = len(candidates[group[0]][choice[group[0]]].pieces)
        for name in group[1:]:
            cands = candidates[name]
            if len(cands[choice[name]].pieces) == n:
                continue
            # Never below the cut chosen: the greedy escalates cuts one way, so it ends.
            fitting = [i for i, c in enumerate(cands) if len(c.pieces) == n and i >= choice[name]]
            if not fitting:
                raise Unplaceable(name, 0, 0, 0, rule=f"colocation of {', '.join(group)} (no cut with {n} pieces)")
            choice[name] = fitting[0]
