"""Which cost model ``--cost-model analytic|analytic-v0|learned|analytic@PATH|learned@PATH|PATH``
means for a workload.

The package ships a trained model file per hardware it has a profile of
(``shardopt/data/models/<hardware>.json``); it holds both the calibrated analytic constants and
the learned nets, so ``analytic`` and ``learned`` need no profiling step on that hardware. A model
file (``shardopt calibrate`` or ``shardopt train`` writes one) holds the same two parts:
``analytic@PATH`` and ``learned@PATH`` pick one; a bare PATH means ``learned@PATH``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from shardopt.costmodel.analytic import AnalyticCostModel
from shardopt.costmodel.base import CostModel
from shardopt.costmodel.comm_source import CommProfile
from shardopt.core.errors import ShardoptError
from shardopt.core.hardware import DEFAULT_HARDWARE
from shardopt.core.workload import Workload

NAMES = ("analytic", "analytic-v0", "learned")


def model_file_part(spec: str) -> tuple[str, str] | None:
    """(part, path) when ``spec`` is ``analytic@PATH`` or ``learned@PATH``; else None."""
    part, at, path = spec.partition("@")
    return (part, path) if at and part in ("analytic", "learned") else None


def workload_hardware(workload: Workload) -> str:
    topo = workload.topology
    return topo.hardware or DEFAULT_HARDWARE[topo.compute_device]


def embedded_model_path(hardware: str) -> Path | None:
    path = resources.files("shardopt").joinpath(f"data/models/{hardware}.json")
    return Path(str(path)) if path.is_file() else None


def resolve_cost_model(
    spec: str, workload: Workload, comm_profile: CommProfile | None = None
) -> tuple[CostModel, list[str]]:
    """The model and any warnings (a model trained on other hardware than the workload's);
    ``comm_profile``: all-to-all curves the user named, which then price comm."""
    from shardopt.costmodel.store import load_model

    hardware = workload_hardware(workload)
    if spec == "analytic-v0":
        return AnalyticCostModel(comm_profile=comm_profile), []
    part = "learned"
    if named := model_file_part(spec):
        part, spec = named
        path = Path(spec)
        if not path.is_file():
            raise ShardoptError(f"--cost-model {part}@{spec}: no model file there")
    elif spec in ("analytic", "learned"):
        part = spec
        path = embedded_model_path(hardware)
        if path is None:
            if spec == "analytic":
                return AnalyticCostModel(comm_profile=comm_profile), []
            raise ShardoptError(
                f"--cost-model learned: no embedded model for hardware {hardware!r}; measure one on it"
                f" (shardopt calibrate --device {workload.topology.compute_device} -o model.json) and pass"
                f" --cost-model learned@model.json"
            )
    else:
        path = Path(spec)
        if not path.exists():
            raise ShardoptError(
                f"--cost-model {spec}: neither a model name ({', '.join(NAMES)}) nor an existing model file"
            )
    parts, meta = load_model(path)
    warnings = []
    if meta["hardware"] != hardware:
        trained = meta["trained_on"]
        warnings.append(
            f"{path}: trained on {meta['hardware']} ({trained.get('device_name', '?')},"
            f" {trained.get('cores', '?')} cores, torch {trained.get('torch', '?')}),"
            f" but the workload targets {hardware}"
        )
    other_cpu = _other_cpu(meta["trained_on"], workload)
    if other_cpu:
        warnings.append(f"{path}: {other_cpu}")
    if part == "learned" and parts.calibration.table_factors:
        warnings.append(f"{path}: its tables' factors (calibrate --workload) correct the analytic part;"
                        f" the learned part plans without them: use --cost-model analytic@{path}")
    if part == "analytic":
        model: CostModel = AnalyticCostModel(calibration=parts.calibration, comm_profile=comm_profile)
    else:
        from shardopt.costmodel.learned import LearnedCostModel

        model = LearnedCostModel(parts, device=workload.topology.compute_device, comm_profile=comm_profile)
    model.held_out = held_out_error(meta["report"], part)
    return model, warnings


def held_out_error(report: dict, part: str) -> float | None:
    """The model file's own figure of its error on held-out kernels, for this part of it."""
    mape = report.get("held_out_mape") if isinstance(report, dict) else None
    value = mape.get("analytic-calibrated" if part == "analytic" else "learned") if isinstance(mape, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _other_cpu(trained_on: dict, workload: Workload) -> str | None:
    """A CPU model speaks for the CPU it was profiled on; say so when this machine differs."""
    if workload.topology.compute_device != "cpu" or not trained_on.get("cpu_id"):
        return None
    from shardopt.profile.dataset import cpu_fingerprint

    here = cpu_fingerprint()
    if trained_on["cpu_id"] == here:
        return None
    return (
        f"calibrated on CPU {trained_on['cpu_id']}, this machine is {here}; its kernel costs may"
        " not hold here, so --robust auto plans for that doubt (to measure instead, 20 s: shardopt calibrate"
        " --probe --workload W.yaml -o model.json, then --cost-model analytic@model.json)"
    )
