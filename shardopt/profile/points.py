"""The points a profile sweep draws: single tables, fused sets, rank-shaped kernels, replicas.

Each is a plain dict (``kind: tbe``, batch, precision, location, tables and, for replicas,
``kernel: dense``) whose key (:func:`shardopt.profile.dataset.point_key`) says what it measures.
"""

from __future__ import annotations

import math

import numpy as np

from shardopt.traces.synth import trace_histograms

DIMS = (16, 32, 64, 128, 256)


def table_spec(rows: int, dim: int, pooling: float, access: dict) -> dict:
    return {"rows": int(rows), "dim": int(dim), "pooling_factor": round(float(pooling), 3), "access": access}


def tbe_spec(tables: list[dict], batch: int, precision: str = "fp32", location: str = "hbm") -> dict:
    return {"kind": "tbe", "batch": batch, "precision": precision, "location": location, "tables": tables}


def random_access(rng: np.random.Generator) -> dict:
    pick = rng.random()
    if pick < 0.25:
        return {"distribution": "uniform"}
    if pick < 0.65:
        return {"distribution": "zipf", "alpha": round(float(rng.uniform(0.6, 1.3)), 3)}
    _, uniq, acc = trace_histograms()[int(rng.integers(len(trace_histograms())))]
    return {"distribution": "histogram", "unique_frac": uniq, "access_frac": acc}


def random_table(rng, max_elems: int, max_rows: float) -> dict:
    dim = int(rng.choice(DIMS))
    rows = int(math.exp(rng.uniform(math.log(1e3), math.log(max_rows))))
    rows = max(100, min(rows, max_elems // dim))
    pooling = math.exp(rng.uniform(0.0, math.log(100)))
    return table_spec(rows, dim, pooling, random_access(rng))


def cap_lookups(tables: list[dict], batch: int, max_lookups: float) -> None:
    """Scale pooling factors down so one point stays within a time budget."""
    lookups = batch * sum(t["pooling_factor"] for t in tables)
    if lookups > max_lookups:
        for t in tables:
            t["pooling_factor"] = round(max(0.5, t["pooling_factor"] * max_lookups / lookups), 3)


def cap_elements(tables: list[dict], max_elems: int) -> None:
    """Shrink rows so one fused point's weights stay within memory and build-time budgets."""
    total = sum(t["rows"] * t["dim"] for t in tables)
    if total > max_elems:
        for t in tables:
            t["rows"] = max(100, int(t["rows"] * max_elems / total))


def rank_like_points(rng, count: int, max_elems: int, max_lookups: float) -> list[dict]:
    """Fused points shaped like one rank of a real plan: DLRM-like tables (drawn as `synth`
    draws them), some whole, some row-wise slices (their rows' share of the global batch's
    lookups), some column halves, all pooling the global batch of a 2-8 rank cluster."""
    from shardopt.traces.synth import SynthSpec, synth_workload

    points = []
    for i in range(count):
        world = int(rng.choice([2, 4, 8]))
        batch = int(rng.choice([256, 512])) * world
        spec = SynthSpec(
            name="rank", num_tables=int(rng.integers(3, 17)), world_size=world,
            local_world_size=world, rows_scale=float(rng.uniform(0.005, 0.03)),
            seed=int(rng.integers(1 << 30)),
        )
        tables = []
        for t in synth_workload(spec)["tables"]:
            rows, dim, pooling = t["num_embeddings"], t["embedding_dim"], t["pooling_factor"]
            cut = rng.random()
            if cut < 0.25 and rows >= world:
                rows, pooling = rows // world, pooling / world
            elif cut < 0.4 and dim >= 64:
                dim //= 2
            tables.append(table_spec(rows, dim, pooling, t["access"]))
        cap_elements(tables, max_elems)
        cap_lookups(tables, batch, max_lookups)
        points.append(tbe_spec(tables, batch))
    return points


def dense_points(rng, count: int, max_elems: int, max_lookups: float) -> list[dict]:
    """Replicas as a rank runs them: 1-4 tables small enough to replicate (rows up to a few
    global batches), pooled up to 300 (hot tables are what gets replicated), fused in one dense
    kernel at a rank's own batch."""
    points = []
    for _ in range(count):
        batch = int(rng.choice([128, 256, 512, 1024]))
        tables = []
        for _ in range(int(rng.integers(1, 5))):
            rows = int(math.exp(rng.uniform(math.log(500), math.log(60_000))))
            pooling = math.exp(rng.uniform(0.0, math.log(300)))
            tables.append(table_spec(rows, int(rng.choice(DIMS)), pooling, random_access(rng)))
        cap_elements(tables, max_elems)
        cap_lookups(tables, batch, max_lookups)
        points.append({**tbe_spec(tables, batch), "kernel": "dense"})
    return points
