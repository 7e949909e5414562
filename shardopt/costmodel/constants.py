"""The constants a calibration fits: the analytic model's, per kernel algorithm, with what they speak for."""

from __future__ import annotations

from dataclasses import dataclass

from shardopt.costmodel.comm_curve import CommCurves
from shardopt.costmodel.provenance import FittedRange
from shardopt.costmodel.table_factors import TableFactor


@dataclass(frozen=True)
class KernelConstants:
    """One kernel algorithm's constants: seconds per unit of each term (``FWD_TERMS``,
    ``BWD_TERMS``) and per kernel call."""

    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    fwd_kernel_s: float
    bwd_kernel_s: float


@dataclass(frozen=True)
class Calibration:
    """Coefficients fitted to a profile: seconds per unit of each term, per-kernel overheads,
    and all-to-all alpha (seconds per collective) and beta (seconds per byte) per world size."""

    hardware: str
    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    fwd_kernel_s: float
    bwd_kernel_s: float
    comm: dict[int, tuple[float, float]]
    trained_on: dict
    # The measured all-to-all curves themselves: a rank's whole-plan comm is read off them (the
    # alpha + beta line above is the additive estimate a search uses per shard).
    comm_curves: CommCurves | None = None
    # The last-level cache a rank keeps, fitted with the constants (None: the hardware profile's).
    llc_bytes: int | None = None
    # The per-table shapes the constants were fitted on (None: unknown, as in older files).
    fitted: FittedRange | None = None
    # Per-table corrections fitted to one workload's measured ranks (calibrate --workload).
    table_factors: tuple[TableFactor, ...] = ()
    # Data-parallel replicas' dense kernel, fitted to its own points (None: priced with the fused
    # kernel's constants, as older files are). Another algorithm: on the packaged model's CPU the
    # fused constants priced it 0.82x forward and 2.05x backward of what it measured.
    dense: KernelConstants | None = None

    def kernel_constants(self, dense: bool = False) -> KernelConstants:
        """The constants of the fused kernel, or (``dense``) of replicas' where fitted."""
        if dense and self.dense is not None:
            return self.dense
        return KernelConstants(self.fwd, self.bwd, self.fwd_kernel_s, self.bwd_kernel_s)
