"""A profile dataset: a folder with ``manifest.json`` (hardware, software, sweep) and
``points.jsonl`` (one measured point per line, appended and synced as it is measured).

Appending line by line is what makes a sweep resumable: an interrupted run keeps every finished
point, a torn last line from a crash is dropped on reopen, and a rerun skips the keys it finds.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Annotated, Iterator, Literal, Union

from pydantic import ConfigDict, Field, TypeAdapter
from pydantic.dataclasses import dataclass

from shardopt.core.errors import ShardoptError
from shardopt.core.files import write_atomic
from shardopt.core.workload import Access, Table

MANIFEST = "manifest.json"
POINTS = "points.jsonl"
DATASET_FORMAT = "shardopt-profile"
# Manifest fields that must match for a rerun to add to an existing dataset.
# A point measured one way is not resumed into a dataset measured another (one batch over and over
# before distinct_batches was recorded; see shardopt/profile/tbe.py).
# The machine's identity counts too: FBGEMM's CPU kernels differ 2-9x between CPUs sold under one
# name, and between torch/FBGEMM releases; a dataset is one machine's and one software's.
RESUME_FIELDS = (
    "format", "version", "device", "device_name", "backend", "preset", "seed", "distinct_batches",
    "cpu_id", "cores", "torch", "fbgemm_gpu", "shardopt",
)


def point_key(spec: dict) -> str:
    """A stable id of what a point measures (not of what it measured)."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def machine_metadata(device: str) -> dict:
    import torch

    meta = {
        "device": "cuda" if device.startswith("cuda") else "cpu",
        "cpu": _cpu_name(),
        "cpu_id": cpu_fingerprint(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    try:
        import importlib.metadata as md

        meta["fbgemm_gpu"] = next(
            (md.version(name) for name in ("fbgemm-gpu-cpu", "fbgemm-gpu") if _installed(name)),
            None,
        )
    except Exception:  # noqa: BLE001 - metadata is informative only
        meta["fbgemm_gpu"] = None
    if device.startswith("cuda"):
        meta["device_name"] = torch.cuda.get_device_name(torch.device(device))
        meta["cuda"] = torch.version.cuda
    else:
        meta["device_name"] = meta["cpu"]
    return meta


def _installed(name: str) -> bool:
    import importlib.metadata as md

    try:
        md.version(name)
        return True
    except md.PackageNotFoundError:
        return False


CPU_ID_VARIABLE = "SHARDOPT_CPU_ID"


def cpu_fingerprint() -> str:
    """Vendor, family, model and stepping plus the vector extensions FBGEMM dispatches on.

    Two VMs both named "AMD EPYC" can differ four-fold in FBGEMM's CPU backward (AVX-512 or not),
    so a CPU profile is tied to this string, not to the marketing name. ``SHARDOPT_CPU_ID``, when
    set, stands in for it: planning for another CPU than this one, or testing both provenances.
    """
    if os.environ.get(CPU_ID_VARIABLE):
        return os.environ[CPU_ID_VARIABLE]
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" not in line:
                if fields:
                    break  # the first processor's block is enough
                continue
            key, value = (part.strip() for part in line.split(":", 1))
            fields.setdefault(key, value)
    except OSError:
        return platform.processor() or "unknown"
    flags = set(fields.get("flags", "").split())
    vector = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    ident = "/".join(fields.get(k, "?") for k in ("vendor_id", "cpu family", "model", "stepping"))
    return f"{ident} {'+'.join(vector) or 'no-avx2'}"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class ProfileDataset:
    """Open (or create) a dataset folder for appending measured points."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    @property
    def points_path(self) -> Path:
        return self.folder / POINTS

    def manifest(self) -> dict:
        from shardopt.core.loaders import load_json

        if not self.folder.is_dir():
            raise ShardoptError(f"{self.folder}: not a profile dataset (not a folder)")
        if not self.manifest_path.exists():
            raise ShardoptError(f"{self.folder}: not a profile dataset (no {MANIFEST})")
        data = load_json(self.manifest_path, "profile manifest")
        if not isinstance(data, dict):
            raise ShardoptError(f"{self.manifest_path}: (top level): must be a mapping, got {type(data).__name__}")
        if data.get("format") != DATASET_FORMAT:
            raise ShardoptError(f"{self.manifest_path}: format: must be {DATASET_FORMAT!r}, got {data.get('format')!r}")
        return data

    def start(self, manifest: dict) -> None:
        """Create the dataset, or check that an existing one was made by the same sweep here."""
        if self.manifest_path.exists() or self.points_path.exists():
            old = self.manifest()
            for field in RESUME_FIELDS:
                if old.get(field) != manifest.get(field):
                    raise ShardoptError(
                        f"{self.manifest_path}: {field}: the dataset was measured with"
                        f" {old.get(field)!r}, this run has {manifest.get(field)!r};"
                        " use another output folder"
                    )
            self._drop_torn_tail()
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.manifest_path, json.dumps(manifest, indent=1) + "\n")

    def _drop_torn_tail(self) -> None:
        if not self.points_path.exists():
            return
        data = self.points_path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(self.points_path, "r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)

    def records(self, kind: str | None = None) -> Iterator[dict]:
        """Every measured point, checked; a torn last line (a crash mid-append) is skipped."""
        if not self.points_path.exists():
            return
        if self.points_path.is_dir():
            raise ShardoptError(f"{self.points_path}: is a folder, not a points file")
        with open(self.points_path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    record = _check_record(line)
                except ValueError as exc:
                    if not line.endswith(b"\n"):  # only the last line can lack its newline: torn
                        continue  # its point is measured again on resume
                    raise ShardoptError(f"{self.points_path}: line {number}: {exc}") from None
                if kind is None or record["kind"] == kind:
                    yield record

    def done_keys(self) -> set[str]:
        return {r["key"] for r in self.records()}

    def append(self, record: dict) -> None:
        with open(self.points_path, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


# --- the shape of a measured point (checked on read: a profile folder is user input) -----------

_LOOSE = ConfigDict(extra="allow")  # newer sweeps add fields; older readers keep reading
_Micros = Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)]


@dataclass(frozen=True, config=_LOOSE)
class _Timing:
    median_us: _Micros


@dataclass(frozen=True, config=_LOOSE)
class _TableSpec:
    rows: Annotated[int, Field(gt=0, le=2**40)]
    dim: Annotated[int, Field(gt=0, le=2**16, multiple_of=4)]
    pooling_factor: Annotated[float, Field(gt=0, le=1e5, allow_inf_nan=False)]
    access: Access


@dataclass(frozen=True, config=_LOOSE)
class _TbeRecord:
    kind: Literal["tbe"]
    key: str
    batch: Annotated[int, Field(gt=0, le=2**24)]
    precision: Literal["fp32", "fp16", "bf16", "int8"]
    location: Literal["hbm", "uvm", "uvm_caching"]
    tables: Annotated[tuple[_TableSpec, ...], Field(min_length=1)]
    fwd: _Timing
    bwd: _Timing
    kernel: Literal["fused", "dense"] = "fused"  # dense: data-parallel replicas' kernel


@dataclass(frozen=True, config=_LOOSE)
class _A2aRecord:
    kind: Literal["a2a"]
    key: str
    world_size: Annotated[int, Field(gt=0, le=2**16)]
    message_bytes: Annotated[int, Field(gt=0, le=2**50)]
    timing: _Timing
    pattern: Literal["even", "pooled"]


_Record = Annotated[Union[_TbeRecord, _A2aRecord], Field(discriminator="kind")]
_RECORD = TypeAdapter(_Record)


def _check_record(line: bytes) -> dict:
    """One points.jsonl line as a checked record; ValueError says what is wrong with it."""
    from pydantic import ValidationError

    from shardopt.core.validation import first_error

    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        record = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError("not a JSON record") from None
    if not isinstance(record, dict):
        raise ValueError(f"must be a JSON object, got {type(record).__name__}")
    try:
        _RECORD.validate_python(record)
    except ValidationError as exc:
        path, reason = first_error(_Record, exc)
        raise ValueError(f"{path}: {reason}") from None
    return record


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a measurement")


def tables_of(spec: dict) -> list[Table]:
    adapter = TypeAdapter(Access)
    return [
        Table(
            name=f"t{i}",
            num_embeddings=t["rows"],
            embedding_dim=t["dim"],
            pooling_factor=t["pooling_factor"],
            access=adapter.validate_python(t["access"]),
        )
        for i, t in enumerate(spec["tables"])
    ]
