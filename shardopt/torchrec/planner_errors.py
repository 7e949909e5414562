"""No plan, said as TorchRec says it: a PlannerError with TorchRec's error type, the reason in
shardopt's words (tables named as the model names them) and possible solutions with numbers."""

from __future__ import annotations

from typing import Mapping, Optional

from torchrec.distributed.planner.types import PlannerError, PlannerErrorType

from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.units import format_bytes


class ShardoptPlannerError(PlannerError, ValueError):
    """TorchRec's PlannerError (catch it as such); also a ValueError, as shardopt's errors are."""

    def __init__(self, message: str, error_type: PlannerErrorType, solutions: tuple[str, ...] = ()) -> None:
        self.reason = message
        self.solutions = solutions
        text = message + (" Possible solutions: " + "; ".join(solutions) + "." if solutions else "")
        super().__init__(text, error_type)


def model_bytes(module, sharders) -> int:
    """Weights plus row-wise Adagrad state of every table the sharders shard, whole: what any plan
    must hold somewhere (read off the configs, so it works where a workload cannot be built)."""
    from shardopt.core.layout import typed_bytes
    from shardopt.torchrec.from_model import DATA_TYPES, _configs, _module_types, _sharder_of

    ebc_type, ec_type, _ = _module_types()
    total = 0
    for _, child in module.named_modules():
        if isinstance(child, (ebc_type, ec_type)) and _sharder_of(child, sharders) is not None:
            for c in _configs(child):
                dtype = DATA_TYPES.get(c.data_type.name, "fp32")
                total += typed_bytes("rowwise_adagrad", dtype, int(c.num_embeddings), int(c.embedding_dim))
    return total


def planner_error(
    exc: ShardoptError,
    *,
    need: Optional[int],
    hbm: int,
    ddr: int,
    reserved: int,
    restricted: Mapping[str, bool],
) -> Optional[ShardoptPlannerError]:
    """The PlannerError for a failure to plan, or None when ``exc`` is an input error instead.

    ``need``: bytes of all tables; ``hbm``/``ddr``: what the cluster holds after the reservation
    (``reserved`` bytes per rank); ``restricted``: per table, whether sharders or constraints
    narrowed its choices.
    """
    from shardopt.torchrec.constraints import StrictConstraints

    text = str(exc)
    capacity = hbm + ddr
    room = (f"the tables need {format_bytes(need)} (weights and optimizer state); the cluster holds"
            f" {format_bytes(hbm)} of memory for tables (HBM, or DRAM on CPU ranks)" + (f" and {format_bytes(ddr)} of host memory for UVM" if ddr else "")
            + f" after reserving {format_bytes(reserved)} per rank") if need is not None else ""
    insufficient = ShardoptPlannerError(
        f"shardopt: no plan fits: {room or text}.", PlannerErrorType.INSUFFICIENT_STORAGE,
        ("add ranks or memory per rank", "use a smaller storage_reservation",
         "allow fused_uvm_caching or fused_uvm (host memory) in compute_kernels"))
    if isinstance(exc, StrictConstraints):
        return ShardoptPlannerError(f"shardopt: {text}.", PlannerErrorType.STRICT_CONSTRAINTS,
                                    ("widen the table's sharding_types or compute_kernels",
                                     "pass sharders that run more sharding types"))
    if "more than the whole cluster" in text:
        return insufficient
    if exc.kind != ErrorKind.INFEASIBLE:
        return None  # a field the model or the options got wrong: the input error itself
    if exc.details:  # the smallest conflicting set of requirements, with its numbers and fixes
        import re

        fixes = tuple(m.group(1) for d in exc.details if (m := re.search(r"\(to relax: (.*)\)$", d)))
        return ShardoptPlannerError(f"shardopt: no plan fits: {text.split(': ', 1)[-1]}.",
                                    PlannerErrorType.STRICT_CONSTRAINTS, fixes + ("add ranks or memory per rank",))
    if need is not None and need > capacity:
        return insufficient
    narrowed = sorted(name for name, r in restricted.items() if r)
    solutions = [f"allow more sharding types (row_wise, column_wise) for {', '.join(repr(n) for n in narrowed[:5])}"
                 if narrowed else "allow row_wise or column_wise sharding", "add ranks or memory per rank"]
    kind = PlannerErrorType.STRICT_CONSTRAINTS if narrowed else PlannerErrorType.PARTITION
    return ShardoptPlannerError(f"shardopt: no plan fits: {text.split(': ', 1)[-1]}" + (f" ({room})" if room else "")
                                + ".", kind, tuple(solutions))
