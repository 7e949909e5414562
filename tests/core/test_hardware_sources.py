"""Every constant of a GPU hardware profile names where it comes from (issue 22)."""

import dataclasses

import pytest

from shardopt.core.hardware import Hardware, hardware_profiles

NOT_CONSTANTS = {"name", "description", "origin", "sources", "llc_bytes"}
CONSTANTS = [f.name for f in dataclasses.fields(Hardware) if f.name not in NOT_CONSTANTS]
GPUS = [name for name, hw in hardware_profiles().items() if name != "cpu"]


def test_the_gpus_users_plan_for_have_profiles():
    assert {"h100", "h200", "a100"} <= set(GPUS)


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_constant_cites_a_source(name):
    hw = hardware_profiles()[name]
    sources = hw.sources or {}
    missing = [c for c in CONSTANTS if getattr(hw, c) is not None and c not in sources]
    assert not missing, f"{name}: no source for {missing}"
    for constant, text in sources.items():
        assert constant in CONSTANTS, f"{name}: a source for {constant!r}, which is no constant"
        text = " ".join(str(text).split())
        # a link, a named document, or an estimate that says it is one and why
        cited = "http" in text or any(w in text for w in ("data sheet", "whitepaper", "PCI-SIG", "Guide", "Blog"))
        assert cited or (text.startswith("estimate:") and len(text) > 40), f"{name}.{constant}: {text!r}"


def test_the_backward_is_slower_per_byte_than_the_forward_on_gpus():
    """FBGEMM's TBE reaches 64.7% of HBM peak forward and 26.5% backward (TorchRec #4757)."""
    for name in GPUS:
        hw = hardware_profiles()[name]
        assert hw.bwd_mem_bw_gbps is not None and hw.bwd_mem_bw_gbps < hw.mem_bw_gbps
