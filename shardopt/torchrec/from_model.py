"""A TorchRec model as a shardopt workload: its tables, TorchRec's Topology, constraints, batch.

Every EmbeddingBagCollection and EmbeddingCollection in the model (nested anywhere) contributes
its tables; an EmbeddingCollection's are sequence (unpooled) tables. What shardopt cannot model is
refused with one line rather than planned wrongly: feature processors, dimensions FBGEMM's TBE
refuses, data types it has no kernel for. ``Origin`` remembers which module and table each workload table came from, so a plan
goes back to TorchRec under the right module paths.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional, Sequence

from shardopt.core.errors import FieldError, ShardoptError
from shardopt.core.workload import Workload, workload_from_dict

logger = logging.getLogger(__name__)

DATA_TYPES = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16", "INT8": "int8"}


class NoTables(ShardoptError):
    """The sharders shard none of the model's tables (TorchRec then plans nothing)."""


@dataclass(frozen=True)
class Origin:
    """Where a workload table lives in the model, and what its ParameterSharding must carry."""

    module_path: str  # "" for the root module, as TorchRec keys its ShardingPlan
    table: str
    # ParameterSharding fields from the table's constraints (cache_params, enforce_hbm, ...).
    runtime: dict = field(default_factory=dict, compare=False, hash=False)
    # The sharder or the constraints narrowed what the table may be (for PlannerError's type).
    restricted: bool = field(default=False, compare=False, hash=False)
    # Model-parallel types it may run only with the dense kernel (constraints.TableRules.dense_only).
    dense_only: list = field(default_factory=list, compare=False, hash=False)


def dense_only_message(dense) -> str:
    """One line naming the tables (``(name, Origin)`` pairs) that may be cut only with dense."""
    name, origin = dense[0]
    more = f" (and {len(dense) - 1} more tables)" if len(dense) > 1 else ""
    return (f"TorchRec table {origin.table!r} (module {origin.module_path or '(root)'}){more}:"
            f" {', '.join(origin.dense_only)} may run only the dense kernel here, which TorchRec runs with"
            " data_parallel alone; offer fused (or fused_uvm, fused_uvm_caching) for them, or data_parallel")


def _module_types():
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
    from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection

    return EmbeddingBagCollection, EmbeddingCollection, FeatureProcessedEmbeddingBagCollection


def workload_from_module(
    module,
    topology,
    batch_size: int,
    constraints: Optional[dict] = None,
    sharders: Optional[list] = None,
    name: str = "torchrec-model",
    access: Optional[dict] = None,
    hardware: Optional[str] = None,
    placement: Sequence[dict] = (),
    dense_trial: bool = False,
) -> tuple[Workload, dict[str, Origin]]:
    """The model's embedding tables as a workload, and each table's origin. ``access`` is the
    access distribution assumed for every table (a TorchRec model carries no statistics), e.g.
    ``{"distribution": "zipf", "alpha": 1.05}``; None: uniform. ``hardware``: the GPUs' hardware
    profile (h100, h200, a100); None: the GPU this process sees, else the cuda default.
    ``placement``: shardopt's placement rules (docs/formats.md), naming tables as the workload
    does (TorchRec has no such constraint). A table whose model-parallel types may run only the
    dense kernel (TorchRec runs it with data_parallel alone) is refused after every table was read
    (DenseOnlyModelParallel), or with ``dense_trial`` planned as fused and named in its origin, so
    the planner can refuse it where TorchRec's would: after a plan was found."""
    ebc_type, ec_type, fp_type = _module_types()
    constraints = constraints or {}
    found: list[tuple[str, object, object]] = []  # (path, module, its sharder or None)
    in_model: set[str] = set()  # every EmbeddingBagCollection table, sharded here or not
    skip_under: list[str] = []
    for path, child in module.named_modules():
        if any(path == p or path.startswith(p + ".") for p in skip_under):
            continue
        if isinstance(child, fp_type):
            raise ShardoptError(
                f"module {path or '(root)'}: FeatureProcessedEmbeddingBagCollection: shardopt does not"
                " model feature processors; plan this model with TorchRec's EmbeddingShardingPlanner"
            )
        if isinstance(child, (ebc_type, ec_type)):
            skip_under.append(path)
            in_model.update(config.name for config in _configs(child))
            sharder = _sharder_of(child, sharders)
            if sharders is None or sharder is not None:
                found.append((path, child, sharder))
    tables, origins, seen = [], {}, {}
    for path, ebc, _ in found:
        for config in _configs(ebc):
            seen.setdefault(config.name, []).append(path)
    _refuse_unknown_constraints(constraints, in_model)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ShardoptError(f"batch_size: must be a positive integer, got {batch_size!r}")
    topo = _topology(topology, hardware)
    for path, ebc, sharder in found:
        for config in _configs(ebc):
            table_name = config.name if len(seen[config.name]) == 1 else f"{path}.{config.name}"
            table, rules = _table(config, table_name, constraints.get(config.name), path, sharder,
                                  topo["compute_device"], int(batch_size))
            if isinstance(ebc, ec_type):
                table["pooled"] = False  # sequence embeddings: a row per id goes back to its sample
            if access is not None:
                table["access"] = access
            origins[table_name] = Origin(path, config.name, rules.runtime, rules.restricted, rules.dense_only)
            tables.append(table)
    dense = [(name, o) for name, o in origins.items() if o.dense_only]
    if dense and not dense_trial:
        from shardopt.torchrec.constraints import DenseOnlyModelParallel

        raise DenseOnlyModelParallel(dense_only_message(dense))
    data = {"version": 1, "name": name, "batch_size": int(batch_size), "topology": topo, "tables": tables}
    if placement:
        data["placement"] = [dict(rule) for rule in placement]
    if not tables:
        raise NoTables("the model holds no embedding tables that a sharder shards")
    labels = []
    for table in tables:
        origin = origins[table["name"]]
        labels.append(f"TorchRec table {origin.table!r} (module {origin.module_path or '(root)'})")
    return workload_from_torchrec(data, labels), origins


def _refuse_unknown_constraints(constraints: dict, in_model: set) -> None:
    """A constraint on a table no sharder shards is ignored, as TorchRec does; one on a name the
    model lacks is a typo that would silently drop the user's constraint."""
    unknown = sorted(set(constraints) - in_model)
    if unknown:
        import difflib

        hint = difflib.get_close_matches(str(unknown[0]), sorted(in_model), n=1)
        raise ShardoptError(
            f"constraints[{unknown[0]!r}]: the model has no table of that name"
            + (f"; did you mean {hint[0]!r}?" if hint else f" (tables: {', '.join(sorted(in_model)[:8])})")
        )


def workload_from_torchrec(data: dict, table_labels: list[str]) -> Workload:
    """``workload_from_dict`` for data built from TorchRec objects: an error names the TorchRec
    table (``table_labels[i]`` for ``tables[i]``) or Topology field, not a file the user never wrote."""
    import re

    try:
        return workload_from_dict(data)
    except FieldError as exc:
        match = re.match(r"tables\[(\d+)\](.*)", exc.path)
        if match and int(match.group(1)) < len(table_labels):
            where = f"{table_labels[int(match.group(1))]}: {match.group(2).lstrip('.') or 'config'}"
        elif exc.path.startswith("topology."):
            where = f"Topology.{exc.path.split('.', 1)[1]}"
        else:
            where = exc.path
        raise exc.reworded(where) from None


def _configs(module):
    """The table configs of an EmbeddingBagCollection or an EmbeddingCollection."""
    ebc_type = _module_types()[0]
    return module.embedding_bag_configs() if isinstance(module, ebc_type) else module.embedding_configs()


def _sharder_of(module, sharders):
    """The sharder TorchRec would use for ``module`` (its exact type first), or None."""
    if not sharders:
        return None
    exact = [s for s in sharders if type(module) is s.module_type]
    return (exact or [s for s in sharders if isinstance(module, s.module_type)] or [None])[0]


def _table(config, table_name: str, constraint, path: str, sharder, device: str, batch_size: int):
    from shardopt.torchrec.constraints import table_rules

    where = f"TorchRec table {config.name!r} (module {path or '(root)'})"
    if config.embedding_dim % 4:
        raise ShardoptError(
            f"{where}: embedding_dim {config.embedding_dim} is not a multiple of 4, which FBGEMM's"
            " table-batched embedding kernels require"
        )
    dtype = DATA_TYPES.get(config.data_type.name)
    if dtype is None:
        raise ShardoptError(f"{where}: data_type {config.data_type.name} has no FBGEMM training kernel")
    features = list(config.feature_names) or [config.name]
    table = {
        "name": table_name, "num_embeddings": int(config.num_embeddings),
        "embedding_dim": int(config.embedding_dim), "data_type": dtype, "feature_names": features,
        # TorchRec's default pooling factor is 1.0 per feature; a sample looks the table up once per feature.
        "pooling_factor": float(len(features)),
    }
    rules = table_rules(constraint, sharder, device, batch_size, where)
    table.update(rules.fields)
    if table["pooling_factor"] <= 0:
        raise ShardoptError(f"{where}: pooling_factors must add up to more than 0")
    return table, rules


def local_gpu_hardware() -> Optional[str]:
    """The hardware profile of the GPU this process sees, if shardopt has one (TorchRec's Topology
    does not say which GPU the cluster has; the planner usually runs on one of its hosts)."""
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name().upper()
    return next((profile for key, profile in (("H200", "h200"), ("H100", "h100"), ("A100", "a100"))
                 if key in name), None)


def _topology(topology, hardware: Optional[str] = None) -> dict:
    """TorchRec's Topology as the workload's topology: storage per rank (the smallest, when
    ranks differ), ranks per host, the links when the user declared them, and the GPUs' hardware
    profile (``hardware``, else the local GPU's)."""
    from torchrec.distributed.planner.constants import CROSS_NODE_BANDWIDTH, INTRA_NODE_BANDWIDTH

    device = topology.compute_device
    if device not in ("cuda", "cpu"):
        raise ShardoptError(f"topology.compute_device: shardopt plans cuda or cpu, got {device!r}")
    ddr = min(int(d.storage.ddr) for d in topology.devices)
    per_rank = [table_storage(d.storage, device) for d in topology.devices]
    # Ranks with less room (a custom topology, or a reservation that differs per rank) keep their
    # own: the most common storage is the topology's, the rest are listed per rank.
    tables = max(set(per_rank), key=lambda v: (per_rank.count(v), v))
    unlike = sorted({v for v in per_rank if v != tables})
    local = topology.local_world_size
    out = {"world_size": topology.world_size, "local_world_size": local, "compute_device": device}
    if device == "cuda" and (hardware := hardware or local_gpu_hardware()):
        out["hardware"] = hardware
        logger.info("planning for hardware profile %s", hardware)
    out["hbm_cap"] = tables
    if unlike:
        out["ranks"] = [{"ranks": [r for r, v in enumerate(per_rank) if v == cap], "hbm_cap": cap} for cap in unlike]
        logger.info("ranks differ in storage: %d rank(s) plan with their own", len(per_rank) - per_rank.count(tables))
    if device == "cuda" and ddr:
        out["ddr_cap"] = ddr * local
    # TorchRec's bandwidths are bytes per ms; shardopt's GB/s. Its defaults say nothing about the
    # cluster (the hardware profile's links stand then); a value the user set is the cluster's.
    intra, inter = float(topology.intra_host_bw), float(topology.inter_host_bw)
    if intra != INTRA_NODE_BANDWIDTH:
        out["intra_host_bw"] = intra * 1e3 / 1e9
    if inter != CROSS_NODE_BANDWIDTH:
        out["inter_host_bw"] = inter * 1e3 / 1e9
    return out


def table_storage(storage, device: str) -> int:
    """The bytes of a TorchRec device's Storage that hold tables: HBM on a GPU, DRAM on a CPU rank."""
    return int(storage.hbm if device == "cuda" else storage.ddr)


def torchrec_topology(workload: Workload):
    """The workload's topology as TorchRec's Topology (the reverse of :func:`_topology`)."""
    from torchrec.distributed.planner.types import Topology

    topo = workload.topology
    caps = {"hbm_cap": topo.hbm_cap} if topo.compute_device == "cuda" else {"ddr_cap": topo.hbm_cap}
    if topo.compute_device == "cuda" and topo.ddr_cap:
        caps["ddr_cap"] = topo.ddr_cap // topo.ranks_per_host
    return Topology(world_size=topo.world_size, compute_device=topo.compute_device,
                    local_world_size=topo.ranks_per_host, **caps)
