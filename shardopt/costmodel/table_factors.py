"""Per-table corrections fitted to a workload's own measured ranks (``calibrate --workload``).

A model fitted to a grid of kernels is 15-20% off per rank on a workload it never saw, and off in
ways that do not cancel: a table pooled 250 times, a cut's overhead, one table's access pattern.
Where the user's own ranks can be measured, each table's lookups get a factor per pass, fitted so
that the model's ranks match the measured ones: a rank's time is its kernel overhead plus its
tables' costs, each times its table's factor. The factors are pulled towards one (a ridge in log
space), so a table the measurements cannot tell apart keeps the model's own price, and a rank
measured slow raises its tables' prices in proportion to their share of it.

A factor is stored with the table's shape and applies only to a table of that name and shape:
a model refined for one workload prices another's tables as the model does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from shardopt.core.plan import TablePlan
    from shardopt.core.workload import Table, Workload

# log-space ridge per table: a rank's error spreads over its tables rather than landing on one.
RIDGE = 0.3
MAX_LOG_FACTOR = float(np.log(8.0))  # no table is priced more than 8x off its model


KERNELS = ("fused", "dense")  # what a factor was measured in: a table's shards, or its replica


@dataclass(frozen=True)
class TableFactor:
    """A table's measured correction (forward, backward), valid for this name and shape and for
    the kernel it was measured in (``dense``: its data-parallel replica, another algorithm)."""

    name: str
    rows: int
    dim: int
    pooling: float
    fwd: float
    bwd: float
    kernel: str = "fused"

    def matches(self, table: "Table") -> bool:
        return (table.num_embeddings == self.rows and table.embedding_dim == self.dim
                and abs(table.pooling_factor - self.pooling) <= 1e-9 * max(1.0, self.pooling))

    def to_dict(self) -> dict:
        return {"name": self.name, "rows": self.rows, "dim": self.dim, "pooling": self.pooling,
                "fwd": self.fwd, "bwd": self.bwd, **({"kernel": self.kernel} if self.kernel != "fused" else {})}


def base_name(name: str) -> str:
    """A hot-row table's head and tail (``name#hot``, ``name#cold``) share the table's factor."""
    return name.split("#", 1)[0]


@lru_cache(maxsize=64)
def _index(factors: tuple[TableFactor, ...]) -> dict[tuple[str, str], TableFactor]:
    return {(f.name, f.kernel): f for f in factors}


def factor_of(factors: tuple[TableFactor, ...], table: "Table", compute_kernel: str = "fused") -> tuple[float, float]:
    """The table's (forward, backward) correction in its compute kernel (``dense``: a replica's;
    any other: the fused kernel's) where ``factors`` hold one for a table of its name and shape (a
    hot-row head or tail: of its table's name and width); else (1, 1): a factor measured in one
    kernel does not speak for the other's algorithm (a replica's does not sort its ids)."""
    if not factors:
        return 1.0, 1.0
    name = base_name(table.name)
    f = _index(factors).get((name, "dense" if compute_kernel == "dense" else "fused"))
    if f is None or not (f.matches(table) if name == table.name else f.dim == table.embedding_dim):
        return 1.0, 1.0
    return f.fwd, f.bwd


def priced_text(factors: tuple[TableFactor, ...], workload: "Workload") -> str:
    """What a model's provenance adds when it prices some of the workload's tables by their factors."""
    priced = sum(1 for t in workload.tables if factor_of(factors, t) != (1.0, 1.0))
    return (f"; {priced} of {len(workload.tables)} tables priced by this workload's measured plans"
            " (calibrate --workload)") if priced else ""


@dataclass(frozen=True)
class RankSample:
    """One measured rank: its overheads and each table's predicted milliseconds (forward,
    backward; the model without factors), and what was measured."""

    overhead_ms: tuple[float, float]
    tables: dict[str, tuple[float, float]]
    measured_ms: tuple[float, float]
    weight: float = 1.0  # in the fit, as this many ranks (a table measured alone: several)


def rank_samples(model, workload: "Workload", tables: Sequence["TablePlan"],
                 measured: Sequence[tuple[float, float]]) -> list[RankSample]:
    """Each rank of a plan, priced table by table by ``model`` (an analytic model) beside its
    measured forward and backward lookups."""
    from shardopt.arithmetic.hotrows import expand
    from shardopt.costmodel.plan_kernels import rank_kernels

    workload, tables = expand(workload, tables)
    hw = model.hardware(workload)
    out = []
    for rank, kernels in enumerate(rank_kernels(workload, tables, workload.topology.compute_device)):
        per_table: dict[str, list[float]] = {}
        kinds = set()
        members = [placed for group in kernels.values() for placed in group]  # as AnalyticCostModel._placed
        for placed, cost in zip(members, model._kernel_costs(workload, hw, members)):
            acc = per_table.setdefault(base_name(placed.table.name), [0.0, 0.0])
            acc[0] += cost.fwd_compute_ms
            acc[1] += cost.bwd_compute_ms
            kinds.add(placed.sharding_type)
        o_fwd, o_bwd, _, _ = model.overheads(workload, kinds)
        out.append(RankSample((o_fwd * 1e3, o_bwd * 1e3), {k: (v[0], v[1]) for k, v in per_table.items()},
                              (float(measured[rank][0]), float(measured[rank][1]))))
    return out


def fit_factors(samples: Sequence[RankSample], ridge: float = RIDGE) -> dict[str, tuple[float, float]]:
    """Each table's (forward, backward) factor minimising the log error of every measured rank,
    plus ``ridge`` times each log factor squared; tables on no measured rank are left out."""
    from scipy.optimize import least_squares

    names = sorted({n for s in samples for n in s.tables})
    if not names:
        return {}
    index = {n: i for i, n in enumerate(names)}
    factors = np.ones((len(names), 2))
    for p in (0, 1):
        rows = [(s.overhead_ms[p], s.measured_ms[p], [(index[n], c[p]) for n, c in s.tables.items()], s.weight)
                for s in samples if s.measured_ms[p] > 0 and any(c[p] > 0 for c in s.tables.values())]
        if not rows:
            continue
        contrib = np.zeros((len(rows), len(names)))
        for i, (_, _, parts, _) in enumerate(rows):
            for j, c in parts:
                contrib[i, j] += c
        overhead = np.array([r[0] for r in rows])
        target = np.log(np.array([r[1] for r in rows]))
        counts = np.sqrt(np.array([r[3] for r in rows]))
        weight = np.sqrt(ridge)

        def residuals(theta, contrib=contrib, overhead=overhead, target=target, counts=counts):
            pred = overhead + contrib @ np.exp(theta)
            return np.concatenate([counts * (np.log(np.maximum(pred, 1e-12)) - target), weight * theta])

        def jacobian(theta, contrib=contrib, overhead=overhead, counts=counts):
            scaled = contrib * np.exp(theta)[None, :]
            pred = overhead + scaled.sum(axis=1)
            return np.vstack([counts[:, None] * scaled / np.maximum(pred, 1e-12)[:, None],
                              weight * np.eye(len(theta))])

        fit = least_squares(residuals, np.zeros(len(names)), jac=jacobian, method="trf",
                            bounds=(-MAX_LOG_FACTOR, MAX_LOG_FACTOR), x_scale=1.0)
        factors[:, p] = np.exp(fit.x)
    return {n: (float(factors[i, 0]), float(factors[i, 1])) for n, i in index.items()}


def table_factors(workload: "Workload", fitted: dict[str, tuple[float, float]]) -> tuple[TableFactor, ...]:
    """The fitted factors bound to the workload's tables' shapes, in the workload's order."""
    return tuple(
        TableFactor(t.name, t.num_embeddings, t.embedding_dim, float(t.pooling_factor),
                    round(fitted[t.name][0], 6), round(fitted[t.name][1], 6))
        for t in workload.tables if t.name in fitted
    )


def rank_error(samples: Sequence[RankSample], fitted: dict[str, tuple[float, float]] | None = None) -> float:
    """The rms log error of the measured ranks' lookups (both passes), with ``fitted`` factors
    applied (None: the model's own)."""
    errors = []
    for s in samples:
        for p in (0, 1):
            if s.measured_ms[p] <= 0:
                continue
            pred = s.overhead_ms[p] + sum(c[p] * ((fitted or {}).get(n, (1.0, 1.0))[p]) for n, c in s.tables.items())
            if pred > 0:
                errors.append(np.log(pred / s.measured_ms[p]))
    return float(np.sqrt(np.mean(np.square(errors)))) if errors else 0.0
