"""The GPU's own word on its faults: the Xid lines the NVIDIA driver wrote to a host's kernel
log since boot, each named with what it means and what to do (NVIDIA's catalogue of Xid
errors, in ddptui's words).

Since boot is history: a GPU reset since clears the fault but not the line, so what the log
says is a warning to act on, never a refusal to launch. A program's own faults (an illegal
address, a channel it left behind) are said as information: they follow the program, not the
GPU."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ddptui.config.model import HostConfig
from ddptui.health.findings import Code, Finding, Severity
from ddptui.probe.facts import HostFacts, XidEvent


@dataclass(frozen=True)
class XidMeaning:
    words: str
    """What it means, after "Xid N": ``the GPU fell off the bus``."""
    fix: str
    program: bool = False
    """The program that ran caused it, not the GPU."""


RESET = "reset the GPU (`nvidia-smi -r -i {pci}`, as root, with nothing running on it)"
REPLACE = "have the GPU replaced if it comes back"

XIDS: dict[int, XidMeaning] = {
    13: XidMeaning(
        "a graphics engine exception (most often the program's out-of-range access)",
        "look at the program that ran then; the GPU needs nothing unless it recurs with others",
        program=True,
    ),
    31: XidMeaning(
        "a GPU memory page fault (most often the program's illegal address)",
        "look at the program that ran then (compute-sanitizer finds the access)",
        program=True,
    ),
    43: XidMeaning(
        "the GPU stopped the program's work (the program's own fault)",
        "look at the program that ran then; the GPU itself is fine",
        program=True,
    ),
    45: XidMeaning(
        "a program's work was cleaned up (it was ended, or failed earlier)",
        "nothing, unless other Xids came with it",
        program=True,
    ),
    48: XidMeaning(
        "a double-bit ECC error in the GPU's memory",
        f"{RESET} if it was not reset since; {REPLACE}",
    ),
    61: XidMeaning(
        "an internal micro-controller warning",
        f"{RESET} if training on it misbehaves; update the driver if it recurs",
    ),
    62: XidMeaning(
        "an internal micro-controller halt",
        f"{RESET} if it was not reset since; update the driver, then {REPLACE}",
    ),
    63: XidMeaning(
        "a page retirement or row remap recorded after ECC errors",
        f"{RESET} to apply it, if it was not reset since",
    ),
    64: XidMeaning(
        "a page retirement or row remap that could not be recorded",
        f"{RESET}; {REPLACE}",
    ),
    74: XidMeaning(
        "an NVLink error",
        "check its links (`nvidia-smi nvlink -s -i {pci}`) and " + RESET + "; "
        "have the links looked at if it recurs",
    ),
    79: XidMeaning(
        "the GPU fell off the bus",
        "reboot the host (a cold boot if the GPU stays missing); have the GPU, its riser and "
        "its power looked at if it recurs",
    ),
    92: XidMeaning(
        "a high rate of single-bit ECC errors",
        f"watch it; {RESET} and {REPLACE}",
    ),
    94: XidMeaning(
        "a contained ECC error (the program that used the memory was ended)",
        f"{RESET} before training on it, if it was not reset since",
    ),
    95: XidMeaning(
        "an uncontained ECC error (every program on the GPU is affected)",
        f"{RESET} if it was not reset since; {REPLACE}",
    ),
    119: XidMeaning(
        "the GPU's system processor (GSP) did not answer the driver",
        f"{RESET}; update the driver if it recurs",
    ),
    120: XidMeaning(
        "an error in the GPU's system processor (GSP)",
        f"{RESET}; update the driver if it recurs",
    ),
}
"""The Xids a training run meets, in ddptui's words; any other is named by its number."""


UNLISTED = XidMeaning(
    "an error NVIDIA's catalogue of Xid errors explains",
    "look it up in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)",
)


def meaning(code: int) -> XidMeaning:
    return XIDS.get(code, UNLISTED)


def gpu_named(index: int | None, pci: str) -> str:
    """The GPU at PCI bus id ``pci``: ``GPU 3 (PCI 0000:3b:00)`` where its index is known."""
    return f"the GPU at PCI {pci}" if index is None else f"GPU {index} (PCI {pci})"


def gpu_at(facts: HostFacts, pci: str) -> str:
    """The GPU at PCI bus id ``pci`` as the host's NVML numbers it, where it says."""
    found = (gpu.index for gpu in facts.gpus.devices if gpu.health.pci_bus_id == pci)
    return gpu_named(next(found, None), pci)


def xid_findings(host: HostConfig, facts: HostFacts) -> Iterator[Finding]:
    """One finding per GPU and Xid the host's kernel log holds since boot; one saying the log
    could not be read, on a host with NVIDIA GPUs (where Xids would be)."""
    log = facts.kernel_log
    if log.readable is False and facts.gpus.source != "none":
        why = f": {log.why}" if log.why else ""
        restricted = (
            "; `kernel.dmesg_restrict = 1` keeps it from users: `sudo sysctl "
            "kernel.dmesg_restrict=0`, or run the check as a user in the `adm` group"
            if log.restricted
            else ""
        )
        yield Finding(
            Code.KERNEL_LOG_UNREADABLE,
            Severity.INFO,
            host.name,
            f"{host.name}'s kernel log could not be read{why}, so its GPUs' Xid errors were "
            "not looked at",
            f"let the user read it (`dmesg`){restricted}",
        )
        return
    seen: dict[tuple[str, int], list[XidEvent]] = {}
    for event in log.xids:
        seen.setdefault((event.pci, event.code), []).append(event)
    for (pci, code), events in seen.items():
        said = meaning(code)
        times = "once" if len(events) == 1 else f"{len(events)} times"
        last = events[-1].text
        yield Finding(
            Code.GPU_XID,
            Severity.INFO if said.program else Severity.WARNING,
            host.name,
            f"{host.name}: the kernel logged Xid {code}, {said.words}, for {gpu_at(facts, pci)} "
            f"{times} since boot" + (f" (last: {last})" if last else ""),
            said.fix.format(pci=pci),
        )
    unread = log.xid_count - len(log.xids)
    if unread > 0:
        yield Finding(
            Code.GPU_XID,
            Severity.WARNING,
            host.name,
            f"{host.name}: the kernel logged {unread:,} more Xid line(s) since boot than the "
            f"{len(log.xids)} newest read here",
            "read them on the host: `dmesg | grep 'NVRM: Xid'`",
        )
