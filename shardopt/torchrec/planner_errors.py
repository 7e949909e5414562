"""No plan, said as TorchRec says it: a PlannerError with TorchRec's error type, the reason in
shardopt's words (tables named as the model names them) and possible solutions with numbers."""

from __future__ import annotations

from typing import Mapping, Optional

from torchrec.distributed.planner.types import PlannerError, PlannerErrorType

from shardopt.arithmetic.checks import UVM_KERNELS
from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.units import format_bytes


class ShardoptPlannerError(PlannerError, ValueError):
    """TorchRec's PlannerError (catch it as such); also a ValueError, as shardopt's errors are."""

    def __init__(self, message: str, error_type: PlannerErrorType, solutions: tuple[str, ...] = ()) -> None:
        self.reason = message
        self.solutions = solutions
        text = message + (" Possible solutions: " + "; ".join(solutions) + "." if solutions else "")
        super().__init__(text, error_type)


class ShardoptConstraintsError(ShardoptPlannerError, RuntimeError):
    """Constraints that leave a table no sharding type and kernel: where TorchRec's enumerator
    raises a RuntimeError, so ``except RuntimeError`` still catches it (and ``except PlannerError``)."""


def storage_need(module, sharders, constraints=None, device: str = "cuda", world_size: int = 1) -> tuple[int, int]:
    """The least any plan must hold: (bytes that must sit in HBM, bytes in all), weights plus
    row-wise Adagrad state, each table whole (``world_size`` copies where data-parallel is all it
    may be). A table goes to host memory only where its sharder and constraints allow a UVM kernel
    on a GPU, as TorchRec's proposals do (read off the configs: it works where no workload can be
    built)."""
    from shardopt.core.layout import typed_bytes
    from shardopt.torchrec.constraints import sharder_lists
    from shardopt.torchrec.from_model import DATA_TYPES, _configs, _module_types, _sharder_of

    ebc_type, ec_type, _ = _module_types()
    hbm = total = 0
    for _, child in module.named_modules():
        sharder = _sharder_of(child, sharders) if isinstance(child, (ebc_type, ec_type)) else None
        if sharder is None:
            continue
        types, kernels = sharder_lists(sharder, device)
        for c in _configs(child):
            constraint = (constraints or {}).get(c.name)
            allowed = [t for t in types if not (constraint and constraint.sharding_types)
                       or t in [str(x) for x in constraint.sharding_types]]
            offered = {k for t in allowed for k in kernels.get(t, [])}
            if constraint is not None and constraint.compute_kernels:
                offered &= {str(k) for k in constraint.compute_kernels}
            copies = world_size if allowed == ["data_parallel"] else 1
            size = copies * typed_bytes("rowwise_adagrad", DATA_TYPES.get(c.data_type.name, "fp32"),
                                        int(c.num_embeddings), int(c.embedding_dim))
            total += size
            if not (device == "cuda" and offered & set(UVM_KERNELS)):
                hbm += size
    return hbm, total


def planner_error(
    exc: ShardoptError,
    *,
    need: Optional[tuple[int, int]],
    hbm: int,
    ddr: int,
    reserved: int,
    restricted: Mapping[str, bool],
) -> Optional[ShardoptPlannerError]:
    """The PlannerError for a failure to plan, or None when ``exc`` is an input error instead.

    ``need``: :func:`storage_need`'s (HBM, all) bytes; ``hbm``/``ddr``: what the cluster holds
    after the reservation (``reserved`` bytes per rank); ``restricted``: per table, whether
    sharders or constraints narrowed its choices. TorchRec's rule decides the type: storage when
    no allowed kernel lets the tables fit the cluster's memory in all (HBM, then HBM and host
    memory together), constraints when they would fit but the constraints or the placement forbid
    every plan.
    """
    from shardopt.torchrec.constraints import StrictConstraints

    text = str(exc)
    need_hbm, need_all = need if need is not None else (0, 0)
    never_fits = need is not None and (need_hbm > hbm or need_all > hbm + ddr)
    in_hbm = f", {format_bytes(need_hbm)} of it where no UVM kernel is allowed" if 0 < need_hbm < need_all else ""
    room = (f"the tables need {format_bytes(need_all)} (weights and optimizer state{in_hbm}); the cluster holds"
            f" {format_bytes(hbm)} of memory for tables (HBM, or DRAM on CPU ranks)" + (f" and {format_bytes(ddr)} of host memory for UVM" if ddr else "")
            + f" after reserving {format_bytes(reserved)} per rank") if need is not None else ""
    insufficient = ShardoptPlannerError(
        f"shardopt: no plan fits: {room or text}.", PlannerErrorType.INSUFFICIENT_STORAGE,
        ("add ranks or memory per rank", "use a smaller storage_reservation")
        + (("allow fused_uvm_caching or fused_uvm (host memory) in the sharders and compute_kernels",)
           if ddr and (need is None or need_hbm) else ()))
    if isinstance(exc, StrictConstraints):
        return ShardoptConstraintsError(f"shardopt: {text}.", PlannerErrorType.STRICT_CONSTRAINTS,
                                        ("widen the table's sharding_types or compute_kernels",
                                         "pass sharders that run more sharding types"))
    if "more than the whole cluster" in text or (never_fits and exc.kind == ErrorKind.INFEASIBLE):
        return insufficient

    if exc.kind != ErrorKind.INFEASIBLE:
        return None  # a field the model or the options got wrong: the input error itself
    if exc.details:  # the smallest conflicting set of requirements, with its numbers and fixes
        import re

        fixes = tuple(m.group(1) for d in exc.details if (m := re.search(r"\(to relax: (.*)\)$", d)))
        return ShardoptPlannerError(f"shardopt: no plan fits: {text.split(': ', 1)[-1]}.",
                                    PlannerErrorType.STRICT_CONSTRAINTS, fixes + ("add ranks or memory per rank",))
    narrowed = sorted(name for name, r in restricted.items() if r)
    solutions = [f"allow more sharding types (row_wise, column_wise) for {', '.join(repr(n) for n in narrowed[:5])}"
                 if narrowed else "allow row_wise or column_wise sharding", "add ranks or memory per rank"]
    return ShardoptPlannerError(f"shardopt: no plan fits: {text.split(': ', 1)[-1]}" + (f" ({room})" if room else "")
                                + ".", PlannerErrorType.STRICT_CONSTRAINTS, tuple(solutions))
