"""Cuts with a piece on every rank (row-wise over the world, a replica): their pieces stack.

A free or host-bound piece heavier than a balanced rank's share sets one rank's load; the heaviest
of them sets the step. A fixed cut's piece lands on every rank, the slowest included, and a second
such cut lands there too: their excesses over the tables' shares add up. Judged one table at a
time, a replica whose all-reduce is lighter than its table's 8-way cut looks the better choice; at
16384 ranks 46 such replicas put 1.2 s on every rank where the cuts' heaviest piece was 0.17 s.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from shardopt.contracts import rank_phases
from shardopt.core.plan import TablePlan
from shardopt.search.pricing import pieces_max

FIT_SLACK = 0.01  # of a table's share: a row-wise cut's pieces differ by a row, its mean is its share


def forced_ms(peak, target, fixed: bool, own):
    """The load a cut forces on some rank of a balanced plan: a free or host-bound piece sets its
    rank's where it outweighs the target; a fixed cut's piece (row-wise over every rank, a
    replica) comes on top of the load of ranks that hold their share of everything else (``own``:
    the table's share of the target). At 4096 ranks, a row-wise piece sends the whole table's
    partial sums and a replica all-reduces the whole table, on every rank: taken for their small
    pieces, two such tables set 80 ms where 8-way cuts within a host give 50."""
    return peak + target - own * (1 + FIT_SLACK) if fixed else np.maximum(peak, target)


def phase_share(pieces: Sequence, world: int) -> np.ndarray:
    """A cut's milliseconds per phase over ``world`` ranks (pieces of one shape share an object)."""
    counts = Counter(map(id, pieces))
    return sum(counts[id(p)] * np.array(rank_phases(p)) for p in {id(p): p for p in pieces}.values()) / world


def unstacked(choice: dict[str, int], candidates: dict, costs: dict, target, shares: dict) -> dict[str, int]:
    """``choice`` with the fixed cuts whose excesses, added up, outweigh what their tables' other
    cuts would add to the heaviest piece: each such table takes its lightest other cut.

    The step is about max(balanced load, heaviest other piece) plus the sum of the fixed pieces'
    excesses over their shares; the threshold on the heaviest piece that minimises it is found
    exactly (the tables sorted by their lightest other piece). Fixed cuts within their share
    (a row-wise cut of a table whose lookups dwarf its traffic) stay.
    """
    level = float(np.sum(target))
    if not np.isfinite(level):
        return choice
    heaviest, movable = level, []
    for name, i in choice.items():
        cands = candidates[name]
        if cands[i].placement != "fixed":
            heaviest = max(heaviest, pieces_max(costs[name][i]))
            continue
        excess = pieces_max(costs[name][i]) - shares[name][1] * (1 + FIT_SLACK)
        others = [j for j, c in enumerate(cands) if c.placement != "fixed"]
        if excess <= 0 or not others:
            continue
        peaks = {j: pieces_max(costs[name][j]) for j in others}
        best = min(others, key=lambda j: (max(peaks[j], level), j))
        movable.append((peaks[best], excess, name, best))
    if not movable:
        return choice
    movable.sort(key=lambda m: (m[0], m[2]))
    # Threshold t: tables whose other piece is at most t take it; the rest keep their fixed cut.
    kept = sum(m[1] for m in movable)
    best_cost, best_k = heaviest + kept, 0
    for k, (peak, excess, _, _) in enumerate(movable, start=1):
        kept -= excess
        cost = max(heaviest, peak) + kept
        if cost <= best_cost:  # a tie goes to fewer pieces on every rank
            best_cost, best_k = cost, k
    out = dict(choice)
    for _, _, name, j in movable[:best_k]:
        out[name] = j
    return out


def fixed_barred(candidates, costs, plan: Sequence[TablePlan]):
    """(candidates, costs) without the fixed cuts ``plan`` took where a table has other cuts;
    None where it took none."""
    taken = {tp.name: (tp.sharding_type, len(tp.shards), tp.compute_kernel, tp.replicated_rows) for tp in plan}
    kept_c, kept_k, barred = dict(candidates), dict(costs), False
    for name, cands in candidates.items():
        fixed = [c.placement == "fixed" and taken.get(name) == (c.sharding_type, len(c.pieces), c.compute_kernel,
                                                                c.replicated_rows) for c in cands]
        if any(fixed) and not all(c.placement == "fixed" for c in cands):
            kept_c[name] = [c for c, f in zip(cands, fixed) if not f]
            kept_k[name] = [k for k, f in zip(costs[name], fixed) if not f]
            barred = True
    return (kept_c, kept_k) if barred else None
