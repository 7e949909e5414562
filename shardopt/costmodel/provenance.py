"""Where a cost model's figures come from, and the shapes they were fitted on.

A model speaks for the machine and the range of tables it was measured on. The robust search
(:mod:`shardopt.costmodel.uncertainty`) plans under more doubt where it speaks for neither: a
CPU model on another CPU, GPU constants taken from published figures, a table pooled more often
than any measured one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Optional

if TYPE_CHECKING:
    from shardopt.core.workload import Table, Workload

RANGE_FIELDS = ("pooling", "rows", "dim", "batch")
# A shape counts as fitted up to the 99th percentile of the measured ones (down to the 1st): a
# handful of points pooled 194 times among 1500 mostly under 100 do not fit a pooling of 190.
COVERAGE = 0.99


@dataclass(frozen=True)
class FittedRange:
    """The per-table shapes a model's kernels were fitted on: pooling factor, rows, embedding
    dimension and samples per kernel, each as (least, most)."""

    pooling: tuple[float, float]
    rows: tuple[int, int]
    dim: tuple[int, int]
    batch: tuple[int, int]

    @classmethod
    def of(cls, shapes: Iterable[tuple[float, int, int, int]]) -> Optional["FittedRange"]:
        """The range of (pooling, rows, dim, batch) shapes, from their 1st to 99th percentile
        (dimensions, a few discrete values, whole); None for none."""
        import numpy as np

        shapes = list(shapes)
        if not shapes:
            return None
        pooling, rows, dim, batch = (np.array(c, dtype=float) for c in zip(*shapes))
        low, high = 1 - COVERAGE, COVERAGE

        def span(x, kind=float):
            return kind(np.quantile(x, low, method="lower")), kind(np.quantile(x, high, method="higher"))

        return cls((round(span(pooling)[0], 3), round(span(pooling)[1], 3)), span(rows, int),
                   (int(dim.min()), int(dim.max())), span(batch, int))

    def to_dict(self) -> dict:
        return {name: [getattr(self, name)[0], getattr(self, name)[1]] for name in RANGE_FIELDS}

    @classmethod
    def from_dict(cls, data: dict) -> "FittedRange":
        return cls(tuple(data["pooling"]), tuple(data["rows"]), tuple(data["dim"]), tuple(data["batch"]))

    def union(self, other: Optional["FittedRange"]) -> "FittedRange":
        if other is None:
            return self
        pairs = [(getattr(self, n), getattr(other, n)) for n in RANGE_FIELDS]
        return FittedRange(*((min(a[0], b[0]), max(a[1], b[1])) for a, b in pairs))  # type: ignore[arg-type]

    def outside(self, workload: "Workload", table: "Table") -> Optional[str]:
        """Why the table lies outside what was fitted (its whole-table kernel), or None. Tables
        smaller or lighter than every measured one are not outside: their costs are floors."""
        batch = workload.batch_size * workload.topology.world_size
        if table.pooling_factor > self.pooling[1]:
            return f"pooled {table.pooling_factor:g} per sample, fitted up to {self.pooling[1]:g}"
        if table.embedding_dim > self.dim[1] or table.embedding_dim < self.dim[0]:
            return f"dimension {table.embedding_dim}, fitted {self.dim[0]}-{self.dim[1]}"
        if table.num_embeddings > self.rows[1]:
            return f"{table.num_embeddings} rows, fitted up to {self.rows[1]}"
        if batch > self.batch[1]:
            return f"a global batch of {batch}, fitted up to {self.batch[1]}"
        return None


@dataclass(frozen=True)
class Provenance:
    """Whether a model was measured on the workload's target, in words, with the error it reported
    on held-out kernels of the machine it was fitted on (None: not fitted) and its fitted range."""

    measured_here: bool
    text: str
    held_out: Optional[float] = None
    fitted: Optional[FittedRange] = None


def calibration_provenance(trained_on: dict, hardware: str, workload: "Workload",
                           held_out: Optional[float], fitted: Optional[FittedRange]) -> Provenance:
    """A fitted model's provenance for ``workload``: a CPU model speaks for the CPU it was
    profiled on (its fingerprint, not its marketing name); a GPU model for the GPU kind it was
    profiled on."""
    topo = workload.topology
    if topo.compute_device == "cpu":
        from shardopt.profile.dataset import cpu_fingerprint

        was, here = trained_on.get("cpu_id"), cpu_fingerprint()
        if was and was == here:
            return Provenance(True, f"fitted on this CPU ({here})", held_out, fitted)
        return Provenance(False, f"fitted on CPU {was or 'unknown'}, planned on {here}", held_out, fitted)
    target = topo.hardware or "the default GPU"
    if hardware == topo.hardware:
        return Provenance(True, f"fitted on {hardware} ({trained_on.get('device_name', '?')})", held_out, fitted)
    return Provenance(False, f"fitted on {hardware}, planned for {target}", held_out, fitted)
