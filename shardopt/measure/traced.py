"""A traced job read from its files and checked against the workload and the plan it ran."""

from __future__ import annotations

from pathlib import Path

from shardopt.core.errors import ShardoptError

PLAN_IN_FOLDER = "plan.json"  # a trace folder may keep the plan that ran beside the traces


def trace_files(paths) -> list[Path]:
    """The trace files among ``paths``: files as given, folders' ``*.json`` and ``*.json.gz``."""
    out = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")) and p.name != PLAN_IN_FOLDER)
            if not found:
                raise ShardoptError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise ShardoptError(f"{path}: no such trace file or folder")
    return out


def traced_run(workload_path: Path, plan_path: Path, traces, warmup: int):
    """(workload, plan, TracedRun) of one job, every input checked against the others."""
    from shardopt.arithmetic.checks import read_checked
    from shardopt.costmodel.trace_fit import TracedRun
    from shardopt.traces.kineto import TraceError, check_ranks, collective_points, measured_ranks, read_traces

    workload, _, plan = read_checked(workload_path, plan_path)
    files = trace_files(traces)
    read = read_traces(files)
    device = "cpu" if workload.topology.compute_device == "cpu" else "cuda"
    for t in read:
        if t.device != device:
            raise TraceError(f"{t.source}: a trace of {t.device} kernels, but {workload_path} runs on"
                             f" {workload.topology.compute_device} (a trace of another job)")
    holds = {s.rank for tp in plan.tables if tp.sharding_type != "data_parallel" for s in tp.shards}
    check_ranks(read, plan.world_size, str(plan_path), holds_lookups=holds)
    ranks = measured_ranks(read, warmup)
    run = TracedRun(workload, plan, tuple(ranks), f"{plan_path} ({len(files)} trace files)",
                    tuple(collective_points(read, warmup)))
    return workload, plan, run
