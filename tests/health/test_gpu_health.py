"""The check's word on the GPU's own counters: memory waiting for a reset refuses the launch,
ECC errors, throttling by heat or power, a narrow PCIe link and NVLink trouble are warned of,
each with what to do; a GPU the job does not use is only mentioned."""

from __future__ import annotations

import types
from typing import Any

import pytest

from ddptui.health import Code, Finding, Severity
from ddptui.health.gpu_health import throttled_by
from ddptui.onhost.gpu_health import nvml_health
from ddptui.probe.facts import GpuInventory, KernelLog, XidEvent
from ddptui.probe.sections import read_gpus
from tests.fixtures.nvml import pynvml_double
from tests.helpers import B, Scenario

GPU_CODES = {
    Code.GPU_MEMORY_PENDING_RESET,
    Code.GPU_ECC_UNCORRECTED,
    Code.GPU_THROTTLED,
    Code.GPU_PCIE_DEGRADED,
    Code.GPU_NVLINK,
}


def _nvml(machine: str) -> Any:
    module = types.ModuleType("pynvml")
    exec(compile(pynvml_double(machine), "pynvml.py", "exec"), module.__dict__)
    return module


def _inventory(machine: str) -> GpuInventory:
    """What the probe reads of ``machine`` through NVML, as the check reads it."""
    nvml = _nvml(machine)
    devices = [
        {"index": index, "uuid": f"GPU-{index}", "health": nvml_health(nvml, index)}
        for index in range(nvml.nvmlDeviceGetCount())
    ]
    return read_gpus({"source": "nvml", "devices": devices})


def _gpu_findings(s: Scenario) -> dict[int, list[Finding]]:
    found: dict[int, list[Finding]] = {}
    for finding in s.run():
        if finding.code in GPU_CODES:
            assert finding.host == B
            index = int(finding.message.split(" GPU ")[1].split(":")[0].split("'")[0].split()[0])
            found.setdefault(index, []).append(finding)
    return found


@pytest.fixture
def faulty() -> Scenario:
    s = Scenario()
    s.part(B, "gpus", devices=_inventory("h100x8_faults").devices)
    s.host(B, gpus="all")
    return s


def test_the_recorded_h200_says_nothing() -> None:
    s = Scenario()
    s.part(B, "gpus", devices=_inventory("h200_idle").devices)
    assert not _gpu_findings(s)


def test_each_faulty_gpu_is_named_once_with_its_fault(faulty: Scenario) -> None:
    found = _gpu_findings(faulty)
    codes = {index: [f.code for f in findings] for index, findings in found.items()}
    assert codes == {
        1: [Code.GPU_THROTTLED],
        2: [Code.GPU_MEMORY_PENDING_RESET, Code.GPU_ECC_UNCORRECTED],
        3: [Code.GPU_PCIE_DEGRADED],
        4: [Code.GPU_NVLINK],
        5: [Code.GPU_MEMORY_PENDING_RESET],
        6: [Code.GPU_THROTTLED, Code.GPU_NVLINK],
    }
    # GPU 0 is at its power limit under load, GPU 7 idles at gen 1: neither is a fault.
    (pending, ecc) = found[2]
    assert pending.severity is Severity.ERROR
    assert pending.message == (
        f"{B} GPU 2: 2 rows remapped after uncorrectable errors, waiting for a GPU reset; "
        "until then the GPU may hand training corrupted values"
    )
    assert pending.hint == (
        "reset the GPU (`nvidia-smi -r -i 2`, as root, with nothing running on it) before "
        "training on it"
    )
    assert ecc.severity is Severity.WARNING and "2 uncorrected ECC errors" in ecc.message
    (failed,) = found[5]
    assert failed.severity is Severity.ERROR and "spare rows are used up" in failed.message
    (hot,) = found[1]
    assert hot.severity is Severity.WARNING
    assert hot.message.startswith(f"{B} GPU 1 is slowed by its own heat (hardware thermal")
    assert "power limit" not in hot.message and "hardware slowdown" not in hot.message
    assert "cooling" in hot.hint
    braked, link_errors = found[6]
    assert "a power brake from the system" in braked.message and "power supplies" in braked.hint
    assert link_errors.severity is Severity.INFO and "1,234 errors" in link_errors.message
    (narrow,) = found[3]
    assert "runs at x8 of x16 and gen 4 of 5" in narrow.message
    (down,) = found[4]
    assert down.severity is Severity.WARNING and "NVLink link 5 of 18 down" in down.message


def test_a_gpu_the_job_does_not_use_is_only_mentioned(faulty: Scenario) -> None:
    faulty.host(B, gpus=[0, 1])
    found = _gpu_findings(faulty)
    assert found[1][0].severity is Severity.WARNING
    others = [finding for index, findings in found.items() if index != 1 for finding in findings]
    assert others and {f.severity for f in others} == {Severity.INFO}
    assert all(f.message.endswith("(not a GPU this job uses)") for f in others)


def test_an_xid_names_the_gpu_at_its_bus_id(faulty: Scenario) -> None:
    faulty.edit(B, kernel_log=KernelLog(True, xids=(XidEvent("0000:3a:00", 79, ""),), xid_count=1))
    (xid,) = [f for f in faulty.run() if f.code is Code.GPU_XID]
    assert "for GPU 2 (PCI 0000:3a:00) once since boot" in xid.message


@pytest.mark.parametrize(
    ("mask", "said"),
    [
        (0x1, []),
        (0x4, []),
        (0x8, ["a hardware slowdown (heat or the power supply)"]),
        (0x8 | 0x40, ["its own heat (hardware thermal slowdown)"]),
        (0x20 | 0x80 | 0x8, ["its own heat (the driver's thermal slowdown)", "a power brake"]),
    ],
)
def test_only_a_fault_s_reasons_are_said(mask: int, said: list[str]) -> None:
    words = [reason.words for reason in throttled_by(mask)]
    assert len(words) == len(said)
    assert all(word.startswith(start) for word, start in zip(words, said, strict=True))
    assert [reason.words for reason in throttled_by(0x4, faults_only=False)] == ["its power limit"]
