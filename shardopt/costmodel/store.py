"""Cost-model files: JSON with a format, a version, the hardware it was trained on, and weights.

JSON (not pickle) so a model file can be read without running code from it, inspected by people,
and reported clearly when it is corrupt, of another version, or for other hardware.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from shardopt.costmodel.analytic import Calibration
from shardopt.costmodel.comm_curve import CommCurves
from shardopt.costmodel.learned import LearnedParts
from shardopt.errors import ShardoptError
from shardopt.fileio import write_atomic

MODEL_FORMAT = "shardopt-cost-model"
# 2: shards of a kernel share its caches (llc_bytes fitted, llc_bytes and update_hit_bytes terms).
MODEL_VERSION = 2


def _calibration_to_dict(c: Calibration) -> dict:
    return {
        "hardware": c.hardware, "fwd": list(c.fwd), "bwd": list(c.bwd),
        "fwd_kernel_s": c.fwd_kernel_s, "bwd_kernel_s": c.bwd_kernel_s,
        "comm": {str(w): list(ab) for w, ab in c.comm.items()}, "trained_on": c.trained_on,
        **({"comm_curves": c.comm_curves.to_dict()} if c.comm_curves else {}),
        **({"llc_bytes": c.llc_bytes} if c.llc_bytes is not None else {}),
    }


def _calibration_from_dict(d: dict) -> Calibration:
    return Calibration(
        hardware=d["hardware"], fwd=tuple(d["fwd"]), bwd=tuple(d["bwd"]),
        fwd_kernel_s=d["fwd_kernel_s"], bwd_kernel_s=d["bwd_kernel_s"],
        comm={int(w): (ab[0], ab[1]) for w, ab in d["comm"].items()}, trained_on=d["trained_on"],
        comm_curves=CommCurves.from_dict(d["comm_curves"]) if d.get("comm_curves") else None,
        llc_bytes=d.get("llc_bytes"),
    )


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
    }
    write_atomic(path, json.dumps(data, sort_keys=True) + "\n")


def load_model(path: str | Path) -> tuple[LearnedParts, dict]:
    """(parts, metadata); ShardoptError naming the file on anything unusable."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ShardoptError(f"{path}: no such cost-model file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ShardoptError(f"{path}: corrupt cost-model file (not JSON: {exc})") from None
    if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
        raise ShardoptError(f"{path}: format: not a shardopt cost model")
    if data.get("version") != MODEL_VERSION:
        raise ShardoptError(
            f"{path}: version: this shardopt reads cost-model version {MODEL_VERSION},"
            f" got {data.get('version')!r}; retrain it with `shardopt train`"
        )
    try:
        parts = LearnedParts(
            calibration=_calibration_from_dict(data["calibration"]),
            feature_mean=np.array(data["features"]["mean"], dtype=np.float64),
            feature_std=np.array(data["features"]["std"], dtype=np.float64),
            kernel_states=list(data["kernel_nets"]),
            comm_state=data["comm_net"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ShardoptError(f"{path}: corrupt cost-model file (missing or bad {exc})") from None
    meta = {"hardware": data.get("hardware"), "trained_on": data.get("trained_on", {}),
            "report": data.get("report", {})}
    return parts, meta
