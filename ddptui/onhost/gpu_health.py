"""A GPU's own counters of its faults, read on its host: the clocks' throttle reasons,
uncorrected ECC errors, pages or rows waiting for a reset to be retired or remapped, the PCIe
link against its best, NVLink links down and their error counters.

Shared by the check's probe and the agent's heartbeat, so both say the same of a GPU. Through
NVML (``pynvml``, handed in: this module imports nothing a host may lack), each counter asked
on its own, since a GPU that does not support one (row remapping before the A100, NVLink on a
PCIe card) answers the others; else through ``nvidia-smi``'s CSV queries. Every key is left
out where the GPU would not say: absent is "not known", never "healthy"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# nvml.h's values: stable across drivers, and a stand-in pynvml need not define them.
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
NVLINK_MAX_LINKS = 18
NVLINK_ERROR_COUNTERS = (0, 1, 2, 3)
"""DL replay, DL recovery, CRC flit, CRC data."""

SMI_HEALTH_FIELDS = (
    "index,pci.bus_id,{reasons},ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"
)
SMI_REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
"""The driver's name for the throttle reasons, newest first: 535 renamed them "event"."""
SMI_REMAPPED_ROWS = (
    "gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,"
    "remapped_rows.pending,remapped_rows.failure"
)


def asked(nvml: Any, call: str, *args: Any) -> Any:
    """NVML's answer to ``call``, or None where it fails or this pynvml lacks it (old)."""
    try:
        return getattr(nvml, call)(*args)
    except Exception:
        return None


def text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def nvml_health(nvml: Any, handle: Any, nvlink: bool = True) -> dict[str, Any]:
    """What NVML says of one GPU's health. ``nvlink=False`` skips the links, which cost up to
    a hundred calls a GPU: the heartbeat asks them less often than the rest."""
    health: dict[str, Any] = {}
    pci = asked(nvml, "nvmlDeviceGetPciInfo", handle)
    if pci is not None:
        health["pci_bus_id"] = text(getattr(pci, "busId", None))
    reasons = asked(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = asked(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    health["throttle_reasons"] = reasons
    health["ecc_uncorrected"] = asked(
        nvml, "nvmlDeviceGetTotalEccErrors", handle, MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC
    )
    pending = asked(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    health["retired_pages_pending"] = None if pending is None else bool(pending)
    rows = asked(nvml, "nvmlDeviceGetRemappedRows", handle)
    if isinstance(rows, tuple) and len(rows) == 4:
        health["remapped_rows_correctable"] = rows[0]
        health["remapped_rows_uncorrectable"] = rows[1]
        health["remapped_rows_pending"] = bool(rows[2])
        health["remap_failed"] = bool(rows[3])
    health["pcie_gen"] = asked(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle)
    health["pcie_gen_max"] = asked(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)
    health["pcie_width"] = asked(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle)
    health["pcie_width_max"] = asked(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)
    health["pcie_replays"] = asked(nvml, "nvmlDeviceGetPcieReplayCounter", handle)
    if nvlink:
        health.update(nvml_links(nvml, handle))
    return {key: value for key, value in health.items() if value is not None}


def nvml_links(nvml: Any, handle: Any) -> dict[str, Any]:
    """The GPU's NVLink links: how many, which are down, their errors summed. Links are
    numbered from 0; the first a GPU does not have ends them."""
    down: list[int] = []
    errors = 0
    links = 0
    for link in range(NVLINK_MAX_LINKS):
        state = asked(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            break
        links += 1
        if not state:
            down.append(link)
            continue
        for counter in NVLINK_ERROR_COUNTERS:
            count = asked(nvml, "nvmlDeviceGetNvLinkErrorCounter", handle, link, counter)
            errors += count if isinstance(count, int) else 0
    if not links:
        return {}
    return {"nvlinks": links, "nvlinks_down": down, "nvlink_errors": errors}


def smi_field(field: str) -> str | None:
    """``[N/A]``, ``[Not Supported]`` and friends all mean the driver will not say."""
    field = field.strip()
    return None if not field or field.startswith("[") or field == "N/A" else field


def smi_number(field: str) -> int | None:
    value = smi_field(field)
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(float(value))
    except ValueError:
        return None


def smi_flag(field: str) -> bool | None:
    """Yes or no, as the driver words it; a count (of rows pending) is yes when above 0."""
    value = (smi_field(field) or "").lower()
    if value in ("yes", "true", "enabled", "active"):
        return True
    if value in ("no", "false", "disabled", "not active"):
        return False
    return int(value) > 0 if value.isdigit() else None


def smi_health(run: Callable[..., str]) -> dict[int, dict[str, Any]]:
    """What ``nvidia-smi`` says of each GPU's health, by index. ``run(*args)`` runs it and
    returns its output, raising when it fails; NVLink is left to NVML (its text is no CSV)."""
    csv = "--format=csv,noheader,nounits"
    output = None
    for reasons in SMI_REASONS:
        try:
            output = run("--query-gpu=" + SMI_HEALTH_FIELDS.format(reasons=reasons), csv)
            break
        except Exception:
            continue
    found: dict[int, dict[str, Any]] = {}
    by_bus: dict[str, dict[str, Any]] = {}
    for line in (output or "").splitlines()[:64]:
        cells = line.split(", ")
        index = smi_number(cells[0]) if len(cells) == 9 else None
        if index is None:
            continue
        bus_id = smi_field(cells[1])
        health: dict[str, Any] = {
            "pci_bus_id": bus_id,
            "throttle_reasons": smi_number(cells[2]),
            "ecc_uncorrected": smi_number(cells[3]),
            "retired_pages_pending": smi_flag(cells[4]),
            "pcie_gen": smi_number(cells[5]),
            "pcie_gen_max": smi_number(cells[6]),
            "pcie_width": smi_number(cells[7]),
            "pcie_width_max": smi_number(cells[8]),
        }
        found[index] = health
        by_bus[(bus_id or "").lower()] = health
    try:
        rows = run("--query-remapped-rows=" + SMI_REMAPPED_ROWS, csv)
    except Exception:
        rows = ""
    for line in rows.splitlines()[:64]:
        cells = line.split(", ")
        remapped = by_bus.get(cells[0].strip().lower()) if len(cells) == 5 else None
        if remapped is None:
            continue
        remapped["remapped_rows_correctable"] = smi_number(cells[1])
        remapped["remapped_rows_uncorrectable"] = smi_number(cells[2])
        remapped["remapped_rows_pending"] = smi_flag(cells[3])
        remapped["remap_failed"] = smi_flag(cells[4])
    return {
        index: {key: value for key, value in health.items() if value is not None}
        for index, health in found.items()
    }
