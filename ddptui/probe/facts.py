"""What the probe learned about one host, as typed values.

Every fact a host may not be able to give is typed ``Maybe[T]``: the value, or :data:`NA`
("not available"). A missing, null or mistyped field in the probe's JSON becomes ``NA``
instead of an exception, so one odd host or driver never breaks a check; only output that is
not a probe document at all raises :class:`ProbeError`.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import math
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Final, Literal, TypeAlias, TypeGuard, TypeVar

from ddptui.untrusted import count, plain

PROBE_VERSION: Final = 1
"""The ``probe_version`` this parser reads; the probe script prints the same number."""

MAX_DOCUMENT_CHARS: Final = 16 * 1024 * 1024
"""Longer output is not a probe document (a real one is tens of KiB, package lists included)."""

MAX_GPUS: Final = 64
"""The most GPUs a host can have (NVML's limit): an answer that lists or counts more is not a
host's, and no list of that many is ever built."""
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


class ProbeError(Exception):
    """The probe's output is not a probe document (garbage, truncated, another version)."""


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
class GpuFacts:
    index: int
    uuid: Maybe[str] = NA
    name: Maybe[str] = NA
    memory_total_mib: Maybe[int] = NA
    memory_used_mib: Maybe[int] = NA
    utilization_pct: Maybe[int] = NA
    processes: Maybe[tuple[GpuProcess, ...]] = NA
    """``NA`` when the driver would not list them, ``()`` when none hold the GPU."""


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
    disk: DiskFacts = DiskFacts()
    workdir: Maybe[WorkdirSafety] = NA
    """``NA`` when the probe could not say (or is older than this fact)."""
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


def parse_facts(text: str) -> HostFacts:
    """Parse the probe's stdout. Raises :class:`ProbeError` if it is not a probe document."""
    doc = _load_document(text)
    version = doc.get("probe_version")
    if version != PROBE_VERSION:
        raise ProbeError(
            f"probe reported probe_version {version!r}, this ddptui reads {PROBE_VERSION}"
        )
    errors: dict[str, str] = {}

    def section(name: str) -> dict[str, Any]:
        value = doc.get(name)
        if not isinstance(value, dict):
            errors[name] = "missing from the probe's output"
            return {}
        if isinstance(value.get("error"), str):
            errors[name] = value["error"]
            return {}
        return value

    host = section("host")
    packages = section("packages")
    system = section("system")
    return HostFacts(
        hostname=_get(host, "hostname", str),
        fqdn=_get(host, "fqdn", str),
        resolved=tuple(_items(host.get("addresses"), _address)),
        resolve_error=_str(host.get("resolve_error")),
        interfaces=_interfaces(section("interfaces")),
        python=_python(section("python")),
        torch=_torch(doc.get("torch")),
        gpus=_gpus(section("gpus")),
        disk=_disk(section("disk")),
        workdir=_workdir(doc.get("workdir"), errors),
        cpu_count=_get(system, "cpu_count", int),
        memory_total_bytes=_get(system, "memory_total_bytes", int),
        memory_available_bytes=_get(system, "memory_available_bytes", int),
        pip_packages=_packages(packages.get("pip")),
        conda_packages=None if packages.get("conda") is None else _packages(packages["conda"]),
        port=_port(doc.get("port")),
        master=_master(doc.get("master")),
        time=_get(doc, "time", float),
        section_errors=errors,
    )


def _load_document(text: str) -> dict[str, Any]:
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ProbeError(f"the probe printed more than {MAX_DOCUMENT_CHARS} characters")
    # A login shell may print banners before the probe runs; the document is the last line.
    candidates = [text, *text.strip().splitlines()[-1:]]
    for candidate in candidates:
        try:
            doc = json.loads(candidate)
        except ValueError:
            continue
        except RecursionError:
            # Arrays or objects nested thousands deep: never a probe document.
            raise ProbeError("the probe printed JSON nested too deeply to read") from None
        if isinstance(doc, dict):
            return doc
    snippet = plain(text.strip(), limit=200, one_line=True) or "(no output)"
    raise ProbeError(f"the probe did not print a JSON document; it printed: {snippet}")


def _get(data: Mapping[str, Any], key: str, kind: type[_T]) -> Maybe[_T]:
    value = data.get(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:
            return NA
    # JSON's NaN and Infinity parse to floats, but no fact is infinite or not a number (and
    # `check --json` could not print one).
    if isinstance(value, float) and not math.isfinite(value):
        return NA
    # bool is an int subclass; a JSON true is never a count.
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    return NA


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _items(value: Any, parse: Callable[[Any], _T | None]) -> list[_T]:
    if not isinstance(value, list):
        return []
    parsed = (parse(item) for item in value)
    return [item for item in parsed if item is not None]


def _address(value: Any) -> IPAddress | None:
    # ip_address() also takes integers: a mistyped 7 is not the address 0.0.0.7.
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _interfaces(data: Mapping[str, Any]) -> Maybe[tuple[Interface, ...]]:
    if not isinstance(data.get("items"), list):
        return NA
    return tuple(_items(data["items"], _interface))


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

    return Interface(name=value["name"], ipv4=tuple(_items(value.get("ipv4"), ipv4)))


def _python(data: Mapping[str, Any]) -> PythonFacts:
    conda_env = data.get("conda_env")
    return PythonFacts(
        version=_get(data, "version", str),
        executable=_get(data, "executable", str),
        is_conda=_get(data, "is_conda", bool),
        conda_env=conda_env if isinstance(conda_env, str) else None,
    )


def _torch(data: Any) -> TorchFacts:
    if not isinstance(data, dict):
        return TorchFacts(status="error", detail="missing from the probe's output")
    status = data.get("status")
    if status in ("missing", "timeout"):
        return TorchFacts(status=status, detail=_str(data.get("detail")))
    if status != "ok":
        detail = _str(data.get("detail")) or _str(data.get("error")) or "no status reported"
        return TorchFacts(status="error", detail=detail)
    cuda = data.get("cuda", NA)
    return TorchFacts(
        status="ok",
        version=_get(data, "version", str),
        cuda_build=cuda if cuda is None or isinstance(cuda, str) else NA,
        cuda_available=_get(data, "cuda_available", bool),
        device_count=_get(data, "device_count", int),
        nccl_version=_get(data, "nccl", str),
        gloo_available=_get(data, "gloo_available", bool),
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


def _gpus(data: Mapping[str, Any]) -> GpuInventory:
    source = data.get("source")
    if source not in ("nvml", "nvidia-smi"):
        return GpuInventory(problem=_str(data.get("problem")))
    rows = data.get("devices")
    listed = len(rows) if isinstance(rows, list) else 0
    if listed > MAX_GPUS:
        # Only counted: a million rows would take the check seconds and megabytes to read.
        return GpuInventory(
            source=source,
            driver_version=_get(data, "driver_version", str),
            cuda_driver_version=_get(data, "cuda_driver_version", str),
            problem=f"{source} listed {listed:,} GPUs; a host has at most {MAX_GPUS}",
            listed=listed,
        )
    return GpuInventory(
        source=source,
        driver_version=_get(data, "driver_version", str),
        cuda_driver_version=_get(data, "cuda_driver_version", str),
        devices=tuple(_items(rows, _gpu)),
        problem=_str(data.get("problem")),
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
        uuid=_get(value, "uuid", str),
        name=_get(value, "name", str),
        memory_total_mib=_count(value.get("memory_total_mib"), MAX_GPU_MIB),
        memory_used_mib=_count(value.get("memory_used_mib"), MAX_GPU_MIB),
        utilization_pct=_count(value.get("utilization_pct"), 100),
        processes=tuple(_items(processes, _gpu_process)) if isinstance(processes, list) else NA,
    )


def _gpu_process(value: Any) -> GpuProcess | None:
    if not isinstance(value, dict):
        return None
    pid = count(value.get("pid"), MAX_PID)
    if pid is None:
        return None
    return GpuProcess(
        pid=pid,
        name=_get(value, "name", str),
        used_memory_mib=_count(value.get("used_memory_mib"), MAX_GPU_MIB),
    )


def _count(value: Any, high: int) -> Maybe[int]:
    number = count(value, high)
    return NA if number is None else number


def _disk(data: Mapping[str, Any]) -> DiskFacts:
    return DiskFacts(
        path=_get(data, "path", str),
        checked_path=_get(data, "checked_path", str),
        free_bytes=_get(data, "free_bytes", int),
        total_bytes=_get(data, "total_bytes", int),
    )


def _workdir(value: Any, errors: dict[str, str]) -> Maybe[WorkdirSafety]:
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
    entries = tuple(_items(rows, _path_entry))
    target = value.get("target")
    index = None if target is None else count(target, len(entries) - 1)
    if len(entries) != len(rows) or (target is not None and index is None):
        return NA
    return WorkdirSafety(
        path=path,
        uid=uid,
        # Anything else is no private group: the stricter reading.
        private_gid=count(value.get("private_gid"), MAX_UID),
        exists=exists,
        entries=entries,
        target=None if index is None else entries[index],
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


def _packages(value: Any) -> Maybe[Mapping[str, str]]:
    if not isinstance(value, dict):
        return NA
    return {name: version for name, version in value.items() if isinstance(version, str)}


def _port(value: Any) -> PortFacts | None:
    if not isinstance(value, dict):
        return None
    port = _get(value, "port", int)
    if port is NA:
        return None
    detail = _str(value.get("detail")) or _str(value.get("error"))
    return PortFacts(port=port, in_use=_get(value, "in_use", bool), detail=detail)


def _master(value: Any) -> MasterResolution | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    return MasterResolution(
        name=value["name"],
        addresses=tuple(_items(value.get("addresses"), _address)),
        error=_str(value.get("error")),
    )


def _jsonable(value: Any) -> Any:
    if value is NA:
        return None
    if is_dataclass(value) and not isinstance(value, type):
        return {item.name: _jsonable(getattr(value, item.name)) for item in fields(value)}
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_jsonable(item) for item in value]
    if isinstance(value, ipaddress.IPv4Interface | ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    return value
