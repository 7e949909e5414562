"""A workload whose tables carry the statistics of a real index trace."""

from __future__ import annotations

from pathlib import Path

from shardopt.core.errors import ShardoptError
from shardopt.traces.stats import trace_stats
from shardopt.core.workload import read_workload, workload_to_dict

MIN_POOLING = 1e-3  # a table the trace never reads still needs a positive pooling factor


def workload_from_trace(
    trace: str | Path,
    *,
    base: str | Path | None = None,
    name: str | None = None,
    dim: int = 64,
    world_size: int = 8,
    hbm_cap: str = "80GB",
) -> dict:
    """Plain workload data: the base workload's tables (or new ones) with the trace's statistics."""
    batch, per_table = trace_stats(trace)
    if base is not None:
        workload, _ = read_workload(base)
        data = workload_to_dict(workload)
        if len(data["tables"]) != len(per_table):
            raise ShardoptError(
                f"{base}: tables: the trace has {len(per_table)} tables, the workload"
                f" {len(data['tables'])}"
            )
    else:
        data = {
            "version": 1,
            "name": name or Path(trace).name.split(".")[0],
            "batch_size": batch,
            "topology": {"world_size": world_size, "hbm_cap": hbm_cap},
            "tables": [
                {"name": f"t{t:03d}", "num_embeddings": max(1, s.max_id + 1), "embedding_dim": dim}
                for t, s in enumerate(per_table)
            ],
        }
    if name:
        data["name"] = name
    for i, (table, s) in enumerate(zip(data["tables"], per_table)):
        if s.max_id >= table["num_embeddings"]:
            raise ShardoptError(
                f"{base}: tables[{i}].num_embeddings: the trace reads row {s.max_id},"
                f" the table has {table['num_embeddings']} rows"
            )
        table["pooling_factor"] = round(max(s.pooling_factor, MIN_POOLING), 6)
        if s.lookups:
            table["access"] = {
                "distribution": "histogram",
                "rows_touched": s.rows_touched,
                "unique_frac": list(s.unique_frac),
                "access_frac": list(s.access_frac),
            }
        else:
            table["access"] = {"distribution": "uniform"}
    return data


def workload_with_batch_stats(workload, stats: dict) -> dict:
    """Plain workload data: ``workload`` with each measured table's pooling factor and access
    histogram (and the batches it rests on) from ``stats`` (table -> FeatureStats); tables no
    batch read keep what they had."""
    data = workload_to_dict(workload)
    for table in data["tables"]:
        s = stats.get(table["name"])
        if s is None or not s.lookups:
            continue
        table["pooling_factor"] = round(max(s.pooling_factor, MIN_POOLING), 6)
        table["access"] = {"distribution": "histogram", "rows_touched": min(max(1, s.distinct), table["num_embeddings"]),
                           "unique_frac": list(s.unique_frac), "access_frac": list(s.access_frac),
                           "batches": s.batches}
    return data
