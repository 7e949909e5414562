"""TorchRec's ParameterConstraints and sharders, read as TorchRec reads them.

Every field has one fate, never a silent drop:
- it shapes the plan and becomes a field of the workload's table, which the search honours
  (``sharding_types`` and ``compute_kernels``, intersected with what the table's sharder can run;
  ``min_partition``; ``pooling_factors``; ``cache_params.load_factor``);
- the runtime needs it and it travels into the table's ParameterSharding (``cache_params``,
  ``enforce_hbm``, ``stochastic_rounding``, ``bounds_check_mode``, ``output_dtype``,
  ``key_value_params``);
- it has no effect on placement and shardopt says so here (``feature_names``: the model's own;
  ``is_weighted``: per-id weights add a multiply per id inside the pooled kernel, which shardopt's
  cost terms do not separate from the lookup);
- or shardopt cannot honour it and refuses it with the table's name (``num_poolings`` other than
  one per feature, ``batch_sizes`` other than the planner's, ``device_group`` other than the
  topology's device, ``use_virtual_table``, key-value kernels, ``grid_shard`` alone: among other
  sharding types it is left out, as a kernel shardopt does not plan is).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.workload import SHARDING_TYPES

KERNELS = ("fused", "fused_uvm", "fused_uvm_caching", "dense")
RUNTIME_FIELDS = ("cache_params", "enforce_hbm", "stochastic_rounding", "bounds_check_mode", "output_dtype",
                  "key_value_params")


class StrictConstraints(ShardoptError):
    """The table's constraints and its sharder's lists leave nothing shardopt can plan."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=ErrorKind.INFEASIBLE)


class DenseOnlyModelParallel(ShardoptError):
    """The table may only be cut model-parallel with the dense kernel, which TorchRec runs with
    data_parallel alone (its planner refuses any other pairing: INVALID_COMPUTE_KERNEL)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=ErrorKind.INFEASIBLE)


@dataclass
class TableRules:
    """What the constraints and the sharder make of one TorchRec table."""

    fields: dict = field(default_factory=dict)  # workload table fields the search honours
    runtime: dict = field(default_factory=dict)  # ParameterSharding keyword arguments
    restricted: bool = False  # the sharder or the constraints narrowed its sharding types or kernels
    # Model-parallel types the table may run only with the dense kernel, which TorchRec pairs with
    # data_parallel alone: planned as fused (same bytes, same lookups), then refused as TorchRec does.
    dense_only: list = field(default_factory=list)


def sharder_lists(sharder, device: str) -> tuple[list[str], dict[str, list[str]]]:
    """The sharding types a sharder runs on ``device``, and its compute kernels per type."""
    types = [str(t) for t in sharder.sharding_types(device)]
    return types, {t: [str(k) for k in sharder.compute_kernels(t, device)] for t in types}


def table_rules(constraint, sharder, device: str, batch_size: int, where: str) -> TableRules:
    """The table's fields, runtime fields and whether anything was narrowed (``where`` names it)."""
    rules = TableRules()
    types, kernels_by_type = sharder_lists(sharder, device) if sharder is not None else (list(SHARDING_TYPES), {})
    known_types = [t for t in types if t in SHARDING_TYPES]
    if constraint is not None and constraint.sharding_types:
        wanted = [str(t) for t in constraint.sharding_types]
        allowed = [t for t in known_types if t in wanted]
        if not allowed:
            unplanned = [t for t in wanted if t not in SHARDING_TYPES]
            raise StrictConstraints(
                f"{where}: constraints sharding_types {wanted} leave none that shardopt plans and its sharder"
                f" runs on {device} ({', '.join(t for t in types if t in SHARDING_TYPES) or 'none'})"
                + (f"; shardopt does not plan {', '.join(unplanned)}" if unplanned else "")
                + ("" if "grid_shard" not in unplanned else
                   " (for a table cut over a host's ranks allow table_row_wise; over columns, column_wise)"))
    else:
        allowed = known_types
    if not allowed:
        raise StrictConstraints(f"{where}: its sharder runs none of the sharding types shardopt plans ({types})")
    kernels = _kernels(constraint, allowed, kernels_by_type, where)
    dense_only = _dense_only(constraint, allowed, kernels_by_type)
    if dense_only and len(dense_only) < len(allowed):  # the types that run another kernel stay
        allowed = [t for t in allowed if t not in dense_only]
        kernels = _kernels(constraint, allowed, kernels_by_type, where)
    elif dense_only:
        rules.dense_only = dense_only
        kernels = sorted(set(kernels or ()) | {"fused"}, key=KERNELS.index)
    if set(allowed) != set(SHARDING_TYPES):
        rules.fields["sharding_types"] = allowed
    if kernels is not None:
        rules.fields["compute_kernels"] = kernels
    rules.restricted = bool(constraint is not None and (constraint.sharding_types or constraint.compute_kernels)) \
        or (sharder is not None and (set(known_types) != set(SHARDING_TYPES) or kernels is not None))
    if constraint is None:
        return rules
    _refuse_unplannable(constraint, device, batch_size, where)
    if constraint.min_partition:
        rules.fields["min_partition"] = int(constraint.min_partition)
    if constraint.pooling_factors:
        rules.fields["pooling_factor"] = float(sum(constraint.pooling_factors))
    cache = constraint.cache_params
    if cache is not None and cache.load_factor is not None:
        rules.fields["cache_load_factor"] = float(cache.load_factor)
    for name in RUNTIME_FIELDS:
        value = getattr(constraint, name)
        if value is not None:
            rules.runtime[name] = value
    return rules


def _dense_only(constraint, allowed: list[str], kernels_by_type: dict) -> list[str]:
    """The model-parallel types among ``allowed`` whose only kernel here is dense."""
    wanted = {str(k) for k in constraint.compute_kernels} if constraint is not None and constraint.compute_kernels else None
    out = []
    for t in allowed:
        offered = set(kernels_by_type.get(t, KERNELS)) & set(KERNELS)
        if t != "data_parallel" and (offered & wanted if wanted is not None else offered) == {"dense"}:
            out.append(t)
    return out


def _kernels(constraint, allowed: list[str], kernels_by_type: dict, where: str) -> Optional[list[str]]:
    """The compute kernels allowed, or None when every kernel shardopt plans is."""
    offered = None
    if kernels_by_type:
        offered = {k for t in allowed for k in kernels_by_type.get(t, []) if k in KERNELS}
    if constraint is not None and constraint.compute_kernels:
        wanted = [str(k) for k in constraint.compute_kernels]
        unknown = [k for k in wanted if k not in KERNELS]
        chosen = {k for k in wanted if k in KERNELS and (offered is None or k in offered)}
        if not chosen:
            raise StrictConstraints(
                f"{where}: constraints compute_kernels {wanted} leave none that shardopt plans and its"
                f" sharder runs ({', '.join(sorted(offered)) if offered is not None else ', '.join(KERNELS)})"
                + (f"; shardopt does not plan {', '.join(unknown)}" if unknown else ""))
        offered = chosen
    if offered is None or offered >= set(KERNELS):
        return None
    if not offered:
        raise StrictConstraints(f"{where}: its sharder runs none of the compute kernels shardopt plans")
    return sorted(offered, key=KERNELS.index)


def _refuse_unplannable(constraint, device: str, batch_size: int, where: str) -> None:
    """Fields shardopt cannot honour: one line each, naming the table."""
    if constraint.num_poolings and any(float(n) != 1.0 for n in constraint.num_poolings):
        raise ShardoptError(
            f"{where}: constraints num_poolings {list(constraint.num_poolings)}: shardopt models one pooled"
            " output per feature; plan this table with EmbeddingShardingPlanner or drop num_poolings")
    if constraint.batch_sizes and any(int(b) != batch_size for b in constraint.batch_sizes):
        raise ShardoptError(
            f"{where}: constraints batch_sizes {list(constraint.batch_sizes)}: shardopt plans one batch size"
            f" for every feature ({batch_size}); pass that batch size or drop batch_sizes")
    if constraint.device_group is not None and str(constraint.device_group) != device:
        raise ShardoptError(
            f"{where}: constraints device_group {constraint.device_group!r}: shardopt plans every table on the"
            f" topology's device ({device})")
    if getattr(constraint, "use_virtual_table", False):
        raise ShardoptError(f"{where}: constraints use_virtual_table: shardopt does not plan virtual (key-value)"
                            " tables")
