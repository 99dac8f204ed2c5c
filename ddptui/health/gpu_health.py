"""The GPU's own counters of its faults, in the check's words: a row remap or page retirement
waiting for a reset, uncorrected ECC errors, clocks held down by heat or the power supply, a
PCIe link below its best, NVLink links down or counting errors.

These are the GPU's state now, unlike the kernel log's Xid lines (history): a GPU with memory
waiting for a reset may hand the run corrupted values, so it refuses the launch. A GPU the job
does not select is only mentioned, with the same words."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ddptui.config.model import HostConfig
from ddptui.health.findings import Code, Finding, Severity
from ddptui.health.resources import present_gpus, selected_gpus
from ddptui.health.wording import and_list, plural
from ddptui.probe.facts import NA, GpuFacts, GpuHealth, HostFacts


@dataclass(frozen=True)
class ThrottleReason:
    bit: int
    words: str
    """What holds its clocks down, after "slowed by": ``its own heat``."""
    fix: str
    fault: bool = True
    """A sign of a failing host, not of a GPU working hard (its power limit at full load)."""


COOLING = (
    "check the host's cooling (fans, airflow, inlet temperature; `nvidia-smi -q -d "
    "TEMPERATURE,PERFORMANCE`)"
)
POWER = "check the host's power supplies (a failed supply or a rack over its budget brakes it)"
IDLE_BIT = 0x1
THROTTLE_REASONS = (
    ThrottleReason(0x40, "its own heat (hardware thermal slowdown)", COOLING),
    ThrottleReason(0x20, "its own heat (the driver's thermal slowdown)", COOLING),
    ThrottleReason(0x80, "a power brake from the system", POWER),
    ThrottleReason(0x8, "a hardware slowdown (heat or the power supply)", f"{COOLING}; {POWER}"),
    ThrottleReason(
        0x4,
        "its power limit",
        "nothing, at full load; raise the limit (`nvidia-smi -pl`) if it is set low",
        fault=False,
    ),
)
"""NVML's clocks event reasons that slow training, most telling first. The hardware slowdown
(0x8) is said only when neither of its known causes (0x40, 0x80) is."""


def throttled_by(mask: int, *, faults_only: bool = True) -> tuple[ThrottleReason, ...]:
    """The reasons in NVML's ``mask`` that slow the GPU (by default, only those of a fault)."""
    found = tuple(
        reason
        for reason in THROTTLE_REASONS
        if mask & reason.bit and (reason.fault or not faults_only)
    )
    if any(reason.bit in (0x40, 0x80) for reason in found):
        found = tuple(reason for reason in found if reason.bit != 0x8)
    return found


def reset_command(gpu: GpuFacts) -> str:
    return f"`nvidia-smi -r -i {gpu.index}`, as root, with nothing running on it"


def gpu_health_findings(host: HostConfig, facts: HostFacts) -> Iterator[Finding]:
    selected = {gpu.index for gpu in selected_gpus(host, facts)}
    for gpu in present_gpus(facts):
        for finding in _findings(host, gpu):
            if gpu.index in selected:
                yield finding
            else:
                yield Finding(
                    finding.code,
                    Severity.INFO,
                    finding.host,
                    finding.message + " (not a GPU this job uses)",
                    finding.hint,
                )


def _findings(host: HostConfig, gpu: GpuFacts) -> Iterator[Finding]:
    health = gpu.health
    name = f"{host.name} GPU {gpu.index}"
    reset = reset_command(gpu)
    if health.remap_failed is True:
        yield Finding(
            Code.GPU_MEMORY_PENDING_RESET,
            Severity.ERROR,
            host.name,
            f"{name}: a memory row could not be remapped after an error: its spare rows are "
            "used up",
            f"have the GPU replaced; until then leave it out (`gpus` for {host.name} in the "
            "hosts file)",
        )
    elif health.remapped_rows_pending is True or health.retired_pages_pending is True:
        rows = health.remapped_rows_uncorrectable
        what = (
            f"{plural(rows, 'row')} remapped after uncorrectable errors, waiting"
            if health.remapped_rows_pending is True and rows is not NA and rows > 0
            else "a row remap waiting"
            if health.remapped_rows_pending is True
            else "a page retirement waiting"
        )
        yield Finding(
            Code.GPU_MEMORY_PENDING_RESET,
            Severity.ERROR,
            host.name,
            f"{name}: {what} for a GPU reset; until then the GPU may hand training corrupted "
            "values",
            f"reset the GPU ({reset}) before training on it",
        )
    if health.ecc_uncorrected is not NA and health.ecc_uncorrected > 0:
        yield Finding(
            Code.GPU_ECC_UNCORRECTED,
            Severity.WARNING,
            host.name,
            f"{name}: {plural(health.ecc_uncorrected, 'uncorrected ECC error')} since the "
            "driver last loaded",
            f"reset the GPU ({reset}) before training on it; have it replaced if they recur",
        )
    yield from _throttle(host, name, health)
    yield from _pcie(host, name, health)
    yield from _nvlink(host, name, gpu)


def _throttle(host: HostConfig, name: str, health: GpuHealth) -> Iterator[Finding]:
    if health.throttle_reasons is NA:
        return
    reasons = throttled_by(health.throttle_reasons)
    if reasons:
        yield Finding(
            Code.GPU_THROTTLED,
            Severity.WARNING,
            host.name,
            f"{name} is slowed by {and_list([reason.words for reason in reasons])}: every rank "
            "of a run waits for the slowest GPU",
            "; ".join(dict.fromkeys(reason.fix for reason in reasons)),
        )


def _pcie(host: HostConfig, name: str, health: GpuHealth) -> Iterator[Finding]:
    width, widest = health.pcie_width, health.pcie_width_max
    gen, best = health.pcie_gen, health.pcie_gen_max
    narrow = width is not NA and widest is not NA and 0 < width < widest
    # An idle GPU lowers its link's generation to save power; only a busy one's says anything.
    busy = health.throttle_reasons is not NA and not health.throttle_reasons & IDLE_BIT
    slow = busy and gen is not NA and best is not NA and 0 < gen < best
    if not (narrow or slow):
        return
    said = []
    if narrow:
        said.append(f"x{width} of x{widest}")
    if slow:
        said.append(f"gen {gen} of {best}")
    yield Finding(
        Code.GPU_PCIE_DEGRADED,
        Severity.WARNING,
        host.name,
        f"{name}'s PCIe link runs at {' and '.join(said)}: copies between it and the host "
        "(data loading, NCCL through the CPU) run slower",
        "reseat the GPU or its riser, then check the link (`nvidia-smi -q -d PCI`, `lspci -vv`)",
    )


def _nvlink(host: HostConfig, name: str, gpu: GpuFacts) -> Iterator[Finding]:
    health = gpu.health
    if health.nvlinks is NA or not health.nvlinks:
        return
    if health.nvlinks_down:
        links = and_list([str(link) for link in health.nvlinks_down])
        yield Finding(
            Code.GPU_NVLINK,
            Severity.WARNING,
            host.name,
            f"{name}: NVLink {'link' if len(health.nvlinks_down) == 1 else 'links'} {links} "
            f"of {health.nvlinks} down: traffic between its GPUs goes slower, or not at all",
            f"look at them (`nvidia-smi nvlink -s -i {gpu.index}`) and at the fabric manager "
            f"on NVSwitch hosts (`systemctl status nvidia-fabricmanager`); reset the GPU "
            f"({reset_command(gpu)})",
        )
    if health.nvlink_errors is not NA and health.nvlink_errors > 0:
        yield Finding(
            Code.GPU_NVLINK,
            Severity.INFO,
            host.name,
            f"{name}: its NVLink links counted {plural(health.nvlink_errors, 'error')} "
            "(replays, recoveries, CRC)",
            f"watch them (`nvidia-smi nvlink -e -i {gpu.index}`): a count that climbs while "
            "training is a link to have looked at",
        )
