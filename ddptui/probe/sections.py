"""Each section of the probe's document read into its value: whatever a host sends in one is
that value, with :data:`~ddptui.probe.facts.NA` where a fact is missing or mistyped, or nothing
at all, never an exception."""

from __future__ import annotations

import ipaddress
import re
import stat
from collections.abc import Mapping
from typing import Any, Final, TypeGuard

from ddptui.probe.facts import (
    MAX_GPUS,
    NA,
    DiskFacts,
    GpuFacts,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    Interface,
    KernelLog,
    MasterResolution,
    Maybe,
    PathEntry,
    PathKind,
    PortFacts,
    PythonFacts,
    TorchFacts,
    WorkdirSafety,
    XidEvent,
)
from ddptui.probe.fields import (
    address_or_none,
    bounded_count,
    parsed_items,
    text_or_empty,
    typed_field,
)
from ddptui.untrusted import count, plain

MAX_GPU_MIB: Final = 2**30
"""More memory (MiB) than any GPU has, by far: a larger figure is not a GPU's."""
MAX_PID: Final = 2**22
"""Linux's ``PID_MAX_LIMIT``."""
MAX_PATH_ENTRIES: Final = 64
"""The most directories and links the probe records on the way to the workdir."""
MAX_PATH_CHARS: Final = 4096
"""Linux's ``PATH_MAX``: no path the probe looked up is longer."""
MAX_UID: Final = 2**32 - 1
"""Linux's uids and gids are 32 bits."""
MAX_MODE: Final = 0o177777
"""``st_mode`` is 16 bits: the file's type and its permissions."""
MAX_INODE: Final = 2**64 - 1
_IDENTITY: Final = re.compile(r"[0-9a-f]{32}")
"""A workdir's identity as the probe makes it: 16 random bytes in lower-case hex."""


def read_interfaces(data: Mapping[str, Any]) -> Maybe[tuple[Interface, ...]]:
    if not isinstance(data.get("items"), list):
        return NA
    return tuple(parsed_items(data["items"], _interface))


def _interface(value: Any) -> Interface | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None

    def ipv4(entry: Any) -> ipaddress.IPv4Interface | None:
        if not isinstance(entry, dict):
            return None
        try:
            return ipaddress.IPv4Interface(f"{entry['address']}/{entry['prefixlen']}")
        except (KeyError, ValueError):
            return None

    return Interface(name=value["name"], ipv4=tuple(parsed_items(value.get("ipv4"), ipv4)))


def read_python(data: Mapping[str, Any]) -> PythonFacts:
    conda_env = data.get("conda_env")
    return PythonFacts(
        version=typed_field(data, "version", str),
        executable=typed_field(data, "executable", str),
        is_conda=typed_field(data, "is_conda", bool),
        conda_env=conda_env if isinstance(conda_env, str) else None,
    )


def read_torch(data: Any) -> TorchFacts:
    if not isinstance(data, dict):
        return TorchFacts(status="error", detail="missing from the probe's output")
    status = data.get("status")
    if status in ("missing", "timeout"):
        return TorchFacts(status=status, detail=text_or_empty(data.get("detail")))
    if status != "ok":
        detail = (
            text_or_empty(data.get("detail"))
            or text_or_empty(data.get("error"))
            or "no status reported"
        )
        return TorchFacts(status="error", detail=detail)
    cuda = data.get("cuda", NA)
    return TorchFacts(
        status="ok",
        version=typed_field(data, "version", str),
        cuda_build=cuda if cuda is None or isinstance(cuda, str) else NA,
        cuda_available=typed_field(data, "cuda_available", bool),
        device_count=typed_field(data, "device_count", int),
        nccl_version=typed_field(data, "nccl", str),
        gloo_available=typed_field(data, "gloo_available", bool),
        flight_recorder=_flight_recorder(data.get("flight_recorder")),
    )


FLIGHT_RECORDER_ROLES = ("buffer", "dump_on_timeout", "file")


def _flight_recorder(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {
        role: name
        for role in FLIGHT_RECORDER_ROLES
        if isinstance(name := value.get(role), str)
        and name.startswith("TORCH_")
        and len(name) <= 64
        and all(char.isascii() and (char.isupper() or char == "_") for char in name)
    }


def read_gpus(data: Mapping[str, Any]) -> GpuInventory:
    source = data.get("source")
    if source not in ("nvml", "nvidia-smi"):
        return GpuInventory(problem=text_or_empty(data.get("problem")))
    rows = data.get("devices")
    listed = len(rows) if isinstance(rows, list) else 0
    if listed > MAX_GPUS:
        # Only counted: a million rows would take the check seconds and megabytes to read.
        return GpuInventory(
            source=source,
            driver_version=typed_field(data, "driver_version", str),
            cuda_driver_version=typed_field(data, "cuda_driver_version", str),
            problem=f"{source} listed {listed:,} GPUs; a host has at most {MAX_GPUS}",
            listed=listed,
        )
    return GpuInventory(
        source=source,
        driver_version=typed_field(data, "driver_version", str),
        cuda_driver_version=typed_field(data, "cuda_driver_version", str),
        devices=tuple(parsed_items(rows, _gpu)),
        problem=text_or_empty(data.get("problem")),
    )


def _gpu(value: Any) -> GpuFacts | None:
    if not isinstance(value, dict):
        return None
    index = count(value.get("index"), MAX_GPUS - 1)
    if index is None:
        return None
    processes = value.get("processes")
    return GpuFacts(
        index=index,
        uuid=typed_field(value, "uuid", str),
        name=typed_field(value, "name", str),
        memory_total_mib=bounded_count(value.get("memory_total_mib"), MAX_GPU_MIB),
        memory_used_mib=bounded_count(value.get("memory_used_mib"), MAX_GPU_MIB),
        utilization_pct=bounded_count(value.get("utilization_pct"), 100),
        processes=tuple(parsed_items(processes, _gpu_process))
        if isinstance(processes, list)
        else NA,
        health=_gpu_health(value.get("health")),
    )


MAX_LINKS: Final = 64
"""More NVLink links than any GPU has (18 on a Blackwell)."""
MAX_ERROR_COUNT: Final = 2**63 - 1
"""NVML's counters are 64-bit unsigned; a count past that is no GPU's."""
MAX_PCIE_GEN: Final = 16
MAX_PCIE_WIDTH: Final = 64
_PCI_BUS_ID: Final = re.compile(
    r"(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})(?:\.[0-7])?"
)


def pci_slot(text: str) -> str | None:
    """A PCI bus id as the kernel log names a GPU (``0000:3b:00``), from NVML's
    (``00000000:3B:00.0``) or the log's own, so the two can be matched; None for no bus id."""
    found = _PCI_BUS_ID.fullmatch(text)
    if found is None:
        return None
    domain = int(found["domain"], 16)
    return f"{domain:04x}:{found['bus'].lower()}:{found['device'].lower()}"


def _gpu_health(value: Any) -> GpuHealth:
    if not isinstance(value, dict):
        return GpuHealth()
    bus_id = value.get("pci_bus_id")
    slot = pci_slot(bus_id) if isinstance(bus_id, str) else None
    down = value.get("nvlinks_down")
    links = bounded_count(value.get("nvlinks"), MAX_LINKS)
    return GpuHealth(
        pci_bus_id=NA if slot is None else slot,
        throttle_reasons=bounded_count(value.get("throttle_reasons"), MAX_ERROR_COUNT),
        ecc_uncorrected=bounded_count(value.get("ecc_uncorrected"), MAX_ERROR_COUNT),
        retired_pages_pending=typed_field(value, "retired_pages_pending", bool),
        remapped_rows_uncorrectable=bounded_count(
            value.get("remapped_rows_uncorrectable"), MAX_ERROR_COUNT
        ),
        remapped_rows_pending=typed_field(value, "remapped_rows_pending", bool),
        remap_failed=typed_field(value, "remap_failed", bool),
        pcie_gen=bounded_count(value.get("pcie_gen"), MAX_PCIE_GEN),
        pcie_gen_max=bounded_count(value.get("pcie_gen_max"), MAX_PCIE_GEN),
        pcie_width=bounded_count(value.get("pcie_width"), MAX_PCIE_WIDTH),
        pcie_width_max=bounded_count(value.get("pcie_width_max"), MAX_PCIE_WIDTH),
        pcie_replays=bounded_count(value.get("pcie_replays"), MAX_ERROR_COUNT),
        nvlinks=links,
        nvlinks_down=tuple(
            sorted({link for link in down[:MAX_LINKS] if count(link, MAX_LINKS - 1) is not None})
        )
        if isinstance(down, list) and links is not NA
        else (),
        nvlink_errors=bounded_count(value.get("nvlink_errors"), MAX_ERROR_COUNT),
    )


def _gpu_process(value: Any) -> GpuProcess | None:
    if not isinstance(value, dict):
        return None
    pid = count(value.get("pid"), MAX_PID)
    if pid is None:
        return None
    return GpuProcess(
        pid=pid,
        name=typed_field(value, "name", str),
        used_memory_mib=bounded_count(value.get("used_memory_mib"), MAX_GPU_MIB),
    )


def read_disk(data: Mapping[str, Any]) -> DiskFacts:
    return DiskFacts(
        path=typed_field(data, "path", str),
        checked_path=typed_field(data, "checked_path", str),
        free_bytes=typed_field(data, "free_bytes", int),
        total_bytes=typed_field(data, "total_bytes", int),
    )


def read_workdir(value: Any, errors: dict[str, str]) -> Maybe[WorkdirSafety]:
    """All or nothing: a part of the way left out could be the part another user can change."""
    if not isinstance(value, dict):
        return NA
    if isinstance(value.get("error"), str):
        errors["workdir"] = value["error"]
        return NA
    path, uid, exists = value.get("path"), count(value.get("uid"), MAX_UID), value.get("exists")
    if not (_is_path(path) and uid is not None and isinstance(exists, bool)):
        return NA
    rows = value.get("entries")
    if not isinstance(rows, list) or not 0 < len(rows) <= MAX_PATH_ENTRIES:
        return NA
    entries = tuple(parsed_items(rows, _path_entry))
    target = value.get("target")
    index = None if target is None else count(target, len(entries) - 1)
    if len(entries) != len(rows) or (target is not None and index is None):
        return NA
    made = value.get("made", [])
    if not isinstance(made, list) or len(made) > MAX_PATH_ENTRIES:
        return NA
    made_at = [at for item in made if (at := count(item, len(entries) - 1)) is not None]
    if len(made_at) != len(made):
        return NA
    return WorkdirSafety(
        path=path,
        uid=uid,
        # Anything else is no private group: the stricter reading.
        private_gid=count(value.get("private_gid"), MAX_UID),
        exists=exists,
        entries=entries,
        target=None if index is None else entries[index],
        made=tuple(entries[at] for at in made_at),
    )


def _path_entry(value: Any) -> PathEntry | None:
    if not isinstance(value, dict) or not _is_path(value.get("path")):
        return None
    uid, gid = count(value.get("uid"), MAX_UID), count(value.get("gid"), MAX_UID)
    mode = count(value.get("mode"), MAX_MODE)
    if uid is None or gid is None or mode is None:
        return None
    kind: PathKind = (
        "directory" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode) else "other"
    )
    return PathEntry(path=value["path"], uid=uid, gid=gid, mode=stat.S_IMODE(mode), kind=kind)


def _is_path(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and value.startswith("/") and len(value) <= MAX_PATH_CHARS


def read_packages(value: Any) -> Maybe[Mapping[str, str]]:
    if not isinstance(value, dict):
        return NA
    return {name: version for name, version in value.items() if isinstance(version, str)}


def read_workdir_identity(value: Any) -> Maybe[str]:
    """A probe that could not keep an identity (a read-only workdir) shares nothing, as far
    as the check can tell: no finding rests on it alone."""
    if not isinstance(value, dict):
        return NA
    identity, inode = value.get("id"), count(value.get("inode"), MAX_INODE)
    if not isinstance(identity, str) or not _IDENTITY.fullmatch(identity) or inode is None:
        return NA
    return f"{identity}/{inode}"


def read_port(value: Any) -> PortFacts | None:
    if not isinstance(value, dict):
        return None
    port = typed_field(value, "port", int)
    if port is NA:
        return None
    detail = text_or_empty(value.get("detail")) or text_or_empty(value.get("error"))
    return PortFacts(port=port, in_use=typed_field(value, "in_use", bool), detail=detail)


def read_master(value: Any) -> MasterResolution | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    return MasterResolution(
        name=value["name"],
        addresses=tuple(parsed_items(value.get("addresses"), address_or_none)),
        error=text_or_empty(value.get("error")),
    )


MAX_XID_EVENTS: Final = 32
"""The Xid lines the probe sends at most (the newest): more are counted, not read."""
MAX_XID_COUNT: Final = 10**9
_XID_LINE: Final = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\)"
    r": (?P<code>\d{1,4})\b,? ?(?P<text>.*)"
)
"""A driver's Xid line, older drivers' (``NVRM: Xid (0000:03:00): 14, Channel …``) and newer
ones' (``NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…, GPU has fallen off the bus.``)."""


def read_kernel_log(data: Any) -> KernelLog:
    """The probe's ``kernel_log`` section; an older probe's answer without it is a log not
    looked at (``readable`` None), a section that failed one that could not be read."""
    if not isinstance(data, dict):
        return KernelLog()
    if isinstance(data.get("error"), str):
        return KernelLog(readable=False, why=plain(data["error"], limit=300, one_line=True))
    readable = data.get("readable")
    if readable is not True:
        restricted = data.get("restricted")
        return KernelLog(
            readable=False,
            why=plain(text_or_empty(data.get("why")), limit=300, one_line=True),
            restricted=restricted if isinstance(restricted, bool) else None,
        )
    lines = data.get("xid_lines")
    events = [
        event
        for line in (lines[-MAX_XID_EVENTS:] if isinstance(lines, list) else [])
        if (event := xid_event(line)) is not None
    ]
    counted = count(data.get("xid_count"), MAX_XID_COUNT)
    return KernelLog(
        readable=True,
        xids=tuple(events),
        xid_count=max(counted if counted is not None else 0, len(events)),
    )


def xid_event(line: Any) -> XidEvent | None:
    if not isinstance(line, str):
        return None
    found = _XID_LINE.search(line[:1024])
    if found is None:
        return None
    return XidEvent(
        pci=pci_slot(found["pci"]) or found["pci"].lower(),
        code=int(found["code"]),
        text=plain(found["text"].strip(), limit=200, one_line=True),
    )
