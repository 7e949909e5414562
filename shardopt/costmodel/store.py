"""Cost-model files: JSON with a format, a version, the hardware it was trained on, and weights.

JSON (not pickle) so a model file can be read without running code from it, inspected by people,
and reported clearly when it is corrupt, of another version, or for other hardware.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from shardopt.costmodel.constants import Calibration, KernelConstants
from shardopt.costmodel.comm_curve import CommCurves
from shardopt.costmodel.kernel_net import LearnedParts
from shardopt.costmodel.provenance import RANGE_FIELDS, FittedRange
from shardopt.costmodel.table_factors import KERNELS, MAX_LOG_FACTOR, TableFactor
from shardopt.core.errors import ShardoptError
from shardopt.core.files import write_atomic

MODEL_FORMAT = "shardopt-cost-model"
# 2: shards of a kernel share its caches (llc_bytes fitted, llc_bytes and update_hit_bytes terms).
# 3: repeats within an iteration that miss the last level, a forward term (repeat_miss_bytes).
MODEL_VERSION = 3
READ_VERSIONS = (2, 3)
# A transferred model's speed factor per pass, in log: e^7 is over 1000x, more than any two
# machines one model could speak for.
MAX_PRIOR_SHIFT = 7.0
MIN_TABLE_FACTOR = float(np.exp(-MAX_LOG_FACTOR)) * 0.999  # the fit's own bound, with rounding room


def _calibration_to_dict(c: Calibration) -> dict:
    return {
        "hardware": c.hardware, "fwd": list(c.fwd), "bwd": list(c.bwd),
        "fwd_kernel_s": c.fwd_kernel_s, "bwd_kernel_s": c.bwd_kernel_s,
        "comm": {str(w): list(ab) for w, ab in c.comm.items()}, "trained_on": c.trained_on,
        **({"comm_curves": c.comm_curves.to_dict()} if c.comm_curves else {}),
        **({"llc_bytes": c.llc_bytes} if c.llc_bytes is not None else {}),
        **({"fitted": c.fitted.to_dict()} if c.fitted is not None else {}),
        **({"table_factors": [f.to_dict() for f in c.table_factors]} if c.table_factors else {}),
        **({"dense": dataclasses.asdict(c.dense)} if c.dense is not None else {}),
    }


def _calibration_from_dict(d: dict) -> Calibration:
    return Calibration(
        hardware=d["hardware"], fwd=tuple(d["fwd"]), bwd=tuple(d["bwd"]),
        fwd_kernel_s=d["fwd_kernel_s"], bwd_kernel_s=d["bwd_kernel_s"],
        comm={int(w): (ab[0], ab[1]) for w, ab in d["comm"].items()}, trained_on=d["trained_on"],
        comm_curves=CommCurves.from_dict(d["comm_curves"]) if d.get("comm_curves") else None,
        llc_bytes=d.get("llc_bytes"),
        fitted=FittedRange.from_dict(d["fitted"]) if d.get("fitted") else None,
        table_factors=_table_factors(d.get("table_factors")),
        dense=_dense(d.get("dense")),
    )


def _dense(value) -> KernelConstants | None:
    """``calibration.dense``: replicas' own constants, checked (absent in older files)."""
    from shardopt.costmodel.terms import BWD_TERMS, FWD_TERMS

    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"fwd", "bwd", "fwd_kernel_s", "bwd_kernel_s"}:
        raise _Bad("calibration.dense: must hold exactly fwd, bwd, fwd_kernel_s and bwd_kernel_s")
    fwd = _numbers(value["fwd"], "calibration.dense.fwd", len(FWD_TERMS), 0.0)
    bwd = _numbers(value["bwd"], "calibration.dense.bwd", len(BWD_TERMS), 0.0)
    kernels = _numbers([value["fwd_kernel_s"], value["bwd_kernel_s"]], "calibration.dense.fwd_kernel_s/bwd_kernel_s",
                       2, 0.0)
    if not all(np.isfinite(fwd + bwd + kernels)):
        raise _Bad("calibration.dense: every constant must be finite")
    return KernelConstants(tuple(fwd), tuple(bwd), kernels[0], kernels[1])


def save_model(path: str | Path, parts: LearnedParts, report: dict) -> None:
    data = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "hardware": parts.calibration.hardware,
        "trained_on": parts.calibration.trained_on,
        "report": report,
        "calibration": _calibration_to_dict(parts.calibration),
        "features": {"mean": parts.feature_mean.tolist(), "std": parts.feature_std.tolist()},
        "kernel_nets": parts.kernel_states,
        "comm_net": parts.comm_state,
        **({"prior_shift": list(parts.prior_shift)} if any(parts.prior_shift) else {}),
    }
    write_atomic(path, json.dumps(data, sort_keys=True) + "\n")


def load_model(path: str | Path) -> tuple[LearnedParts, dict]:
    """(parts, metadata); ShardoptError naming the file and field on anything unusable.

    Every array is checked for its length and every number for being finite, and the nets are
    built from their weights here, so a damaged file fails on load rather than mid-plan.
    """
    from shardopt.core.loaders import load_json

    path = Path(path)
    data = load_json(path, "cost-model file")
    if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
        raise ShardoptError(f"{path}: format: not a shardopt cost model")
    if data.get("version") not in READ_VERSIONS:
        raise ShardoptError(
            f"{path}: version: this shardopt reads cost-model versions {READ_VERSIONS[0]}-{MODEL_VERSION},"
            f" got {data.get('version')!r}; retrain it with `shardopt train`"
        )
    try:
        parts = _parts_from_dict(_upgraded(data))
    except _Bad as exc:
        raise ShardoptError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ShardoptError(f"{path}: corrupt cost-model file (missing or bad {exc})") from None
    trained_on = data.get("trained_on", {})
    meta = {"hardware": data.get("hardware"), "trained_on": trained_on if isinstance(trained_on, dict) else {},
            "report": data.get("report", {})}
    if not isinstance(meta["hardware"], str):
        raise ShardoptError(f"{path}: hardware: must be a string, got {meta['hardware']!r}")
    return parts, meta


def _upgraded(data: dict) -> dict:
    """A version 2 file as version 3 reads it: no constant for the forward's repeat misses (0,
    so repeats within an iteration stay hits, as the file was fitted). Its nets read the same
    features as before (``LEARNED_FWD_TERMS``); shapes are checked after."""
    if data.get("version") != 2:
        return data
    cal = data.get("calibration")
    if not isinstance(cal, dict):
        return data
    cal = dict(cal)
    if isinstance(cal.get("fwd"), list):
        cal["fwd"] = [*cal["fwd"], 0.0]
    if isinstance(cal.get("dense"), dict) and isinstance(cal["dense"].get("fwd"), list):
        cal["dense"] = {**cal["dense"], "fwd": [*cal["dense"]["fwd"], 0.0]}
    return {**data, "calibration": cal, "version": MODEL_VERSION}


class _Bad(ValueError):
    """A field of the model file with the wrong shape or value; the message names it."""


def _numbers(value, field: str, length: int | None = None, minimum: float | None = None) -> list[float]:
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise _Bad(f"{field}: must be a list of numbers")
    if length is not None and len(value) != length:
        raise _Bad(f"{field}: must hold {length} numbers, got {len(value)}")
    if minimum is not None and any(v < minimum for v in value):
        raise _Bad(f"{field}: must be at least {minimum:g}, got {min(value)}")
    return [float(v) for v in value]


def _parts_from_dict(data: dict) -> LearnedParts:
    from shardopt.costmodel.features import FEATURES
    from shardopt.costmodel.terms import BWD_TERMS, FWD_TERMS

    cal = data.get("calibration")
    if not isinstance(cal, dict):
        raise _Bad("calibration: must be a mapping")
    _numbers(cal.get("fwd"), "calibration.fwd", len(FWD_TERMS), 0.0)
    _numbers(cal.get("bwd"), "calibration.bwd", len(BWD_TERMS), 0.0)
    _numbers([cal.get("fwd_kernel_s"), cal.get("bwd_kernel_s")], "calibration.fwd_kernel_s/bwd_kernel_s", 2, 0.0)
    comm = cal.get("comm")
    if not isinstance(comm, dict) or not all(str(w).isdigit() and int(w) > 0 for w in comm):
        raise _Bad("calibration.comm: must map world sizes to [alpha, beta]")
    for world, ab in comm.items():
        _numbers(ab, f"calibration.comm.{world}", 2, 0.0)
    curves = cal.get("comm_curves")
    if curves:
        if not isinstance(curves, dict):
            raise _Bad("calibration.comm_curves: must be a mapping")
        for key, pts in curves.items():
            world, _, pattern = str(key).partition("/")
            if not world.isdigit() or int(world) <= 0 or not pattern:
                raise _Bad(f"calibration.comm_curves.{key}: must be keyed WORLD/PATTERN")
            if not isinstance(pts, list) or not pts:
                raise _Bad(f"calibration.comm_curves.{key}: must list [bytes, seconds] points")
            for i, pt in enumerate(pts):
                _numbers(pt, f"calibration.comm_curves.{key}[{i}]", 2, 0.0)
    llc = cal.get("llc_bytes")
    if llc is not None and (isinstance(llc, bool) or not isinstance(llc, int) or llc <= 0):
        raise _Bad(f"calibration.llc_bytes: must be a positive integer, got {llc!r}")
    fitted = cal.get("fitted")
    if fitted is not None:
        if not isinstance(fitted, dict) or set(fitted) != set(RANGE_FIELDS):
            raise _Bad(f"calibration.fitted: must map {', '.join(RANGE_FIELDS)} to [least, most]")
        for name in RANGE_FIELDS:
            low, high = _numbers(fitted[name], f"calibration.fitted.{name}", 2, 0.0)
            if low > high:
                raise _Bad(f"calibration.fitted.{name}: least {low:g} is above most {high:g}")
    if not isinstance(cal.get("hardware"), str) or not isinstance(cal.get("trained_on"), dict):
        raise _Bad("calibration.hardware / calibration.trained_on: missing or of the wrong type")
    features = data.get("features")
    if not isinstance(features, dict):
        raise _Bad("features: must be a mapping with mean and std")
    mean = _numbers(features.get("mean"), "features.mean", len(FEATURES))
    std = _numbers(features.get("std"), "features.std", len(FEATURES))
    if any(v <= 0 for v in std):
        raise _Bad("features.std: every entry must be positive")
    states = data.get("kernel_nets")
    if not isinstance(states, list) or not states or not all(isinstance(s, dict) for s in states):
        raise _Bad("kernel_nets: must list at least one net's weights")
    if not isinstance(data.get("comm_net"), dict):
        raise _Bad("comm_net: must be a mapping of weights")
    parts = LearnedParts(
        calibration=_calibration_from_dict(cal),
        feature_mean=np.array(mean, dtype=np.float64),
        feature_std=np.array(std, dtype=np.float64),
        kernel_states=list(states),
        comm_state=data["comm_net"],
        prior_shift=_prior_shift(data.get("prior_shift", [0.0, 0.0])),
    )
    _check_nets(parts)
    return parts


def _table_factors(value) -> tuple[TableFactor, ...]:
    """``calibration.table_factors``: per-table corrections of ``calibrate --workload``, checked."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _Bad("calibration.table_factors: must list {name, rows, dim, pooling, fwd, bwd}")
    out, seen = [], set()
    for i, item in enumerate(value):
        field = f"calibration.table_factors[{i}]"
        keys = {"name", "rows", "dim", "pooling", "fwd", "bwd"}
        if not isinstance(item, dict) or not keys <= set(item) <= keys | {"kernel"}:
            raise _Bad(f"{field}: must hold exactly name, rows, dim, pooling, fwd and bwd (and kernel, if not fused)")
        kernel = item.get("kernel", "fused")
        if kernel not in KERNELS:
            raise _Bad(f"{field}.kernel: must be one of {', '.join(KERNELS)}, got {kernel!r}")
        if not isinstance(item["name"], str) or not item["name"] or (item["name"], kernel) in seen:
            raise _Bad(f"{field}.name: must be a table name given once per kernel, got {item['name']!r}")
        seen.add((item["name"], kernel))
        rows, dim = item["rows"], item["dim"]
        if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in (rows, dim)):
            raise _Bad(f"{field}.rows/dim: must be positive integers")
        (pooling,) = _numbers([item["pooling"]], f"{field}.pooling", 1, 0.0)
        for key in ("fwd", "bwd"):
            (value,) = _numbers([item[key]], f"{field}.{key}", 1)
            if not MIN_TABLE_FACTOR <= value <= 1 / MIN_TABLE_FACTOR:
                raise _Bad(f"{field}.{key}: must be a factor within {MIN_TABLE_FACTOR:.4g}..{1 / MIN_TABLE_FACTOR:.4g},"
                           f" got {value!r}")
        out.append(TableFactor(item["name"], rows, dim, pooling, float(item["fwd"]), float(item["bwd"]), kernel))
    return tuple(out)


def _prior_shift(value) -> tuple[float, float]:
    shift = _numbers(value, "prior_shift", 2)
    if not all(np.isfinite(shift)) or max(abs(v) for v in shift) > MAX_PRIOR_SHIFT:
        raise _Bad(f"prior_shift: must be finite logs of at most {MAX_PRIOR_SHIFT:g} in size, got {value!r}")
    return shift[0], shift[1]


def _check_nets(parts: LearnedParts) -> None:
    """Load every net's weights into its architecture: wrong shapes or keys fail here."""
    import torch

    from shardopt.costmodel.kernel_net import build_nets

    for i, state in enumerate(parts.kernel_states):
        net, _ = build_nets()
        try:
            net.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in state.items()})
        except (RuntimeError, TypeError, ValueError) as exc:
            raise _Bad(f"kernel_nets[{i}]: weights do not fit the net ({_first_line(exc)})") from None
    _, comm_net = build_nets()
    try:
        comm_net.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in parts.comm_state.items()})
    except (RuntimeError, TypeError, ValueError) as exc:
        raise _Bad(f"comm_net: weights do not fit the net ({_first_line(exc)})") from None


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[1] if len(lines) > 1 and lines[0].endswith(":") else (lines or [type(exc).__name__])[0])[:160]
