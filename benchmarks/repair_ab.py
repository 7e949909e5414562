"""The robust CP-SAT search's last steps: the bottleneck repair, then the make-up step (as
shipped) against the make-up step alone where it moves pieces (tried 2026-12-05 to plan 100
tables x 8 ranks sooner, and not kept), replayed side by side with TorchRec's.

    python benchmarks/repair_ab.py [--first-seed 1000] [--per-regime 8] [--rounds 7]

Per held-out task of every regime, plans of the packaged model as it ships (``default``) and
with its compute scaled x0.25 and x4 (deliberately wrong models, robust search), each made twice
(``=`` in a task's line: ``old`` is the same plan as ``new``): ``new`` finishes with the make-up step alone where it moves pieces (the repair where it moves
none), ``old`` as shipped: the repair first, then the make-up step on what it kept. Cells: replayed step over TorchRec's / lookups'
slowest rank over the mean; then each variant's geometric mean, worst task and median imbalance,
and per model new over old (over every task and over those whose plans differ).
"""

from __future__ import annotations

import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from side_by_side import new_against_old_main  # noqa: E402

_shipped_search = None  # IlpSearch.search as shipped, set by _switch()


def _makeup_first(self, workload, cost_model, tables):
    """The variant tried: the make-up step alone where it moves pieces, else the repair."""
    from shardopt.search.ilp import REPAIR_SHARE, even_makeup, repair_bottleneck

    evened, moves = even_makeup(workload, cost_model, tables, self.objective)
    if moves:
        return None, (evened, moves)
    fixed = repair_bottleneck(workload, cost_model, tables, objective=self.objective,
                              time_budget_s=max(0.2, self.time_limit_s * REPAIR_SHARE))
    return fixed, (fixed.kept(tables), 0)


def _search(self, workload, cost_model):
    """IlpSearch.search taking a finish without a repair (None) as the variant returns it."""
    from shardopt.search import ilp

    with_repair = ilp.with_repair
    ilp.with_repair = lambda result, fixed: result if fixed is None else with_repair(result, fixed)
    try:
        return _shipped_search(self, workload, cost_model)
    finally:
        ilp.with_repair = with_repair


def _switch(args):
    from shardopt.search.ilp import IlpSearch

    global _shipped_search
    shipped, _shipped_search = IlpSearch._finish, IlpSearch.search

    def switch(label: str | None) -> None:
        new = label == "new"
        IlpSearch._finish, IlpSearch.search = (_makeup_first, _search) if new else (shipped, _shipped_search)

    return switch


if __name__ == "__main__":
    new_against_old_main(_switch)
