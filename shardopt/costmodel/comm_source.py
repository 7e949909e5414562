"""Where a plan's communication costs come from: one rule for plan, evaluate, replay, compare,
bench and the TorchRec plugin.

The workload's topology is the target cluster. Its declared links (bandwidths, latency, hosts)
price the all-to-alls; without them, the hardware profile's links do. All-to-all times measured
by a profile describe the machine they were measured on, so they are used only when given
explicitly (``--comm-profile``) or when they were measured on the target itself: the same
hardware, every rank on one host as when profiled, the plan's world size measured, and no link
declared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from shardopt.core.errors import ShardoptError
from shardopt.core.hardware import DEFAULT_HARDWARE, hardware_for
from shardopt.core.workload import Workload
from shardopt.costmodel.comm_curve import CommCurves

CommKind = Literal["declared", "hardware", "measured", "profile"]


@dataclass(frozen=True)
class CommChoice:
    """The rule's answer for one workload: its kind, a line for people, and the curves (or the
    fitted alpha-beta line) when measured times are used."""

    kind: CommKind
    label: str
    curves: Optional[CommCurves] = None
    fitted: Optional[tuple[float, float]] = None  # (alpha s, beta s/byte) at the plan's world size


@dataclass(frozen=True)
class CommProfile:
    """All-to-all curves the user named (``--comm-profile DIR``): they win over everything."""

    curves: CommCurves
    source: str


def declares_links(workload: Workload) -> bool:
    """Whether the workload says what its links are (bandwidths or latency)."""
    topo = workload.topology
    return any(x is not None for x in (topo.intra_host_bw, topo.inter_host_bw, topo.comm_latency_us))


def links_label(workload: Workload) -> str:
    """The links that price comm, with their figures: what ``plan`` prints."""
    topo = workload.topology
    hw = hardware_for(topo)
    parts = [f"intra-host {hw.intra_host_bw_gbps:g} GB/s"]
    if topo.num_hosts > 1:
        parts.append(f"inter-host {hw.inter_host_bw_gbps:g} GB/s over {topo.num_hosts} hosts")
    parts.append(f"latency {hw.comm_latency_us:g} us")
    whose = "declared links" if declares_links(workload) else f"hardware profile {hw.name!r} links"
    return f"{whose}: {', '.join(parts)}"


def choose_comm(
    workload: Workload,
    measured: Optional[CommCurves] = None,
    fitted: Optional[dict[int, tuple[float, float]]] = None,
    measured_on: Optional[str] = None,
    profile: Optional[CommProfile] = None,
) -> CommChoice:
    """The rule. ``measured``/``fitted``: a model's curves and alpha-beta lines, measured on
    hardware ``measured_on`` with every rank on one host; ``profile``: the user's explicit one."""
    topo = workload.topology
    world = topo.world_size
    if profile is not None:
        if world > 1 and not profile.curves.covers(world):
            measured_at = ", ".join(map(str, profile.curves.world_sizes())) or "none"
            raise ShardoptError(
                f"{profile.source}: --comm-profile: no all-to-all of both patterns (even, pooled) measured"
                f" at world size {world} (measured: {measured_at})"
            )
        return CommChoice("profile", f"measured all-to-all ({profile.source}, given explicitly)",
                          curves=profile.curves)
    if declares_links(workload):
        return CommChoice("declared", links_label(workload))
    target = topo.hardware or DEFAULT_HARDWARE[topo.compute_device]
    on_target = world > 1 and measured_on == target and topo.num_hosts == 1
    if on_target and measured is not None and measured.covers(world):
        return CommChoice("measured", f"all-to-all measured on {target} at world size {world} (one host)",
                          curves=measured)
    if on_target and fitted and world in fitted:
        return CommChoice("measured", f"all-to-all fitted on {target} at world size {world} (one host)",
                          fitted=fitted[world])
    return CommChoice("hardware", links_label(workload))


def load_comm_profile(folder: str) -> CommProfile:
    """The all-to-all curves of a profile folder (``--comm-profile``); one line when it holds none."""
    from pathlib import Path

    from shardopt.profile.dataset import ProfileDataset

    dataset = ProfileDataset(Path(folder))
    dataset.manifest()  # a folder that is no profile fails here, naming it
    records = list(dataset.records("a2a"))
    if not records:
        raise ShardoptError(f"{folder}: --comm-profile: the profile holds no all-to-all points")
    return CommProfile(CommCurves.from_records(records), str(folder))
