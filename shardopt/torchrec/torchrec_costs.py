"""TorchRec's own EmbeddingPerfEstimator, applied shard by shard to any shardopt plan.

TorchRec 1.8 computes a shard's perf from a ``ShardPerfContext`` with a sharding-type evaluator
and a ``HardwarePerfConfig``; we build that context from our workload and plan exactly as its
``build_shard_perf_contexts`` does for a ShardingOption (default constraints, no qcomms, no
caching, pooled, unweighted), with TorchRec's default topology constants. This is the incumbent's
estimate, for comparison beside our models; it is not tuned to the hardware at hand.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from shardopt.core.layout import DATA_TYPE_BYTES
from shardopt.core.plan import RankBreakdown, TablePlan
from shardopt.core.workload import Workload

NAME = "torchrec-estimator"


def torchrec_breakdown(workload: Workload, tables: Sequence[TablePlan]) -> list[RankBreakdown]:
    from shardopt.arithmetic.hotrows import expand

    workload, tables = expand(workload, tables)
    from torchrec.distributed.planner.constants import BIGINT_DTYPE
    from torchrec.distributed.planner.estimator.estimator import get_embedding_perf_sharding_evaluator
    from torchrec.distributed.planner.estimator.types import HardwarePerfConfig, ShardPerfContext
    from torchrec.distributed.planner.types import Topology

    topo = workload.topology
    tr_topology = Topology(
        world_size=topo.world_size,
        compute_device=topo.compute_device,
        local_world_size=topo.ranks_per_host,
        hbm_cap=topo.hbm_cap,
    )
    config = HardwarePerfConfig()
    by_name = workload.tables_by_name
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for tp in tables:
        table = by_name[tp.name]
        element = float(DATA_TYPE_BYTES[table.data_type])
        device_bw = config.get_device_bw(
            tr_topology.compute_device, tp.compute_kernel, tr_topology.hbm_mem_bw,
            tr_topology.ddr_mem_bw, tr_topology.ssd_mem_bw, tr_topology.hbm_to_ddr_mem_bw,
            None, False,
        )
        evaluator = get_embedding_perf_sharding_evaluator(
            sharding_type=tp.sharding_type, is_inference=False
        )
        for shard in tp.shards:
            ctx = ShardPerfContext(
                sharding_type=tp.sharding_type,
                compute_kernel=tp.compute_kernel,
                hash_size=shard.sizes[0],
                emb_dim=shard.sizes[1],
                batch_sizes=[workload.batch_size] * len(table.features),
                num_poolings=[1.0] * len(table.features),
                input_lengths=[table.pooling_factor] * len(table.features),
                world_size=tr_topology.world_size,
                local_world_size=tr_topology.local_world_size,
                intra_group_size=tr_topology.intra_group_size,
                input_data_type_size=BIGINT_DTYPE,
                table_data_type_size=element,
                output_data_type_size=element,
                fwd_a2a_comm_data_type_size=element,
                bwd_a2a_comm_data_type_size=element,
                fwd_sr_comm_data_type_size=element,
                bwd_sr_comm_data_type_size=element,
                device_bw=device_bw,
                hbm_to_ddr_mem_bw=tr_topology.hbm_to_ddr_mem_bw,
                comms_bandwidths=tr_topology.comms_bandwidths,
                is_pooled=True,
                bwd_compute_multiplier=tr_topology.bwd_compute_multiplier,
                weighted_feature_bwd_compute_multiplier=tr_topology.weighted_feature_bwd_compute_multiplier,
                table_name=table.name,
                hash_size_for_clamping=table.num_embeddings,
            )
            perf = evaluator.compute_perf(ctx=ctx, config=config)
            acc = sums[shard.rank]
            acc[0] += perf.fwd_compute
            acc[1] += perf.bwd_compute
            acc[2] += perf.fwd_comms + perf.input_dist_comms
            acc[3] += perf.bwd_comms
    out = []
    for rank in range(topo.world_size):
        f, b, fc, bc = sums[rank]
        out.append(RankBreakdown(rank=rank, fwd_compute_ms=f, bwd_compute_ms=b, fwd_comm_ms=fc,
                                 bwd_comm_ms=bc, total_ms=f + b + fc + bc, hbm_bytes=0))
    return out
