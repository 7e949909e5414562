"""Analytic cost model: bytes moved over bandwidth, per memory tier and link.

In the spirit of TorchRec's EmbeddingPerfEstimator, with two things it lacks: the access skew
(a hot set that fits in cache is read at cache bandwidth) and the distinct rows the backward pass
really updates. Units: bytes, seconds inside, milliseconds out.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Sequence

import numpy as np

from shardopt.costmodel.base import CostModel, ShardCost, slowed, whole_costs
from shardopt.costmodel.comm_source import CommChoice, CommProfile, choose_comm
from shardopt.costmodel.comm_curve import CommCurves
from shardopt.costmodel.constants import Calibration
from shardopt.costmodel.plan_kernels import kernel_kinds
from shardopt.costmodel.provenance import Provenance, calibration_provenance
from shardopt.costmodel.table_factors import factor_of, priced_text
from shardopt.costmodel.terms import ShardBasis, cache_times, hardware_coefficients, kernel_cache, terms_in_cache
from shardopt.core.hardware import Hardware, hardware_for
from shardopt.arithmetic.exact import dot, settled
from shardopt.arithmetic.memory import shard_memory
from shardopt.arithmetic.traffic import CommBytes, comm_bytes, rank_comm_from_all_to_all, shard_lookups, shard_samples
from shardopt.contracts import ShardSpec
from shardopt.core.plan import RankBreakdown, TablePlan
from shardopt.core.workload import Workload

GB = 1e9
# Replicas beside a CPU rank's sharded tables cost the rank's lookups this share more, forward and
# backward, beyond their own kernel (medians over 15 tasks, benchmarks/results/replica_company.md).
REPLICA_COMPANY = (0.10, 0.15)


class AnalyticCostModel(CostModel):
    """Bytes-over-bandwidth estimate: terms of work times per-term constants.

    Constants come from the workload's hardware profile, or from a calibration fitted to a
    profile of that hardware (then the model's name says so).
    """

    def __init__(self, hardware: Hardware | None = None, calibration: Calibration | None = None,
                 comm_profile: CommProfile | None = None) -> None:
        self._hardware = hardware
        self.calibration = calibration
        self.comm_profile = comm_profile
        self._choice_cache: tuple[Workload, CommChoice] | None = None
        self._slope_cache: tuple[Workload, tuple[float, float] | None] | None = None
        self._hw_cache: tuple[object, Hardware] | None = None
        self._overhead_cache: tuple[object, dict] = (None, {})
        self._cache_cache: tuple[Workload, tuple[tuple[float, float], float]] | None = None
        self._coef_cache: tuple[Hardware, dict[bool, tuple[np.ndarray, np.ndarray]]] | None = None
        self.name = "analytic-v0" if calibration is None else f"analytic-calibrated-{calibration.hardware}"

    def provenance(self, workload: Workload) -> Provenance:
        """Fitted to a profile (which machine, which shapes), or the hardware profile's constants."""
        cal = self.calibration
        if cal is None:
            hw = self.hardware(workload)
            return Provenance(False, f"hardware profile '{hw.name}' constants (published figures and estimates,"
                                     " measured on no machine of this workload's)")
        prov = calibration_provenance(cal.trained_on, cal.hardware, workload, self.held_out, cal.fitted)
        return dataclasses.replace(prov, text=prov.text + priced_text(cal.table_factors, workload))

    def hardware(self, workload: Workload) -> Hardware:
        # Keyed on the topology object: hardware_for builds a new profile on every call when the
        # topology declares links, and a cache keyed on it recalibrated for every shard.
        topology = workload.topology
        if self._hw_cache is None or self._hw_cache[0] is not topology:
            self._hw_cache = (topology, calibrated_hardware(self._hardware or hardware_for(topology),
                                                            self.calibration))
        return self._hw_cache[1]

    def _coefficients(self, hw: Hardware, dense: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) seconds per term of the fused kernel, or (``dense``) of replicas'."""
        if self._coef_cache is None or self._coef_cache[0] is not hw:
            if self.calibration is not None:
                fused, replicas = (self.calibration.kernel_constants(d) for d in (False, True))
                coef = {d: (np.array(k.fwd), np.array(k.bwd)) for d, k in ((False, fused), (True, replicas))}
            else:
                coef = dict.fromkeys((False, True), hardware_coefficients(hw))
            self._coef_cache = (hw, coef)
        return self._coef_cache[1][dense]

    # -- one shard -------------------------------------------------------------------------------
    floor_below_cost = True  # a rank's shards share its caches

    def shard_cost(self, workload: Workload, spec: ShardSpec) -> ShardCost:
        """The shard's cost on a rank of average contents: it shares the cache with a balanced
        rank's share of the workload (what keeps shard costs additive for a search)."""
        return self._priced(workload, spec, True)

    def shard_floor(self, workload: Workload, spec: ShardSpec) -> ShardCost:
        """The shard with the rank's caches to itself: sharing them only turns hits into misses,
        which cost more (the fitted constants keep hit <= last level <= memory)."""
        return self._priced(workload, spec, False)

    def _priced(self, workload: Workload, spec: ShardSpec, average: bool) -> ShardCost:
        key = (average, id(spec.table), spec.sharding_type, spec.rows, spec.cols, spec.compute_kernel,
               spec.cache_load_factor)  # the table by identity (its hash is all its fields'), held beside
        memo = self._memo(workload)
        held = memo.get(key)
        if held is None or held[0] is not spec.table:
            hw = self.hardware(workload)
            cache = self._average_rank_cache(workload, hw) if average else (None, None)
            held = memo[key] = (spec.table, self._shard_cost(workload, hw, spec, cache))
        return held[1]

    def _memo(self, workload: Workload) -> dict:
        """Shard costs of one workload, priced once: the searches ask for the same pieces (a
        candidate's, a bound's, a repair's) many times over, and pricing one is most of a plan's
        time at 1000 tables."""
        held = self.__dict__.get("_memo_of")
        if held is None or held[0] is not workload:
            held = (workload, {})
            self.__dict__["_memo_of"] = held
        return held[1]

    def _shard_cost(self, workload, hw, spec: ShardSpec, cache) -> ShardCost:
        basis, (f_fwd, f_bwd), (fwd_comm_s, bwd_comm_s), memory = self._basis(workload, hw, spec)
        fwd_terms, bwd_terms = terms_in_cache(hw, basis, cache[0], cache[1])
        fwd_coef, bwd_coef = self._coefficients(hw, spec.compute_kernel == "dense")
        return ShardCost(settled(dot(fwd_terms, fwd_coef) * 1e3 * f_fwd), settled(dot(bwd_terms, bwd_coef) * 1e3 * f_bwd),
                         fwd_comm_s * 1e3, bwd_comm_s * 1e3, memory.hbm_bytes, memory.ddr_bytes)

    def _basis(self, workload, hw, spec: ShardSpec) -> tuple:
        """What pricing ``spec`` needs but its kernel's caches, once per shard (a search prices it
        on an average rank, alone and in every kernel it tries), keyed by its table's identity."""
        table, sharding_type, rows, cols = spec.table, spec.sharding_type, spec.rows, spec.cols
        key = ("basis", id(table), sharding_type, rows, cols, spec.compute_kernel, spec.cache_load_factor)
        memo = self._memo(workload)
        held = memo.get(key)
        if held is None or held[0].table is not table:  # the basis holds its table: no id reused
            lookups = shard_lookups(workload, table, sharding_type, rows)
            held = memo[key] = (
                ShardBasis(hw, table, rows, cols, lookups=lookups, samples=shard_samples(workload, sharding_type),
                           optimizer=workload.optimizer, compute_kernel=spec.compute_kernel,
                           cache_load_factor=spec.cache_load_factor),
                factor_of(self.calibration.table_factors if self.calibration else (), table, spec.compute_kernel),
                self._comm_seconds(workload, hw, sharding_type, rows, cols, lookups, len(table.features)),
                shard_memory(workload.optimizer, spec),
            )
        return held

    def _average_rank_cache(self, workload: Workload, hw: Hardware) -> tuple[tuple[float, float], float]:
        """(cache times, footprint) of a rank holding a balanced share of every table.

        The world's caches together hold the hottest rows of all tables: Che's times for the
        whole workload in ``world`` times the cache equal one rank's for its share of it.
        """
        if self._cache_cache is not None and self._cache_cache[0] is workload:
            return self._cache_cache[1]
        world = workload.topology.world_size
        scaled = dataclasses.replace(
            hw, cache_bytes=hw.cache_bytes * world, llc_bytes=(hw.llc_bytes or 0) * world or None
        )
        times, span = kernel_cache(scaled, [
            (t, t.num_embeddings, t.embedding_dim,
             shard_lookups(workload, t, "table_wise", t.num_embeddings))
            for t in workload.tables
        ], workload.optimizer)
        context = (times, span / world)
        self._cache_cache = (workload, context)
        return context

    def _comm_seconds(self, workload, hw, sharding_type, rows, cols, lookups, features=1, pooled=True):
        """Seconds this shard's rank spends in the all-to-alls, from its bytes and the links."""
        topo = workload.topology
        world, local = topo.world_size, topo.ranks_per_host
        if world == 1:
            return 0.0, 0.0
        sent = comm_bytes(workload, sharding_type, rows, cols, lookups, features, pooled)
        slopes = self._curve_slopes(workload)
        if slopes is not None:
            even, pooled_slope = slopes
            pooled = (sent.pooled + sent.host_local) * pooled_slope
            allreduce = 2 * even * sent.allreduce * (world - 1) / world
            return sent.ids * even + pooled, pooled + allreduce
        fitted = self.comm_choice(workload).fitted
        if fitted is not None:
            beta = fitted[1]
            pooled = (sent.pooled + sent.host_local) * beta
            allreduce = 2 * (world - 1) / world * sent.allreduce * beta
            return sent.ids * beta + pooled, pooled + allreduce
        a2a = _all_to_all_seconds_per_byte(hw, world, local)
        host_local = sent.host_local / (hw.intra_host_bw_gbps * GB)
        fwd = (sent.ids + sent.pooled) * a2a + host_local
        bwd = sent.pooled * a2a + host_local + 2 * (world - 1) / world * sent.allreduce * a2a
        return fwd, bwd

    def comm_choice(self, workload: Workload) -> CommChoice:
        """Where this workload's comm is priced from (:mod:`shardopt.costmodel.comm_source`)."""
        if self._choice_cache is None or self._choice_cache[0] is not workload:
            cal = self.calibration
            choice = choose_comm(
                workload, cal.comm_curves if cal else None, cal.comm if cal else None,
                cal.hardware if cal else None, self.comm_profile,
            )
            self._choice_cache = (workload, choice)
        return self._choice_cache[1]

    def comm_curves(self, workload: Workload) -> CommCurves | None:
        """The measured all-to-all curves this model reads the workload's comm from, if the
        comm-source rule picks measured times (declared links describe the target; curves
        measured elsewhere do not)."""
        return self.comm_choice(workload).curves

    def _curve_slopes(self, workload: Workload) -> tuple[float, float] | None:
        """Seconds per byte of the measured curves around a balanced rank's traffic.

        A search adds shard costs, so each shard is charged the curve's secant slope between half
        and twice the bytes a rank carries when the tables are spread evenly (all table-wise):
        the straight line that best stands in for the curve where balanced plans live.
        """
        if self._slope_cache is not None and self._slope_cache[0] is workload:
            return self._slope_cache[1]
        curves = self.comm_curves(workload)
        slopes = None
        if curves is not None:
            world = workload.topology.world_size
            total = CommBytes()
            for table in workload.tables:
                lookups = shard_lookups(workload, table, "table_wise", table.num_embeddings)
                total = total + comm_bytes(workload, "table_wise", table.num_embeddings,
                                           table.embedding_dim, lookups, len(table.features), table.pooled)
            slopes = tuple(
                curves.secant(world, pattern, max(volume / world, 1.0))
                for pattern, volume in (("even", total.ids), ("pooled", total.pooled))
            )
        self._slope_cache = (workload, slopes)
        return slopes  # type: ignore[return-value]

    def comm_floor_ms(
        self, workload: Workload, average: "CommBytes", every_rank_sends: bool = False
    ) -> float | None:
        """A floor under the busiest rank's comm when ranks average ``average`` bytes (or None).

        Each collective's curve is replaced by its convex minorant, so the mean over ranks of
        their traffic times is at least the minorant at the mean bytes (Jensen). When every rank
        takes part in the sharded all-to-alls, the minorant starts at their latency floor.
        """
        curves = self.comm_curves(workload)
        if curves is None:
            return None
        world = workload.topology.world_size
        pooled = curves.convex_minorant(
            world, "pooled", average.pooled + average.host_local, every_rank_sends
        )
        fwd = curves.convex_minorant(world, "even", average.ids, every_rank_sends) + pooled
        allreduce = 2 * curves.convex_minorant(world, "even", average.allreduce * (world - 1) / world)
        return (fwd + pooled + allreduce) * 1e3

    def additive(self, workload: Workload) -> bool:
        """Whether a plan's cost is its shards' costs summed per rank (plus kind overheads): never,
        since a rank's shards share its caches (and, with measured curves, its collectives)."""
        return False

    # -- one rank --------------------------------------------------------------------------------
    def rank_overhead_ms(self, workload: Workload, sharding_types: set[str]) -> float:
        # Asked once per rank tried by the greedy: memoised per workload and set of kinds.
        if self._overhead_cache[0] is not workload:
            self._overhead_cache = (workload, {})
        key = frozenset(sharding_types)
        memo = self._overhead_cache[1]
        if key not in memo:
            memo[key] = sum(self.overheads(workload, sharding_types)) * 1e3
        return memo[key]

    def compute_overhead_ms(self, workload: Workload, sharding_types: set[str]) -> float:
        """Kernel-call time alone (collective latency is in the comm curves when they exist)."""
        fwd, bwd, _, _ = self.overheads(workload, sharding_types)
        return (fwd + bwd) * 1e3

    def overheads(self, workload: Workload, sharding_types: set[str]) -> tuple[float, float, float, float]:
        """Seconds a rank pays for holding shards of these types: (fwd kernel, bwd kernel, fwd comm, bwd comm)."""
        if not sharding_types:
            return 0.0, 0.0, 0.0, 0.0
        hw = self.hardware(workload)
        world = workload.topology.world_size
        # TorchRec runs each sharding type as a sharding of its own: a kernel and all-to-alls per
        # type (plan_kernels); data-parallel replicas pool the local batch in the dense kernel.
        sharded = len(kernel_kinds(sharding_types) - {"data_parallel"})
        calls = [False] * sharded + [True] * ("data_parallel" in sharding_types)
        if self.calibration is not None:
            constants = [self.calibration.kernel_constants(d) for d in calls]
            fwd_k, bwd_k = sum(k.fwd_kernel_s for k in constants), sum(k.bwd_kernel_s for k in constants)
            fitted = self.comm_choice(workload).fitted
        else:
            fwd_k = bwd_k = len(calls) * hw.kernel_us * 1e-6
            fitted = None
        if sharded and "data_parallel" in sharding_types and workload.topology.compute_device == "cpu":
            # Replicas' dense kernel (its step sweeps whole tables) takes the fused one's rows out of the caches.
            fwd_k, bwd_k = (k + x * s for k, x, s in zip((fwd_k, bwd_k), REPLICA_COMPANY, self._mean_rank_s(workload)))
        # A fitted latency was measured at this world size; a profile's grows with the peers.
        lat = (hw.comm_latency_us + hw.a2a_peer_us * (world - 1)) * 1e-6 if fitted is None else fitted[0]
        lat = lat if world > 1 else 0.0
        fwd_comm = 2 * lat * sharded  # per type: ids out, pooled embeddings back
        bwd_comm = lat * sharded + (2 * lat if "data_parallel" in sharding_types else 0.0)
        return fwd_k, bwd_k, fwd_comm, bwd_comm

    def _mean_rank_s(self, workload: Workload) -> tuple[float, float]:
        """(forward, backward) seconds of a rank's lookups with every table whole, spread evenly."""
        memo, world = self._memo(workload), workload.topology.world_size
        if "mean_rank" not in memo:
            costs = whole_costs(workload, self).values()
            memo["mean_rank"] = (sum(c.fwd_compute_ms for c in costs) / world / 1e3,
                                 sum(c.bwd_compute_ms for c in costs) / world / 1e3)
        return memo["mean_rank"]

    # -- a whole plan ----------------------------------------------------------------------------
    def rank_breakdown(self, workload: Workload, tables: Sequence[TablePlan], rank: int) -> RankBreakdown:
        from shardopt.arithmetic.hotrows import expand

        workload, tables = expand(workload, tables)
        if self.comm_curves(workload) is not None:  # a rank's traffic depends on every rank's
            return slowed(workload, self.placed_breakdown(workload, tables)[rank])
        return slowed(workload, self._placed(workload, tables, rank)[0])

    def placed_breakdown(self, workload: Workload, tables: Sequence[TablePlan]) -> list[RankBreakdown]:
        return self._placed(workload, tables)

    def _placed(self, workload: Workload, tables: Sequence[TablePlan], only: int | None = None) -> list[RankBreakdown]:
        """Every rank's breakdown, or with ``only`` that rank's alone (at 1024 ranks, pricing all
        of them for each move the repair tried made it 5x slower than its budget assumed)."""
        from shardopt.costmodel.plan_kernels import rank_kernels

        hw = self.hardware(workload)
        sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        memory: dict[int, int] = defaultdict(int)
        kinds: dict[int, set[str]] = defaultdict(set)
        ranks = range(workload.topology.world_size) if only is None else [only]
        for rank, kernels in zip(ranks, rank_kernels(workload, tables, workload.topology.compute_device, only)):
            # A rank's kernels run one after another in its step and share its caches: their
            # shards are priced together, each kernel's call apart (overheads, per sharding type).
            members = [placed for group in kernels.values() for placed in group]
            for placed, cost in zip(members, self._kernel_costs(workload, hw, members)):
                acc = sums[rank]
                acc[0] += cost.fwd_compute_ms
                acc[1] += cost.bwd_compute_ms
                acc[2] += cost.fwd_comm_ms
                acc[3] += cost.bwd_comm_ms
                memory[rank] += cost.hbm_bytes
                kinds[rank].add(placed.sharding_type)
        curves = self.comm_curves(workload)
        measured_comm = None
        if curves is not None and only is None:
            # The rank's whole traffic read off the measured curves, as replay reads it.
            measured_comm = rank_comm_from_all_to_all(workload, tables, curves.seconds)
        out = []
        for rank in ranks:
            fwd, bwd, fcomm, bcomm = sums[rank]
            o_fwd, o_bwd, o_fcomm, o_bcomm = (x * 1e3 for x in self.overheads(workload, kinds[rank]))
            if measured_comm is not None:
                fcomm, bcomm = (x * 1e3 for x in measured_comm[rank])
                o_fcomm = o_bcomm = 0.0
            parts = (fwd + o_fwd, bwd + o_bwd, fcomm + o_fcomm, bcomm + o_bcomm)
            out.append(
                RankBreakdown(
                    rank=rank,
                    fwd_compute_ms=parts[0],
                    bwd_compute_ms=parts[1],
                    fwd_comm_ms=parts[2],
                    bwd_comm_ms=parts[3],
                    total_ms=sum(parts),
                    hbm_bytes=memory[rank],
                )
            )
        return out

    def _kernel_costs(self, workload: Workload, hw: Hardware, members) -> list[ShardCost]:
        """Each shard's cost in one fused kernel, priced once per kernel of the same shards: a
        repair's re-score changes one or two ranks, and pricing every other rank's kernels again
        was most of a plan's time at 1000 tables x 128 ranks."""
        memo = self._memo(workload)
        key = ("kernel", tuple((id(p.table), p.sharding_type, p.rows, p.cols, p.compute_kernel,
                                p.cache_load_factor) for p in members))
        costs = memo.get(key)
        if costs is None:  # as kernel_cache(), from the shards' bases (their rows as the cache sees them)
            rows = [self._basis(workload, hw, p.spec)[0].cached for p in members]
            cache = cache_times(hw, rows), sum(p.rows * p.cols * p.table.element_bytes for p in members)
            costs = memo[key] = [self._shard_cost(workload, hw, p.spec, cache) for p in members]
        return costs


def calibrated_hardware(hw: Hardware, calibration: Calibration | None) -> Hardware:
    """The hardware profile with the cache size a calibration fitted."""
    if calibration is None or calibration.llc_bytes is None:
        return hw
    return dataclasses.replace(hw, llc_bytes=calibration.llc_bytes)


def _all_to_all_seconds_per_byte(hw: Hardware, world: int, local: int) -> float:
    """Seconds per byte a rank sends, spread evenly over its peers on and off its host."""
    on_host = (local - 1) / (world - 1)
    off_host = (world - local) / (world - 1)
    return on_host / (hw.intra_host_bw_gbps * GB) + off_host / (hw.inter_host_bw_gbps * GB)
