"""The make-up's tilt: the robust search's shape variants at twice the model's per-table doubt
(tried 2026-12-05 and not kept) against the doubt itself, replayed side by side with TorchRec's.

    python benchmarks/tilt_ab.py [--factor 2] [--first-seed 1000] [--per-regime 8] [--rounds 7]

On that machine the packaged model's backward per table leaned with shape more than its doubt
says (``benchmarks/table_error.py``: log-sd 0.47, 0.24 once log rows, dimension and pooling are
taken out), so the make-up's variants (each table's lookups scaled along one shape axis by
exp(+-tilt z)) were tried wider. Per held-out task, plans of the packaged model and of its compute
x0.25 and x4 (``side_by_side.replay_new_against_old``): ``new`` with the tilt times ``--factor``,
``old`` as shipped.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from side_by_side import new_against_old_main  # noqa: E402


def _switch(args):
    from shardopt.costmodel import uncertainty

    shipped = uncertainty.makeup_variants

    def switch(label: str | None) -> None:
        factor = args.factor if label == "new" else 1.0
        uncertainty.makeup_variants = shipped if label is None else \
            (lambda workload, tilt: shipped(workload, tilt * factor))

    return switch


if __name__ == "__main__":
    new_against_old_main(_switch, lambda parser: parser.add_argument("--factor", type=float, default=2.0))
