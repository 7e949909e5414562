"""How wrong a cost model may be on a workload, and what that does to a plan's step.

The doubt follows from the model's provenance (:mod:`shardopt.costmodel.provenance`), never from
timings, so the same model and workload give the same doubt on any machine:

- compute against communication may be off by up to ``SCALES`` (x1/3 to x3): FBGEMM's CPU
  kernels differed 2-9x between two VMs of one name, and GPU constants are published figures;
- each table's lookups may be off by their own error, a log-normal of ``2 x`` the model's
  held-out error (the held-out figure was measured on the machine it was fitted on), at least
  ``SIGMA_OUTSIDE`` for a table outside the shapes it was fitted on, and ``SIGMA_UNFITTED`` for
  constants fitted on nothing.

- that error leans with the tables' shapes (measured on a CPU the packaged model never saw:
  the shape explained 15% of the per-table spread forward, 46% backward,
  ``benchmarks/table_error.py``): along each shape axis (log rows, dimension, pooling, each
  standardised over the workload's tables), :func:`makeup_variants` tilts every table's lookups
  by exp(+-sigma z), sigma the doubt's typical table error: a variant of the model per axis and sign.

The robust search (``--robust``) minimises the step under that doubt
(:class:`~shardopt.contracts.RobustObjective`); every plan reports its step at each scale and the
spread of its step under the per-table errors (:func:`sensitivity`).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Optional, Sequence

import numpy as np

from shardopt.arithmetic.exact import settled
from shardopt.contracts import CRITICAL_PATH, Objective, RobustObjective, ShardSpec, rank_phases
from shardopt.core.plan import Sensitivity, TablePlan
from shardopt.core.workload import Workload
from shardopt.costmodel.base import CostModel, whole_costs

RobustMode = Literal["auto", "on", "off"]
SCALES = (1 / 3, 1.0, 3.0)
HELD_OUT_FACTOR = 2.0
SIGMA_FLOOR = 0.1
SIGMA_UNFITTED = 0.25
SIGMA_OUTSIDE = 0.5
DRAWS = 64  # per-table error draws behind a plan's interval
INTERVAL = (10, 50, 90)  # percentiles of the step under those draws


@dataclass(frozen=True)
class Doubt:
    """The model's uncertainty on one workload: compute scales, each table's error (log-sd of
    its lookups' time, forward and backward alike), what it rests on, and the tables outside
    the fitted shapes (with why)."""

    scales: tuple[float, ...]
    sigma: tuple[tuple[str, float], ...]
    basis: str
    measured_here: bool
    extrapolated: tuple[tuple[str, str], ...] = ()

    def table_sigma(self) -> dict[str, float]:
        return dict(self.sigma)

    @property
    def typical_sigma(self) -> float:
        return float(np.median([s for _, s in self.sigma])) if self.sigma else 0.0


def doubt_for(model: CostModel, workload: Workload) -> Doubt:
    """The doubt the robust search and the sensitivity report assume for ``model`` on ``workload``."""
    prov = model.provenance(workload)
    if prov.held_out is not None:
        base = max(SIGMA_FLOOR, HELD_OUT_FACTOR * prov.held_out)
        basis = (f"{prov.text}; each table's lookups off by ~{base:.0%} (log-sd: twice the model's held-out"
                 f" error, {prov.held_out:.1%})")
    else:
        base = SIGMA_UNFITTED
        basis = f"{prov.text}; each table's lookups off by ~{base:.0%} (log-sd; no held-out error to go by)"
    outside = []
    if prov.fitted is not None:
        for table in workload.tables:
            why = prov.fitted.outside(workload, table)
            if why:
                outside.append((table.name, why))
    if outside:
        basis += f", ~{max(base, SIGMA_OUTSIDE):.0%} outside the shapes it was fitted on"
    far = {name for name, _ in outside}
    sigma = tuple((t.name, max(base, SIGMA_OUTSIDE) if t.name in far else base) for t in workload.tables)
    return Doubt(SCALES, sigma, basis, prov.measured_here, tuple(outside))


def is_robust(mode: RobustMode, doubt: Doubt, objective: Objective) -> bool:
    """Whether the search plans under the doubt: ``on``, or ``auto`` where the model was not
    measured on this target. The robust objective is the step's: under ``bottleneck``, never."""
    if objective.name != "critical-path":
        return False
    return mode == "on" or (mode == "auto" and not doubt.measured_here)


def robust_objective(workload: Workload, model: CostModel, doubt: Doubt,
                     reference: Optional[Sequence[TablePlan]] = None) -> RobustObjective:
    """The step under ``doubt``. Regret at each scale is measured against ``reference`` (the
    nominal search's quick plan: a step that is reachable, so no scale's regret is inflated by a
    loose bound), else against a balanced plan of whole tables; each table's weight on the
    squared milliseconds of its pieces is what their variance adds to the slowest of the ranks."""
    world = workload.topology.world_size
    whole = whole_costs(workload, model)
    if reference is not None:
        peaks = np.array([rank_phases(r) for r in model.breakdown(workload, reference)]).max(axis=0)
        compute, comm = float(peaks[0] + peaks[2]), float(peaks[1] + peaks[3])
    else:
        overhead = model.rank_overhead_ms(workload, {"table_wise"})
        compute_overhead = model.compute_overhead_ms(workload, {"table_wise"})
        compute = sum(c.fwd_compute_ms + c.bwd_compute_ms for c in whole.values()) / world + compute_overhead
        comm = sum(c.fwd_comm_ms + c.bwd_comm_ms for c in whole.values()) / world + overhead - compute_overhead
    sigma = doubt.table_sigma()
    spread = [
        math.sqrt(sum((sigma[n] * getattr(c, phase)) ** 2 for n, c in whole.items()) / world)
        for phase in ("fwd_compute_ms", "bwd_compute_ms")
    ]
    # d E[slowest of W ranks] / d (variance summed over ranks), with each rank's spread near the
    # balanced one: E[max] ~ mean + z_W * sqrt(V / W).
    z = expected_max_normal(world)
    variance = tuple(
        (name, *(z * sigma[name] ** 2 / (2 * world * sd) if sd > 0 else 0.0 for sd in spread))
        for name in sorted(whole)
    )
    return RobustObjective(CRITICAL_PATH.name, scales=doubt.scales, balanced=(max(compute, 1e-9), max(comm, 0.0)),
                           variance=variance, makeup=makeup_variants(workload, doubt.typical_sigma))


def makeup_variants(workload: Workload, tilt: float) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """Each table's lookups' factor in each variant of the model: per shape axis with a spread
    over the workload's tables, exp(+tilt z) and exp(-tilt z) of the table's standardised z."""
    if tilt <= 0 or len(workload.tables) < 2:
        return ()
    shape = np.log(np.array([[t.num_embeddings, t.embedding_dim, t.pooling_factor] for t in workload.tables],
                            dtype=np.float64))
    spread = shape.std(axis=0)
    kept = spread > 1e-9
    if not kept.any():
        return ()
    z = (shape[:, kept] - shape[:, kept].mean(axis=0)) / spread[kept]
    tilted = np.exp(np.concatenate([tilt * z, -tilt * z], axis=1))
    return tuple((t.name, tuple(settled(float(f)) for f in row)) for t, row in zip(workload.tables, tilted))


def plan_penalty(objective: Objective, workload: Workload, model: CostModel, tables: Sequence[TablePlan]) -> float:
    """The robust objective's penalty of a plan's cuts (0 for any other objective)."""
    if not isinstance(objective, RobustObjective):
        return 0.0
    return sum(objective.penalty_of(tp.name, _shard_costs(workload, model, tp)) for tp in tables)


def _shard_costs(workload: Workload, model: CostModel, tp: TablePlan) -> list:
    """Each shard's cost in order, priced once per shape (a row-wise cut over W ranks has two)."""
    table = workload.table(tp.name)
    costs: dict[tuple[int, int], object] = {}
    for shard in tp.shards:
        if shard.sizes not in costs:
            costs[shard.sizes] = model.shard_cost(workload, ShardSpec.placed(table, tp, shard))
    return [costs[shard.sizes] for shard in tp.shards]


def plan_score(objective: Objective, workload: Workload, model: CostModel, tables: Sequence[TablePlan]) -> float:
    """The objective's score of a whole plan under the whole model, its cuts' penalty included."""
    ranks = [rank_phases(r) for r in model.breakdown(workload, tables)]
    return objective.score(ranks, plan_penalty(objective, workload, model, tables))


def sensitivity(workload: Workload, model: CostModel, tables: Sequence[TablePlan], doubt: Doubt) -> Sensitivity:
    """The plan's step at each compute scale, and its 10th, 50th and 90th percentile over
    ``DRAWS`` draws of each table's error (a rank's lookups reweighted by its tables' shares)."""
    ranks = model.breakdown(workload, tables)
    peaks = np.array([rank_phases(r) for r in ranks]).max(axis=0)
    steps = tuple(float(s * (peaks[0] + peaks[2]) + peaks[1] + peaks[3]) for s in doubt.scales)
    drawn = _drawn_steps(workload, model, tables, doubt, ranks)
    low, mid, high = (float(np.percentile(drawn, q)) for q in INTERVAL)
    return Sensitivity(compute_scales=tuple(float(x) for x in doubt.scales), steps_ms=steps,
                       expected_ms=(low, mid, high), table_error=round(doubt.typical_sigma, 4),
                       basis=doubt.basis, extrapolated=tuple(name for name, _ in doubt.extrapolated))


def _drawn_steps(workload: Workload, model: CostModel, tables: Sequence[TablePlan], doubt: Doubt, ranks) -> np.ndarray:
    """The step under each of ``DRAWS`` draws of the tables' errors (mean-one log-normals)."""
    peaks = np.array([rank_phases(r) for r in ranks]).max(axis=0)
    rank, table, share = _table_shares(workload, model, tables)
    names = [t.name for t in workload.tables]
    sigma = doubt.table_sigma()
    z = np.stack([_draws(name) for name in names], axis=1)  # (draws, tables)
    s = np.array([sigma[n] for n in names])
    factor = np.exp(s[None, :] * z - s[None, :] ** 2 / 2)  # mean one
    nominal = np.array([[r.fwd_compute_ms, r.bwd_compute_ms] for r in ranks])  # (ranks, 2)
    weight = _in_rank_order(rank, (factor[:, table, None] * share[None]).swapaxes(0, 1), len(ranks))
    noisy = nominal[None] * weight.swapaxes(0, 1)  # each rank's lookups, reweighted
    return noisy[:, :, 0].max(axis=1) + noisy[:, :, 1].max(axis=1) + peaks[1] + peaks[3]


def _table_shares(workload: Workload, model: CostModel, tables: Sequence[TablePlan]):
    """Per rank, each table's share of its lookups' time (forward, backward), by the pieces' own
    costs, as entries (rank, table index, share pair) in order of rank, then table; a rank with
    no lookups has none. Only the tables a rank holds: the (ranks x tables) array of them was
    5000 x 1024 x 2 mostly zeros, and its product with the draws 1.7 s."""
    index = {t.name: i for i, t in enumerate(workload.tables)}
    held: dict[tuple[int, int], list[float]] = {}
    for tp in tables:
        ti = index[tp.name]
        for shard, c in zip(tp.shards, _shard_costs(workload, model, tp)):
            pair = held.setdefault((shard.rank, ti), [0.0, 0.0])
            pair[0] += c.fwd_compute_ms
            pair[1] += c.bwd_compute_ms
    keys = sorted(held)
    rank = np.array([k[0] for k in keys], dtype=np.int64)
    table = np.array([k[1] for k in keys], dtype=np.int64)
    time = np.array([held[k] for k in keys], dtype=float).reshape(len(keys), 2)
    totals = _in_rank_order(rank, time, workload.topology.world_size)[rank]
    share = np.divide(time, totals, out=np.zeros_like(time), where=totals > 0)
    return rank, table, share


def _in_rank_order(rank: np.ndarray, values: np.ndarray, world: int) -> np.ndarray:
    """Each rank's ``values`` (entries sorted by rank, then table) summed one by one in that
    order from zero: the floats a dense sum over every table gives (its zeros add nothing)."""
    out = np.zeros((world, *values.shape[1:]))
    if not len(rank):
        return out
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    position = np.arange(len(rank)) - np.repeat(starts, np.diff(np.r_[starts, len(rank)]))
    for k in range(int(position.max()) + 1):
        at = position == k
        out[rank[at]] += values[at]
    return out


@lru_cache(maxsize=1 << 14)
def _draws(name: str) -> np.ndarray:
    """A table's standard-normal error draws, from its name alone (stable as tables come and go)."""
    return np.random.default_rng([zlib.crc32(name.encode()), DRAWS]).standard_normal(DRAWS)


@lru_cache(maxsize=256)
def expected_max_normal(count: int) -> float:
    """E[max of ``count`` independent standard normals] (0 for one), by quadrature."""
    if count <= 1:
        return 0.0
    x = np.linspace(-8.0, 8.0, 16001)
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = np.cumsum(pdf) * (x[1] - x[0])
    density = count * pdf * np.clip(cdf, 0.0, 1.0) ** (count - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))
