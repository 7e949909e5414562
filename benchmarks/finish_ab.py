"""Which finished plan the CP-SAT search keeps: the solver's plan finished (repair, make-up) as
before 2026-12-05, against the better of it and the warm start's finish (made beside the solver)
as the whole model rates them, replayed side by side with TorchRec's.

    python benchmarks/finish_ab.py [--first-seed 1000] [--per-regime 8] [--rounds 7]

Per held-out task of every regime, plans of the packaged model as it ships (``default``) and
with its compute scaled x0.25 and x4 (deliberately wrong models, robust search), each made twice
(``=`` in a task's line: ``old`` is the same plan as ``new``): ``new`` as shipped, ``old`` always
the solver's plan finished where the solver's unfinished plan was kept. Cells: replayed step over
TorchRec's / lookups' slowest rank over the mean; then each variant's geometric mean, worst task
and median imbalance, and per model new over old, over every task and over those whose plans differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from side_by_side import new_against_old_main  # noqa: E402


def _solver_finished(self, workload, cost_model, result):
    """The rule before: the solver's plan, finished, whatever the warm start's finish rates."""
    return result, self._finish(workload, cost_model, result.tables)


def _switch(args):
    from shardopt.search.ilp import IlpSearch

    shipped = IlpSearch._better_finished

    def switch(label: str | None) -> None:
        IlpSearch._better_finished = _solver_finished if label == "old" else shipped

    return switch


if __name__ == "__main__":
    new_against_old_main(_switch)
