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

import argparse
import logging
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from side_by_side import replay_new_against_old  # noqa: E402


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from shardopt.costmodel import uncertainty

    parser = argparse.ArgumentParser()
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--per-regime", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    shipped = uncertainty.makeup_variants

    def switch(label: str | None) -> None:
        factor = args.factor if label == "new" else 1.0
        uncertainty.makeup_variants = shipped if label is None else \
            (lambda workload, tilt: shipped(workload, tilt * factor))

    replay_new_against_old(args.first_seed, args.per_regime, args.rounds, switch)


if __name__ == "__main__":
    main()
