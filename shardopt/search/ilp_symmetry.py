"""Symmetry of the CP-SAT model: ranks that are interchangeable (same host, same pinned load,
same cap and speed) are ordered, so the solver sees one of each set of relabelled plans; a hint is relabelled
to meet the order."""

from __future__ import annotations

from dataclasses import replace

from shardopt.core.plan import TablePlan
from shardopt.core.workload import Workload
from shardopt.search.repair import movable


def break_symmetry(model, workload: Workload, costs, pinned) -> None:
    """Among interchangeable ranks, the k-th table's first piece uses only the first k+1."""
    topo = workload.topology
    local = topo.ranks_per_host
    classes: dict[tuple, list[int]] = {}
    for rank in range(topo.world_size):
        signature = (rank // local, topo.rank_caps[rank], topo.rank_speeds[rank], tuple(sorted(pinned[rank], key=repr)))
        classes.setdefault(signature, []).append(rank)
    model.classes = [ranks for ranks in classes.values() if len(ranks) > 1]
    model.order = _table_order(costs)
    for ranks in model.classes:
        for j, name in enumerate(model.order[: len(ranks) - 1]):
            for c, cand in enumerate(model.candidates[name]):
                slots = model.place.get((name, c, 0))
                if not slots:
                    continue  # pinned or host-ordered pieces: no choice to restrict
                for rank in ranks[j + 1:]:
                    if rank in slots:
                        model.cp.add(slots[rank] == 0)


def _table_order(costs) -> list[str]:
    """Tables heaviest first (their cheapest cut), the order symmetry breaking relabels by."""
    weight = {
        name: min(sum(p.total_ms for p in pieces) for pieces in per) for name, per in costs.items()
    }
    return sorted(weight, key=lambda n: (-weight[n], n))

def canonical(model, tables: tuple[TablePlan, ...]) -> tuple[TablePlan, ...]:
    """The same plan with interchangeable ranks relabelled to meet the symmetry constraints."""
    by_name = {tp.name: tp for tp in tables}
    mapping: dict[int, int] = {}
    for ranks in model.classes:
        members = set(ranks)
        labels: dict[int, int] = {}
        for name in model.order:
            tp = by_name.get(name)
            if tp is None or movable(model.workload, tp) is None:
                continue
            rank = tp.shards[0].rank
            if rank in members and rank not in labels:
                labels[rank] = ranks[len(labels)]
        rest = iter(r for r in ranks if r not in labels.values())
        for rank in ranks:
            mapping[rank] = labels[rank] if rank in labels else next(rest)
    if not mapping:
        return tables
    out = []
    for tp in tables:
        if movable(model.workload, tp) is None:
            out.append(tp)
            continue
        shards = tuple(replace(s, rank=mapping.get(s.rank, s.rank)) for s in tp.shards)
        out.append(replace(tp, shards=shards))
    return tuple(out)
