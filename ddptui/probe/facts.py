"""What the probe learned about one host, as typed values.

Every fact a host may not be able to give is typed ``Maybe[T]``: the value, or :data:`NA`
("not available"). :mod:`ddptui.probe.parse` builds them from the probe's document.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Final, Literal, TypeAlias, TypeVar

MAX_GPUS: Final = 64
"""The most GPUs a host can have (NVML's limit): an answer that lists or counts more is not a
host's, and no list of that many is ever built."""

_T = TypeVar("_T")


class NotAvailable(enum.Enum):
    """The type of :data:`NA`. An enum member, so ``x is NA`` narrows types under mypy."""

    NA = "N/A"

    def __str__(self) -> str:
        return self.value


NA: Final = NotAvailable.NA
"""A fact the host could not report (no driver, ``[N/A]`` from nvidia-smi, a failed section)."""

Maybe: TypeAlias = _T | Literal[NotAvailable.NA]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
GpuSource: TypeAlias = Literal["nvml", "nvidia-smi", "none"]
TorchStatus: TypeAlias = Literal["ok", "missing", "timeout", "error"]


@dataclass(frozen=True)
class Interface:
    """A network interface and its IPv4 addresses with their prefix lengths."""

    name: str
    ipv4: tuple[ipaddress.IPv4Interface, ...] = ()


@dataclass(frozen=True)
class PythonFacts:
    version: Maybe[str] = NA
    executable: Maybe[str] = NA
    is_conda: Maybe[bool] = NA
    conda_env: str | None = None
    """The conda environment's name (``"base"`` for the root prefix); ``None`` outside conda."""


@dataclass(frozen=True)
class TorchFacts:
    """torch as a fresh interpreter on the host sees it. Values are ``NA`` unless status is ok."""

    status: TorchStatus
    detail: str = ""
    """Why status is not ``ok``: the import's last error line, or the timeout."""
    version: Maybe[str] = NA
    cuda_build: Maybe[str | None] = NA
    """``torch.version.cuda``: ``None`` for a CPU-only build."""
    cuda_available: Maybe[bool] = NA
    device_count: Maybe[int] = NA
    nccl_version: Maybe[str] = NA
    gloo_available: Maybe[bool] = NA
    flight_recorder: Mapping[str, str] = field(default_factory=dict)
    """The flight recorder's settings this torch reads, by role (``buffer``,
    ``dump_on_timeout``, ``file``) → variable name; empty when it has none or could not say."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class GpuProcess:
    """A compute process holding a GPU."""

    pid: int
    name: Maybe[str] = NA
    used_memory_mib: Maybe[int] = NA


@dataclass(frozen=True)
class GpuHealth:
    """The GPU's own counters of its faults (NVML's, or nvidia-smi's): each ``NA`` where the
    GPU or the driver would not say."""

    pci_bus_id: Maybe[str] = NA
    """As NVML names it: ``00000000:3B:00.0``."""
    throttle_reasons: Maybe[int] = NA
    """NVML's clocks event (throttle) reasons now, a bit mask (``ddptui.health.gpu_health``)."""
    ecc_uncorrected: Maybe[int] = NA
    """Uncorrected ECC errors since the driver last loaded (a boot or a reset)."""
    retired_pages_pending: Maybe[bool] = NA
    """A page retired after ECC errors waits for a reset to take effect (before the A100)."""
    remapped_rows_uncorrectable: Maybe[int] = NA
    remapped_rows_pending: Maybe[bool] = NA
    """A row remapped after an ECC error waits for a reset to take effect (A100 and later)."""
    remap_failed: Maybe[bool] = NA
    """A row could not be remapped: the GPU's spare rows are used up."""
    pcie_gen: Maybe[int] = NA
    pcie_gen_max: Maybe[int] = NA
    """The best generation this GPU and its slot can run at together."""
    pcie_width: Maybe[int] = NA
    pcie_width_max: Maybe[int] = NA
    pcie_replays: Maybe[int] = NA
    """PCIe packets sent again after errors, since boot."""
    nvlinks: Maybe[int] = NA
    """How many NVLink links the GPU has (0 where it has none)."""
    nvlinks_down: tuple[int, ...] = ()
    nvlink_errors: Maybe[int] = NA
    """Replay, recovery and CRC errors of its links that are up, summed."""


@dataclass(frozen=True)
class GpuFacts:
    index: int
    uuid: Maybe[str] = NA
    name: Maybe[str] = NA
    memory_total_mib: Maybe[int] = NA
    memory_used_mib: Maybe[int] = NA
    utilization_pct: Maybe[int] = NA
    processes: Maybe[tuple[GpuProcess, ...]] = NA
    """``NA`` when the driver would not list them, ``()`` when none hold the GPU."""
    health: GpuHealth = GpuHealth()


@dataclass(frozen=True)
class GpuInventory:
    """NVIDIA GPUs and driver. ``source == "none"`` is the no-driver fact, not an error."""

    source: GpuSource = "none"
    driver_version: Maybe[str] = NA
    cuda_driver_version: Maybe[str] = NA
    devices: tuple[GpuFacts, ...] = ()
    problem: str = ""
    """Why NVML or nvidia-smi could not be used, e.g. nvidia-smi's driver error."""
    listed: int | None = None
    """How many devices the answer listed when that was more than :data:`MAX_GPUS`
    (:attr:`devices` is then empty); ``None`` otherwise."""


@dataclass(frozen=True)
class XidEvent:
    """One line the NVIDIA driver wrote to the kernel log: ``NVRM: Xid (PCI:0000:3b:00): 79,
    pid=…, GPU has fallen off the bus.``"""

    pci: str
    """The GPU's PCI bus id as the driver names it, lowercased: ``0000:3b:00``."""
    code: int
    """The Xid: what happened (NVIDIA's catalogue of Xid errors)."""
    text: str
    """What follows the code on the line, as one line of plain text."""


@dataclass(frozen=True)
class KernelLog:
    """The kernel log's Xid lines since boot, as far as the probe could read them."""

    readable: bool | None = None
    """``None``: the probe said nothing of the kernel log."""
    why: str = ""
    """Why it could not be read (``dmesg``'s own words)."""
    restricted: bool | None = None
    """Whether ``kernel.dmesg_restrict`` keeps it from users (``None``: not known)."""
    xids: tuple[XidEvent, ...] = ()
    """The newest Xid lines (at most 32 are sent), oldest first."""
    xid_count: int = 0
    """How many Xid lines the log held since boot: more than :attr:`xids` when it held many."""


@dataclass(frozen=True)
class DiskFacts:
    path: Maybe[str] = NA
    """The workdir, ``~`` expanded on the host."""
    checked_path: Maybe[str] = NA
    """Its nearest existing ancestor, where free space was measured."""
    free_bytes: Maybe[int] = NA
    total_bytes: Maybe[int] = NA


PathKind: TypeAlias = Literal["directory", "link", "other"]


@dataclass(frozen=True)
class PathEntry:
    """A directory or link on the way to the workdir, as ``lstat`` saw it."""

    path: str
    uid: int
    """Its owner."""
    gid: int
    """Its group."""
    mode: int
    """Its permission bits, the sticky bit among them (``stat.S_IMODE``)."""
    kind: PathKind


@dataclass(frozen=True)
class WorkdirSafety:
    """Who could change what the workdir holds: the run's code, and the ranks' stack handler
    (a ``sitecustomize.py`` every rank imports first)."""

    path: str
    """The workdir, ``~`` expanded on the host."""
    uid: int
    """The user the probe ran as, whom the run's processes run as."""
    private_gid: int | None
    """The user's primary group when no one else is in it (named after the user, no other
    members): its write access is the user's own. ``None`` otherwise."""
    exists: bool
    entries: tuple[PathEntry, ...]
    """From ``/``, every directory and link a lookup of the workdir passes through, links
    followed as the kernel follows them."""
    target: PathEntry | None
    """The workdir, or, when it does not exist yet, the directory it would be created in;
    ``None`` when the probe stopped short of both (a directory it may not search, a link loop,
    a path too deep): the entries are then only part of the way."""
    made: tuple[PathEntry, ...] = ()
    """Those of :data:`entries` that are the directories ddptui makes in the workdir (``runs``,
    ``code-cache``…) where they exist already, links followed: held to the workdir's own rule.
    Empty from a probe older than this field."""


@dataclass(frozen=True)
class PortFacts:
    port: int
    in_use: Maybe[bool] = NA
    detail: str = ""
    """Why ``in_use`` is unknown, e.g. permission denied for a port below 1024."""


@dataclass(frozen=True)
class MasterResolution:
    """What node 0's address (as the hosts file gives it) resolves to on one host."""

    name: str
    addresses: tuple[IPAddress, ...] = ()
    """In the resolver's order, which is the order torchrun tries them in."""
    error: str = ""
    """The resolver's message when the name does not resolve (or the lookup timed out)."""


@dataclass(frozen=True)
class HostFacts:
    """Everything one probe run reported. ``section_errors`` maps a failed section to why."""

    hostname: Maybe[str] = NA
    fqdn: Maybe[str] = NA
    resolved: tuple[IPAddress, ...] = ()
    """What the hostname resolves to on the host itself."""
    resolve_error: str = ""
    interfaces: Maybe[tuple[Interface, ...]] = NA
    python: PythonFacts = PythonFacts()
    torch: TorchFacts = TorchFacts(status="error", detail="not reported")
    gpus: GpuInventory = GpuInventory()
    kernel_log: KernelLog = KernelLog()
    disk: DiskFacts = DiskFacts()
    workdir: Maybe[WorkdirSafety] = NA
    """``NA`` when the probe could not say (or is older than this fact)."""
    workdir_identity: Maybe[str] = NA
    """Alike on every host that shares the workdir: a random identity kept in it and the
    inode of its file (a copy of the workdir has the identity, not the inode)."""
    cpu_count: Maybe[int] = NA
    memory_total_bytes: Maybe[int] = NA
    memory_available_bytes: Maybe[int] = NA
    """What new processes can take now without swapping (``MemAvailable``)."""
    pip_packages: Maybe[Mapping[str, str]] = NA
    """Installed distributions (normalized name → version), as ``importlib.metadata`` sees them."""
    conda_packages: Maybe[Mapping[str, str]] | None = None
    """The conda environment's packages; ``None`` when the interpreter is not in one."""
    port: PortFacts | None = None
    """Node 0 only: whether the master port could be bound."""
    master: MasterResolution | None = None
    """``None`` when the probe was not given node 0's address to resolve."""
    time: Maybe[float] = NA
    """The host's ``time.time()`` as the probe printed its answer."""
    section_errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def loopback_addresses(self) -> tuple[IPAddress, ...]:
        """The hostname's addresses that are loopback: the gloo/NCCL "127.0.1.1" trap."""
        return tuple(address for address in self.resolved if address.is_loopback)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every fact; ``NA`` becomes ``null``."""
        result = _jsonable(self)
        assert isinstance(result, dict)
        return result


def clock_offset(probe_time: float, received_at: float) -> float:
    """Host clock minus head clock, from the probe's ``time`` and when its answer arrived.

    The probe stamps its answer as it prints, so compare with the arrival time rather than
    the send time: the probe itself takes a second or two.
    """
    return probe_time - received_at


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    # dataclasses.fields builds its answer anew on each call: more than half the time of a
    # 128-host check's --json went there (31 ms of 54; 7 ms with the names kept).
    return tuple(item.name for item in fields(kind))


def _jsonable(value: Any) -> Any:
    if value is NA:
        return None
    if type(value) in _PLAIN:
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return {name: _jsonable(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_jsonable(item) for item in value]
    if isinstance(value, ipaddress.IPv4Interface | ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    return value
