"""Hardware profiles: the constants the analytic model needs, kept as data with their origin."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

import yaml

from shardopt.core.errors import ShardoptError

if TYPE_CHECKING:
    from shardopt.core.workload import Topology

DEFAULT_HARDWARE = {"cpu": "cpu", "cuda": "h200"}


@dataclass(frozen=True)
class Hardware:
    """Per-rank constants; bandwidths in GB/s."""

    name: str
    description: str
    mem_bw_gbps: float
    uvm_bw_gbps: float
    cache_bytes: int
    cache_bw_gbps: float
    min_access_bytes: int
    lookup_ns: float
    table_us: float
    kernel_us: float
    intra_host_bw_gbps: float
    inter_host_bw_gbps: float
    comm_latency_us: float
    origin: str
    # A second, larger cache level the rank's rows compete for (CPU L3); None: one level only.
    llc_bytes: int | None = None
    # Memory bandwidth the fused backward (gradient reduction and optimizer update) reaches, when
    # it differs from the forward's gathers (FBGEMM's TBE on GPUs: about 0.4x); None: mem_bw_gbps.
    bwd_mem_bw_gbps: float | None = None
    # Latency an all-to-all adds per peer (one send and one receive each), beyond comm_latency_us:
    # what makes a world-wide all-to-all slower at 1024 ranks than at 64 (0: not modelled).
    a2a_peer_us: float = 0.0
    # Where each constant comes from: constant name -> citation (data sheet, measurement, fit).
    sources: dict | None = dataclasses.field(default=None, hash=False, compare=False)


@lru_cache(maxsize=1)
def hardware_profiles() -> dict[str, Hardware]:
    text = resources.files("shardopt").joinpath("data/hardware.yaml").read_text()
    return {name: Hardware(name=name, **values) for name, values in yaml.safe_load(text).items()}


def check_hardware_name(name: str, where: str, device: str | None = None) -> None:
    """``name`` is a hardware profile (one for ``device``, when given); else one line naming ``where``."""
    profiles = hardware_profiles()
    fits = lambda h: device is None or (h != "cpu") == (device == "cuda")  # noqa: E731
    if name not in profiles or not fits(name):
        raise ShardoptError(f"{where}: one of {', '.join(sorted(filter(fits, profiles)))}, got {name!r}")


@lru_cache(maxsize=256)
def hardware_for(topology: "Topology", source: str = "<workload>") -> Hardware:
    """The profile a topology names (or its device's default), with its bandwidth overrides."""
    profiles = hardware_profiles()
    name = topology.hardware or DEFAULT_HARDWARE[topology.compute_device]
    if name not in profiles:
        raise ShardoptError(
            f"{source}: topology.hardware: unknown hardware {name!r}; known: {', '.join(profiles)}"
        )
    hw = profiles[name]
    overrides = {
        "intra_host_bw_gbps": topology.intra_host_bw,
        "inter_host_bw_gbps": topology.inter_host_bw,
        "comm_latency_us": topology.comm_latency_us,
    }
    return dataclasses.replace(hw, **{k: v for k, v in overrides.items() if v is not None})
