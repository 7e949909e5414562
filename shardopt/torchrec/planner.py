"""shardopt inside TorchRec: a drop-in for EmbeddingShardingPlanner.

    planner = ShardoptPlanner(topology=topology, batch_size=512, constraints=constraints)
    plan = planner.collective_plan(model, sharders, pg)          # as with EmbeddingShardingPlanner
    model = DistributedModelParallel(model, plan=plan, ...)

It takes EmbeddingShardingPlanner's keywords. Storage is reserved first, with TorchRec's own
StorageReservation (its default unless one is given), and the plan never exceeds what is left. The
model's tables, the sharders' lists and every ParameterConstraints field become a workload (see
``constraints.py`` for each field's fate), planned with the CP-SAT search over cuts TorchRec runs;
the ShardingPlan carries the constraints' runtime fields. No plan is a PlannerError with TorchRec's
error type; at INFO (``debug=True``, TorchRec's default) a stats table is logged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from torchrec.distributed.planner.types import ParameterConstraints, Topology
from torchrec.distributed.types import ShardingPlan, ShardingPlanner

from shardopt.contracts import DEFAULT_TIME_LIMIT_S, PlanConfig
from shardopt.core.errors import ShardoptError
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload
from shardopt.torchrec.estimator import ShardoptEstimator  # noqa: F401 - shardopt.torchrec exports it
from shardopt.torchrec.from_model import NoTables, Origin, table_storage, workload_from_module
from shardopt.torchrec.sharding_plan import to_sharding_plan

logger = logging.getLogger(__name__)
# EmbeddingShardingPlanner's parts that shardopt's candidates and search replace.
REPLACED = {"enumerator": "shardopt enumerates its own candidates (a plan_loader's context is hashed with it)",
            "proposer": "CP-SAT searches instead",
            "partitioner": "CP-SAT places shards", "performance_model": "shardopt's cost model scores plans",
            "stats": "shardopt logs its own stats table", "callbacks": "there are no sharding options to edit"}
HEURISTIC_RESERVATION = 0.15  # TorchRec's default share of each device kept for everything else


class ShardoptPlanner(ShardingPlanner):
    """TorchRec's ShardingPlanner, planned by shardopt (``last_plan`` keeps shardopt's own Plan)."""

    def __init__(
        self,
        topology: Optional[Topology] = None,
        batch_size: Optional[int] = None,
        enumerator=None,
        storage_reservation=None,
        proposer=None,
        partitioner=None,
        performance_model=None,
        stats=None,
        constraints: Optional[Dict[str, ParameterConstraints]] = None,
        debug: bool = True,
        callbacks=None,
        timeout_seconds: Optional[int] = None,
        plan_loader=None,
        *,
        cost_model: str = "analytic",
        time_limit_s: Optional[float] = None,
        search: str = "ilp",
        objective: str = "critical-path",
        plan_file: Optional[str] = None,
        access: Optional[dict] = None,
        hardware: Optional[str] = None,
        placement: Sequence[dict] = (),
        robust: str = "auto",
        sharding_group_size=None,
        sync_every: int = 1,
        sharding_strategy="default",
        use_inter_host_allreduce: bool = False,
        batches=None,
        stats_batches: int = 100,
        **unknown,
    ) -> None:
        if unknown:
            raise TypeError(f"ShardoptPlanner got unexpected keyword arguments {', '.join(sorted(unknown))}")
        given = {"enumerator": enumerator, "proposer": proposer, "partitioner": partitioner,
                 "performance_model": performance_model, "stats": stats, "callbacks": callbacks}
        for name in sorted(k for k, v in given.items() if v is not None):
            logger.warning("ShardoptPlanner ignores %s: %s", name, REPLACED[name])
        if time_limit_s is None:
            time_limit_s = float(timeout_seconds) if timeout_seconds else DEFAULT_TIME_LIMIT_S
        _check_options(batch_size, time_limit_s, search, objective, cost_model, hardware, robust)
        # 2D sparse parallelism (DMPCollection): ``topology`` is the whole world; the plan is one
        # sharding group's (ranks 0..G-1), as DMPCollection(plan=..., sharding_group_size=G) takes it.
        self.parallelism = _parallelism(sharding_group_size, sync_every, sharding_strategy, use_inter_host_allreduce)
        # Statistics from the user's batches (KeyedJaggedTensors, as the dataloader yields them):
        # pooling and access per table, measured once on the first plan (shardopt.traces.batches).
        if batches is not None and not hasattr(batches, "__iter__"):
            raise ShardoptError(f"ShardoptPlanner batches: must be an iterable of KeyedJaggedTensors,"
                                f" got {type(batches).__name__}")
        if isinstance(stats_batches, bool) or not isinstance(stats_batches, int) or stats_batches <= 0:
            raise ShardoptError(f"ShardoptPlanner stats_batches: must be a positive integer, got {stats_batches!r}")
        self.batches, self.stats_batches = batches, stats_batches
        self.measured: Optional[dict] = None
        self.topology, self.batch_size = topology, batch_size
        self.constraints = constraints
        self.storage_reservation = storage_reservation
        # TorchRec's stored plans: loaded as EmbeddingShardingPlanner loads them (plan_loading.py).
        _check_loader(plan_loader, plan_file, sharding_group_size)
        self.plan_loader, self.enumerator = plan_loader, enumerator
        # The last plan's StorageReservation and (module, sharders, topology, batch size): the context hash's.
        self._reservation, self._context = None, None
        self.debug = debug
        self.plan_file = plan_file
        self.access = access  # the skew assumed for tables (TorchRec models carry no statistics)
        self.hardware = hardware  # the GPUs' profile (h100, h200, a100); None: the local GPU's
        self.placement = tuple(placement)  # shardopt's rules (pin, colocate, apart): docs/formats.md
        self.cost_model = cost_model
        self.time_limit_s = time_limit_s
        self.search = search
        self.objective = objective  # "critical-path" or "bottleneck" (shardopt.contracts)
        # TorchRec runs only the cuts its sharders know: the plugin plans with TorchRec's candidates.
        # robust: "auto" (the step under the model's doubt where it was not measured on this target),
        # "on" or "off" (shardopt.costmodel.uncertainty).
        self.config = PlanConfig(search=search, time_limit_s=float(time_limit_s), candidates="torchrec",
                                 objective=objective, cost_model=cost_model, robust=robust)
        self.last_plan: Optional[Plan] = None
        self.last_workload: Optional[Workload] = None
        self.last_origins: Optional[dict[str, Origin]] = None
        self.last_stats: Optional[str] = None

    def _topology(self) -> Topology:
        if self.topology is not None:
            return self.topology
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError("ShardoptPlanner needs a topology, or an initialised process group to build one")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return Topology(world_size=dist.get_world_size(), compute_device=device)

    def _reserve(self, topology: Topology, batch_size: int, module, sharders) -> Topology:
        """The topology less TorchRec's storage reservation (dense parameters, activations, KJTs)."""
        from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation

        if self._reservation is None:
            self._reservation = self.storage_reservation or HeuristicalStorageReservation(percentage=HEURISTIC_RESERVATION)
        return self._reservation.reserve(topology, batch_size, module, sharders, self.constraints)

    def plan(self, module, sharders=None) -> ShardingPlan:
        """Plan on this process alone. ``sharders`` default to TorchRec's; none give an empty plan."""
        from torchrec.distributed.planner.constants import BATCH_SIZE
        from torchrec.distributed.sharding_plan import get_default_sharders

        sharders = get_default_sharders() if sharders is None else list(sharders)
        if not sharders:
            return ShardingPlan({})
        topology = self._topology()
        batch_size = self.batch_size or BATCH_SIZE
        reserved = self._reserve(topology, batch_size, module, sharders)
        self._context = (module, sharders, topology, batch_size)
        try:
            workload, origins = workload_from_module(module, reserved, batch_size, self.constraints, sharders,
                                                     access=self.access, hardware=self.hardware,
                                                     placement=self.placement, dense_trial=True)
        except NoTables:
            return ShardingPlan({})
        except ShardoptError as exc:
            raise self._error(exc, module, sharders, topology, reserved, {}) from None
        if self.batches is not None:
            workload = self._with_measured(workload)
        if self.parallelism is not None:
            workload = _in_groups(workload, self.parallelism)
        plan = self._plan_or_load(workload, origins, module, sharders, topology, reserved)
        _refuse_dense_model_parallel(origins)
        self.last_plan, self.last_workload, self.last_origins = plan, workload, origins
        from shardopt.arithmetic.checks import planned_workload

        group = planned_workload(workload, plan)
        self._log_stats(group, plan, topology, reserved)
        return to_sharding_plan(plan, group, origins)

    def _with_measured(self, workload: Workload) -> Workload:
        """The model's workload with the pooling and access its batches show (measured once)."""
        from shardopt.core.workload import workload_from_dict
        from shardopt.traces.batches import measure_batches
        from shardopt.traces.to_workload import workload_with_batch_stats

        if self.measured is None:
            tables = {f: (t.name, t.num_embeddings) for t in workload.tables for f in t.features}
            self.measured = measure_batches(self.batches, tables, limit=self.stats_batches,
                                            source="ShardoptPlanner batches")
        return workload_from_dict(workload_with_batch_stats(workload, self.measured), "ShardoptPlanner batches")

    def _plan_or_load(self, workload, origins, module, sharders, topology, reserved) -> Plan:
        from shardopt.planner import plan_with, resolve_model

        if self.plan_file is not None:
            return _load_plan(self.plan_file, workload)
        model, warnings = resolve_model(self.config, workload)
        for warning in warnings:
            logger.warning(warning)
        if self.plan_loader is not None:
            from shardopt.torchrec.plan_loading import load_stored_plan, scored

            loaded = load_stored_plan(self.plan_loader, module=module, sharders=sharders, topology=topology,
                                      batch_size=self._context[3], enumerator=self._enumerator(),
                                      reservation=self._reservation, constraints=self.constraints,
                                      workload=workload, origins=origins,
                                      score=lambda plan: scored(plan, workload, model))
            if loaded is not None:
                return loaded
        try:
            return plan_with(workload, self.config, cost_model=model, source="TorchRec model")
        except ShardoptError as exc:
            restricted = {o.table: o.restricted for o in origins.values()}
            raise self._error(exc, module, sharders, topology, reserved, restricted) from None

    def _enumerator(self):
        """The user's enumerator, or the one EmbeddingShardingPlanner would build (kept for the hash)."""
        if self.enumerator is None:
            from shardopt.torchrec.plan_loading import default_enumerator

            _, _, topology, batch_size = self._context
            self.enumerator = default_enumerator(topology, batch_size, self.constraints)
        return self.enumerator

    def hash_planner_context_inputs_str(self) -> str:
        """TorchRec's planner context hash of the last ``plan()``: what a PlanLoader stores beside a
        plan (``plan_context_hash``), equal to EmbeddingShardingPlanner's for the same inputs."""
        from shardopt.torchrec.plan_loading import context_hash

        if self._context is None:
            raise ValueError("ShardoptPlanner: hash_planner_context_inputs_str needs a plan() first")
        module, sharders, topology, batch_size = self._context
        enumerator = self._enumerator()
        if getattr(enumerator, "last_stored_search_space", None) is None:
            enumerator.enumerate(module=module, sharders=sharders)
        return context_hash(topology, batch_size, enumerator, self._reservation, self.constraints)

    def _error(self, exc: ShardoptError, module, sharders, topology, reserved, restricted) -> Exception:
        from shardopt.torchrec.planner_errors import planner_error, storage_need

        device = topology.compute_device
        hbm = sum(table_storage(d.storage, device) for d in reserved.devices)
        ddr = sum(int(d.storage.ddr) for d in reserved.devices) if device == "cuda" else 0
        need = storage_need(module, sharders, self.constraints, device, topology.world_size)
        error = planner_error(exc, need=need, hbm=hbm, ddr=ddr,
                              reserved=_reserved_per_rank(topology, reserved), restricted=restricted)
        return error if error is not None else exc

    def _log_stats(self, workload: Workload, plan: Plan, topology: Topology, reserved: Topology) -> None:
        from shardopt.torchrec.stats import stats_text

        self.last_stats = stats_text(workload, plan, _reserved_per_rank(topology, reserved))
        if self.debug:
            logger.info("\n%s", self.last_stats)

    def collective_plan(self, module, sharders=None, pg=None) -> ShardingPlan:
        """Plan on rank 0 of ``pg`` and broadcast, so every rank shards the same way."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return self.plan(module, sharders)
        pg = pg if pg is not None else dist.group.WORLD
        box: List[Optional[ShardingPlan]] = [None]
        if dist.get_rank(pg) == 0:
            box[0] = self.plan(module, sharders)
        dist.broadcast_object_list(box, src=dist.get_global_rank(pg, 0), group=pg)
        return box[0]


def _parallelism(size, sync_every, strategy, inter_host):
    """The plugin's 2D keywords as a workload's parallelism block (None: 1D); a bad one is refused
    as the CLI refuses the same field, naming the keyword."""
    from shardopt.core.parallelism import Parallelism
    from shardopt.core.validation import validate_as

    if size is None:
        return None
    strategy = getattr(strategy, "value", strategy)  # TorchRec's ShardingStrategy enum, or its value
    data = {"sharding_group_size": size, "sync_every": sync_every, "strategy": strategy,
            "inter_host_allreduce": inter_host}
    try:
        return validate_as(Parallelism, data, "ShardoptPlanner")
    except ShardoptError as exc:
        names = {"sharding_group_size": "sharding_group_size", "sync_every": "sync_every",
                 "strategy": "sharding_strategy", "inter_host_allreduce": "use_inter_host_allreduce"}
        text = str(exc)
        for field, keyword in names.items():
            text = text.replace(f"ShardoptPlanner: {field}", f"ShardoptPlanner {keyword}")
        raise ShardoptError(text) from None


def _in_groups(workload: Workload, parallelism) -> Workload:
    """The model's workload over the whole world, cut into sharding groups."""
    import dataclasses

    from shardopt.core.workload import semantic_errors

    grouped = dataclasses.replace(workload, parallelism=parallelism)
    for path, reason in semantic_errors(grouped):
        if path.startswith("parallelism"):
            raise ShardoptError(f"ShardoptPlanner sharding_group_size: {reason}")
    return grouped


def _check_loader(plan_loader, plan_file, sharding_group_size) -> None:
    if plan_loader is not None and plan_file is not None:
        raise ShardoptError("ShardoptPlanner: plan_loader and plan_file both give a stored plan; pass one")
    if plan_loader is not None and sharding_group_size is not None:
        raise ShardoptError("ShardoptPlanner: plan_loader: a stored TorchRec plan is one 1D plan; it cannot be"
                            " loaded with sharding_group_size (2D)")


def _refuse_dense_model_parallel(origins) -> None:
    """TorchRec's planner plans a table its sharder cuts model-parallel only with the dense kernel,
    then refuses the plan (INVALID_COMPUTE_KERNEL); the same, once a plan was found."""
    from torchrec.distributed.planner.types import PlannerErrorType

    from shardopt.torchrec.from_model import dense_only_message
    from shardopt.torchrec.planner_errors import ShardoptPlannerError

    dense = [(name, o) for name, o in origins.items() if o.dense_only]
    if dense:
        raise ShardoptPlannerError(f"shardopt: {dense_only_message(dense)}.", PlannerErrorType.INVALID_COMPUTE_KERNEL)


def _reserved_per_rank(topology: Topology, reserved: Topology) -> int:
    """Table memory the storage reservation took off rank 0."""
    device = topology.compute_device
    return table_storage(topology.devices[0].storage, device) - table_storage(reserved.devices[0].storage, device)


def _load_plan(path: str, workload: Workload) -> Plan:
    """A stored shardopt plan file, checked against the model's workload."""
    from shardopt.arithmetic.checks import check_plan
    from shardopt.core.plan import read_plan

    plan = read_plan(Path(path))
    report = check_plan(workload, plan)
    if not report.valid:
        raise ShardoptError(f"{path}: does not fit the model: {report.violations[0]}")
    return plan


def _check_options(batch_size, time_limit_s, search, objective, cost_model, hardware=None, robust="auto") -> None:
    """Refuse options the CLI would refuse, with the same words (a ShardoptError is a ValueError)."""
    import math

    from shardopt.contracts import OBJECTIVES

    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or not 0 < batch_size <= 2**24):
        raise ShardoptError(f"ShardoptPlanner batch_size: must be a positive integer, got {batch_size!r}")
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not (
            math.isfinite(time_limit_s) and 0 < time_limit_s <= 3600):
        raise ShardoptError(f"ShardoptPlanner time_limit_s: must be a finite number in (0, 3600], got {time_limit_s!r}")
    if search not in ("ilp", "greedy"):
        raise ShardoptError(f"ShardoptPlanner search: must be 'ilp' or 'greedy', got {search!r}")
    if objective not in OBJECTIVES:
        raise ShardoptError(f"ShardoptPlanner objective: must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if robust not in ("auto", "on", "off"):
        raise ShardoptError(f"ShardoptPlanner robust: must be 'auto', 'on' or 'off', got {robust!r}")
    if robust == "on" and objective != "critical-path":
        raise ShardoptError("ShardoptPlanner robust: 'on' is the step's objective; it needs objective='critical-path'")
    if not isinstance(cost_model, str):
        raise ShardoptError(f"ShardoptPlanner cost_model: must be a name or a path, got {cost_model!r}")
    if hardware is not None:
        from shardopt.core.hardware import check_hardware_name

        check_hardware_name(hardware, "ShardoptPlanner hardware")
