"""Statistics from batches (``shardopt stats --from-batches``): accuracy against known pooling and
Zipf skews, and the memory 10^8 ids take.

    python benchmarks/batch_stats.py --ids 1e8

A synthetic loader of 8 features (10^4 to 10^8 rows, Zipf 0.6-1.2, pooling 1-40) yields batches
until ``--ids`` ids have been read; the measured pooling and hottest-1% share are set beside the
known ones, and the process's peak RSS (ru_maxrss) and time are reported. The loader keeps no
table of its own (ranks drawn by the inverse of the continuous Zipf CDF, floored; rank r is row
r * P mod rows for a P prime to rows), so the RSS is the measurement's; the time includes drawing
the ids.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FEATURES = {  # name -> (rows, Zipf exponent, pooling)
    "f0": (10_000, 1.2, 1.0), "f1": (100_000, 1.05, 4.0), "f2": (1_000_000, 0.9, 10.0),
    "f3": (3_000_000, 0.8, 2.0), "f4": (10_000_000, 1.1, 20.0), "f5": (50_000_000, 0.6, 1.0),
    "f6": (100_000_000, 1.0, 5.0), "f7": (200_000, 1.15, 40.0),
}


def _ranks(rng, rows: int, alpha: float, n: int):
    """Zipf ranks 1..rows: x drawn from the continuous density ~ x^-alpha on [1, rows + 1), floored."""
    import numpy as np

    u = rng.random(n)
    top = rows + 1.0
    if abs(alpha - 1) < 1e-9:
        x = top ** u
    else:
        x = (1 + u * (top ** (1 - alpha) - 1)) ** (1 / (1 - alpha))
    return np.minimum(np.floor(x).astype(np.int64), rows)


def known_share(rows: int, alpha: float, share: float) -> float:
    """The sampler's own share of lookups on its hottest ``share`` of ranks."""
    import math

    m, top = max(1, math.ceil(share * rows)), rows + 1.0
    if abs(alpha - 1) < 1e-9:
        return math.log(m + 1) / math.log(top)
    return ((m + 1) ** (1 - alpha) - 1) / (top ** (1 - alpha) - 1)


def loader(batches: int, batch: int, seed: int = 0):
    import numpy as np
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    rng = np.random.default_rng(seed)
    for _ in range(batches):
        keys, lengths, values = [], [], []
        for name, (rows, alpha, pooling) in FEATURES.items():
            bag = rng.poisson(pooling, batch)
            ranks = _ranks(rng, rows, alpha, int(bag.sum()))
            keys.append(name)
            lengths.append(bag)
            values.append(((ranks - 1) * 1_000_003) % rows)  # 1000003 is prime to every row count here
        yield KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.from_numpy(np.concatenate(values)),
                                                  lengths=torch.from_numpy(np.concatenate(lengths)))


def main(argv=None) -> int:
    import numpy as np

    from shardopt.traces.batches import SHARES, measure_batches

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=float, default=1e8)
    parser.add_argument("--batch", type=int, default=4096)
    args = parser.parse_args(argv)
    per_batch = args.batch * sum(p for _, _, p in FEATURES.values())
    batches = int(np.ceil(args.ids / per_batch))
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    stats = measure_batches(loader(batches, args.batch), {f: (f, r) for f, (r, _, _) in FEATURES.items()},
                            limit=batches)
    seconds = time.perf_counter() - started
    ids = sum(s.lookups for s in stats.values())
    print(f"{ids:.3g} ids in {batches} batches of {args.batch}: {seconds:.0f} s, peak RSS"
          f" {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB ({before:.2f} GiB before"
          " torch was imported)")
    print("| feature | rows | zipf | pooling | measured | lookups / rows | hottest 0.1% / 1% / 10%: known |"
          " measured | shares | distinct | exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, (rows, alpha, pooling) in FEATURES.items():
        s = stats[name]
        known = [known_share(rows, alpha, share) for share in SHARES]
        worst = max(worst, *(abs(a - b) for a, b in zip(known, s.hot_shares)))
        print(f"| {name} | {rows:.0e} | {alpha} | {pooling} | {s.pooling_factor:.3f} | {s.lookups / rows:.3g}"
              f" | {' / '.join(f'{x:.3f}' for x in known)} | {' / '.join(f'{x:.3f}' for x in s.hot_shares)}"
              f" | {s.shares_from} | {s.distinct} | {s.exact} |")
    print(f"worst hottest-share error: {worst * 100:.1f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
