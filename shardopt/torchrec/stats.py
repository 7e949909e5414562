"""The stats TorchRec's planner logs, in its spirit: per rank the memory used (HBM, or DRAM on CPU
ranks) and reserved, the
predicted phases and the critical path, the imbalance, the sharding types and the heaviest tables."""

from __future__ import annotations

from collections import Counter

from shardopt.contracts import Breakdown
from shardopt.core.plan import Plan
from shardopt.core.units import format_bytes
from shardopt.core.workload import Workload

HEAVIEST = 5


def stats_text(workload: Workload, plan: Plan, reserved_per_rank: int) -> str:
    """A table a TorchRec user reads at INFO after planning."""
    from shardopt.arithmetic.memory import plan_memory

    ranks = plan.predicted.per_rank
    b = Breakdown.of(ranks)
    hbm, ddr = plan_memory(workload, plan.tables)
    cap = workload.topology.hbm_cap
    lines = [
        f"shardopt plan: {len(plan.tables)} tables on {workload.topology.world_size} ranks; cost model"
        f" {plan.predicted.cost_model}; search {plan.predicted.search.algorithm if plan.predicted.search else '-'}",
        f"{'rank':>4} {'mem used':>10} {'of':>10} {'reserved':>10} {'host DDR':>10} {'fwd comp':>9}"
        f" {'fwd comm':>9} {'bwd comp':>9} {'bwd comm':>9} {'total ms':>9}",
    ]
    for r in ranks:
        lines.append(
            f"{r.rank:>4} {format_bytes(hbm.get(r.rank, 0)):>10} {format_bytes(cap):>10}"
            f" {format_bytes(reserved_per_rank):>10} {format_bytes(ddr.get(workload.topology.host_of(r.rank), 0)):>10}"
            f" {r.fwd_compute_ms:>9.3f} {r.fwd_comm_ms:>9.3f} {r.bwd_compute_ms:>9.3f} {r.bwd_comm_ms:>9.3f}"
            f" {r.total_ms:>9.3f}")
    imbalance = b.bottleneck_ms / b.mean_ms if b.mean_ms else 1.0
    bound = (f"lower bound {plan.predicted.lower_bound_ms:.3f} ms" if plan.predicted.lower_bound_ms > 0
             else "no lower bound (no search ran)")
    lines.append(f"critical path (each phase's slowest rank, summed): {b.step_ms:.3f} ms; bottleneck rank"
                 f" {b.bottleneck_ms:.3f} ms; imbalance (max / mean) {imbalance:.3f}; {bound}")
    kinds = Counter(f"{tp.sharding_type}/{tp.compute_kernel}" for tp in plan.tables)
    lines.append("sharding: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    lines.append("heaviest tables: " + ", ".join(_heaviest(workload, plan)))
    from shardopt.planner.summary import parallelism_lines

    lines.extend(parallelism_lines(plan))
    return "\n".join(lines)


def _heaviest(workload: Workload, plan: Plan) -> list[str]:
    from shardopt.core.layout import shard_bytes

    sized = sorted(((shard_bytes(workload.optimizer, t, t.num_embeddings, t.embedding_dim) * t.pooling_factor, t.name)
                    for t in workload.tables), reverse=True)[:HEAVIEST]
    by_name = {tp.name: tp for tp in plan.tables}
    return [f"{name} ({by_name[name].sharding_type} on ranks {sorted({s.rank for s in by_name[name].shards})})"
            for _, name in sized if name in by_name]
