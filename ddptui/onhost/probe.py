"""ddptui host probe: prints one JSON document of facts about the machine it runs on.

Sent on stdin to each host's configured Python (``python - ARGS…``), so it must run on
Python 3.8+ with the standard library alone, and it must never raise: a section that fails
is recorded as ``{"error": "…"}`` and the rest still report. Annotations are never
evaluated (``from __future__ import annotations``), which keeps newer typing syntax safe.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROBE_VERSION = 1
SMI_TIMEOUT_S = 10.0
# getaddrinfo has no timeout of its own: with an unreachable DNS server it waits for the
# resolver's timeout × attempts × servers (often 10-30 s) before failing.
RESOLVE_TIMEOUT_S = 5.0
QUERY_GPU_FIELDS = "index,uuid,name,memory.total,memory.used,utilization.gpu,driver_version"
QUERY_APPS_FIELDS = "gpu_uuid,pid,process_name,used_memory"
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
MIB = 1024 * 1024
MAX_PATH_ENTRIES = 64
"""Directories and links the workdir's walk records at most: a deeper path is left unjudged."""
MAX_SYMLINKS = 40
"""Links followed in one walk: Linux's limit for one lookup."""
PATH_MAX = 4096
"""Linux's longest path: a walk that builds a longer one stops."""

# Runs in a child interpreter: a broken CUDA install can hang or crash `import torch`,
# and the probe has to report that rather than suffer it.
TORCH_SNIPPET = r"""
import importlib.util, json, sys
if importlib.util.find_spec("torch") is None:
    print(json.dumps({"status": "missing"}))
    sys.exit(0)
import torch

def guarded(fn):
    try:
        return fn()
    except Exception:
        return None

# torch's flight recorder: each setting under the names this torch reads, newest first (they
# changed from TORCH_NCCL_* to TORCH_FR_*); looked for in its libraries rather than guessed.
FLIGHT_RECORDER = {
    "buffer": ["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"],
    "dump_on_timeout": ["TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"],
    "file": ["TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"],
}

def flight_recorder():
    import mmap, os
    found = {}
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    for library in ("libtorch_cpu.so", "libtorch_cuda.so"):
        path = os.path.join(lib, library)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as handle, mmap.mmap(
            handle.fileno(), 0, access=mmap.ACCESS_READ
        ) as text:
            for role, names in FLIGHT_RECORDER.items():
                for name in names:
                    if role not in found and text.find(name.encode() + b"\0") >= 0:
                        found[role] = name
    return found

def nccl_version():
    version = torch.cuda.nccl.version()
    if isinstance(version, int):
        version = (version // 1000, version % 1000 // 100, version % 100)
    return ".".join(str(part) for part in version)

print(json.dumps({
    "status": "ok",
    "version": torch.__version__,
    "cuda": torch.version.cuda,
    "cuda_available": guarded(torch.cuda.is_available),
    "device_count": guarded(torch.cuda.device_count),
    "nccl": guarded(nccl_version),
    "nccl_available": guarded(torch.distributed.is_nccl_available),
    "gloo_available": guarded(torch.distributed.is_gloo_available),
    "flight_recorder": guarded(flight_recorder),
}))
"""

TORCH_CACHE_DIR = "probe-cache"
"""Under the workdir: what the last ``import torch`` reported, per host, kept while nothing it
depends on changed. The import costs seconds of CPU (tens on a network filesystem) on every
check, launch and resume, and its answer rarely changes."""
TORCH_CACHE_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
)
"""What decides which GPUs and libraries torch finds, besides its files."""


class SectionError(Exception):
    """A section's own explanation of why it has no value (shown as-is to the user)."""


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return type(exc).__name__ + (": " + text if text else "")


def section(collect: Callable[[], Any]) -> Any:
    try:
        return collect()
    except SectionError as exc:
        return {"error": str(exc)}
    except Exception as exc:
        return {"error": describe(exc)}


def maybe(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def host_section() -> dict[str, Any]:
    hostname = socket.gethostname()
    result: dict[str, Any] = {"hostname": hostname, "fqdn": None, "addresses": []}
    try:
        # AI_CANONNAME gives the FQDN from the same lookup: getfqdn()'s reverse lookup can
        # stall for seconds on a host without a reachable DNS server.
        infos = socket.getaddrinfo(hostname, None, 0, socket.SOCK_STREAM, 0, socket.AI_CANONNAME)
    except OSError as exc:
        result["resolve_error"] = describe(exc)
        return result
    result["fqdn"] = infos[0][3] or hostname
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in addresses:
            addresses.append(address)
    result["addresses"] = addresses
    return result


class Lookup:
    """``getaddrinfo(name)`` in a daemon thread, started early and collected with a deadline.

    A daemon thread can be abandoned when the deadline passes, so a stalled resolver costs the
    probe at most ``RESOLVE_TIMEOUT_S`` and never keeps it from exiting.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.deadline = time.monotonic() + RESOLVE_TIMEOUT_S
        self.result: dict[str, Any] = {"name": name, "error": "the lookup did not finish"}
        self.thread = threading.Thread(target=self.resolve, daemon=True)
        self.thread.start()

    def resolve(self) -> None:
        try:
            # As torchrun's store client looks node 0 up: any family, in the resolver's order.
            infos = socket.getaddrinfo(self.name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
        except Exception as exc:
            self.result = {"name": self.name, "error": describe(exc)}
            return
        addresses: list[str] = []
        for info in infos:
            address = str(info[4][0])
            if address not in addresses:
                addresses.append(address)
        self.result = {"name": self.name, "addresses": addresses}

    def section(self) -> dict[str, Any]:
        self.thread.join(max(0.0, self.deadline - time.monotonic()))
        if self.thread.is_alive():
            return {"name": self.name, "error": f"timed out after {RESOLVE_TIMEOUT_S:g} s"}
        return self.result


def interfaces_section() -> dict[str, Any]:
    try:
        found = subprocess.run(
            ["ip", "-j", "-4", "addr", "show"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            timeout=SMI_TIMEOUT_S,
            check=True,
        )
        links = json.loads(found.stdout.decode("utf-8", "replace"))
    except (OSError, ValueError, subprocess.SubprocessError):
        return {"source": "ioctl", "items": interfaces_from_ioctl()}
    items: list[dict[str, Any]] = []
    for link in links:
        addresses = [
            {"address": info["local"], "prefixlen": info["prefixlen"]}
            for info in link.get("addr_info", [])
            if info.get("family") == "inet"
        ]
        items.append({"name": link["ifname"], "ipv4": addresses})
    return {"source": "ip", "items": items}


def interfaces_from_ioctl() -> list[dict[str, Any]]:
    """Older hosts without ``ip -j``: one (primary) IPv4 address per interface."""
    import fcntl

    items: list[dict[str, Any]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                address = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)[20:24]
                netmask = fcntl.ioctl(sock.fileno(), SIOCGIFNETMASK, request)[20:24]
            except OSError:
                items.append({"name": name, "ipv4": []})
                continue
            prefixlen = bin(struct.unpack("!I", netmask)[0]).count("1")
            ipv4 = [{"address": socket.inet_ntoa(address), "prefixlen": prefixlen}]
            items.append({"name": name, "ipv4": ipv4})
    return items


def python_section() -> dict[str, Any]:
    prefix = Path(sys.prefix)
    is_conda = (prefix / "conda-meta").is_dir()
    conda_env = None
    if is_conda:
        conda_env = prefix.name if prefix.parent.name == "envs" else "base"
    return {
        "version": ".".join(str(part) for part in sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "is_conda": is_conda,
        "conda_env": conda_env,
    }


def start_torch() -> subprocess.Popen[bytes]:
    # Its own session, so a timeout kills the whole tree and no grandchild holds our pipes.
    return subprocess.Popen(
        [sys.executable, "-c", TORCH_SNIPPET],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def torch_section(child: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
    try:
        out, err = child.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        maybe(os.killpg, child.pid, signal.SIGKILL)
        child.communicate()
        return {"status": "timeout", "detail": "import torch did not finish in time"}
    lines = out.decode("utf-8", "replace").strip().splitlines()
    if child.returncode == 0 and lines:
        try:
            return dict(json.loads(lines[-1]))
        except ValueError:
            pass
    errors = err.decode("utf-8", "replace").strip().splitlines()
    if child.returncode < 0:
        detail = f"import torch was killed by signal {-child.returncode}"
    else:
        detail = errors[-1] if errors else f"import torch exited with status {child.returncode}"
    return {"status": "error", "detail": detail}


def torch_fingerprint() -> dict[str, Any] | None:
    """What the torch facts depend on; None where torch is not found (which costs no import).

    A pip install or removal changes the site-packages directory, an upgrade of torch its files;
    a driver change or a GPU gone changes /proc and /dev.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent

    def stamp(path: Path) -> list[int]:
        found = path.stat()
        return [found.st_ino, found.st_size, found.st_mtime_ns]

    watched = (package / "__init__.py", package / "version.py", package / "lib", package.parent)
    driver = maybe(lambda: Path("/proc/driver/nvidia/version").read_text().splitlines()[:1])
    return {
        # What the snippet asks torch changes with ddptui: kept answers to older questions lack
        # the newer facts.
        "snippet": hashlib.sha256(TORCH_SNIPPET.encode()).hexdigest(),
        "host": socket.gethostname(),
        "executable": os.path.realpath(sys.executable),
        "python": sys.version,
        "files": {str(path): maybe(stamp, path) for path in watched},
        "env": {name: os.environ.get(name) for name in TORCH_CACHE_ENV},
        "driver": driver,
        "devices": sorted(path.name for path in Path("/dev").glob("nvidia*")),
    }


def torch_cache_path(workdir: str) -> Path:
    # Per host: hosts that share a workdir (an NFS home) have GPUs of their own.
    name = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:200]
    return Path(workdir).expanduser() / TORCH_CACHE_DIR / f"torch-{name}.json"


def cached_torch(workdir: str, fingerprint: Any) -> dict[str, Any] | None:
    if not isinstance(fingerprint, dict):
        return None
    try:
        kept = json.loads(torch_cache_path(workdir).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("fingerprint") != fingerprint:
        return None
    facts = kept.get("facts")
    return facts if isinstance(facts, dict) and facts.get("status") == "ok" else None


def keep_torch(workdir: str, fingerprint: Any, facts: dict[str, Any]) -> None:
    """Only a successful import is kept: a failure is looked at again on the next probe."""
    if not isinstance(fingerprint, dict) or facts.get("status") != "ok":
        return
    path = torch_cache_path(workdir)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps({"fingerprint": fingerprint, "facts": facts}))
        part.replace(path)
    except OSError:
        maybe(part.unlink)


def agrees_with_gpus(facts: dict[str, Any], gpus: Any) -> bool:
    """Kept facts count only while torch's device count matches the GPUs listed now: a GPU
    fallen off the bus or a broken driver must be seen by a fresh import."""
    listed = gpus.get("devices") if isinstance(gpus, dict) else None
    return (facts.get("device_count") or 0) == (len(listed) if isinstance(listed, list) else 0)


def gpus_section() -> dict[str, Any]:
    problems = []
    for collect in (gpus_from_nvml, gpus_from_smi):
        try:
            result = collect()
        except SectionError as exc:
            problems.append(str(exc))
            continue
        except Exception as exc:
            problems.append(collect.__name__ + ": " + describe(exc))
            continue
        result["problem"] = "; ".join(problems)
        return result
    return {"source": "none", "devices": [], "problem": "; ".join(problems)}


def gpus_from_nvml() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError:
        raise SectionError("pynvml is not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise SectionError("pynvml: " + describe(exc)) from None
    try:
        cuda = maybe(pynvml.nvmlSystemGetCudaDriverVersion)
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = maybe(pynvml.nvmlDeviceGetMemoryInfo, handle)
            utilization = maybe(pynvml.nvmlDeviceGetUtilizationRates, handle)
            running = maybe(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
            processes = None
            if running is not None:
                processes = [
                    {
                        "pid": proc.pid,
                        "name": text(maybe(pynvml.nvmlSystemGetProcessName, proc.pid))
                        or process_name(proc.pid),
                        "used_memory_mib": None
                        if proc.usedGpuMemory is None
                        else proc.usedGpuMemory // MIB,
                    }
                    for proc in running
                ]
            devices.append(
                {
                    "index": index,
                    "uuid": text(maybe(pynvml.nvmlDeviceGetUUID, handle)),
                    "name": text(maybe(pynvml.nvmlDeviceGetName, handle)),
                    "memory_total_mib": None if memory is None else memory.total // MIB,
                    "memory_used_mib": None if memory is None else memory.used // MIB,
                    "utilization_pct": None if utilization is None else utilization.gpu,
                    "processes": processes,
                }
            )
        return {
            "source": "nvml",
            "driver_version": text(maybe(pynvml.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            "devices": devices,
        }
    finally:
        maybe(pynvml.nvmlShutdown)


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def nvidia_smi(*args: str) -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=SMI_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise SectionError("nvidia-smi not found") from None
    except subprocess.TimeoutExpired:
        raise SectionError(f"nvidia-smi did not answer in {SMI_TIMEOUT_S:.0f} s") from None
    output = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        first = output.strip().splitlines()[:1]
        reason = first[0] if first else f"exited with status {done.returncode}"
        raise SectionError("nvidia-smi: " + reason)
    return output


def smi_value(field: str) -> str | None:
    """``[N/A]``, ``[Not Supported]`` and friends all mean the driver will not say."""
    field = field.strip()
    return None if not field or field.startswith("[") or field == "N/A" else field


def smi_int(field: str) -> int | None:
    value = smi_value(field)
    try:
        return None if value is None else int(float(value))
    except ValueError:
        return None


def gpus_from_smi() -> dict[str, Any]:
    csv = "--format=csv,noheader,nounits"
    gpu_lines = nvidia_smi("--query-gpu=" + QUERY_GPU_FIELDS, csv).strip().splitlines()
    try:
        apps: list[str] | None = (
            nvidia_smi("--query-compute-apps=" + QUERY_APPS_FIELDS, csv).strip().splitlines()
        )
    except SectionError:
        apps = None
    processes: dict[str, list[dict[str, Any]]] = {}
    for line in apps or []:
        parts = line.split(", ")
        pid = smi_int(parts[1]) if len(parts) >= 4 else None
        if pid is None:
            continue
        processes.setdefault(parts[0].strip(), []).append(
            {
                "pid": pid,
                "name": smi_value(", ".join(parts[2:-1])),
                "used_memory_mib": smi_int(parts[-1]),
            }
        )
    devices = []
    driver = None
    for line in gpu_lines:
        parts = line.split(", ")
        index = smi_int(parts[0]) if len(parts) >= 7 else None
        if index is None:
            continue
        uuid = smi_value(parts[1])
        total, used, utilization, driver_field = parts[-4:]
        driver = driver or smi_value(driver_field)
        devices.append(
            {
                "index": index,
                "uuid": uuid,
                "name": smi_value(", ".join(parts[2:-4])),
                "memory_total_mib": smi_int(total),
                "memory_used_mib": smi_int(used),
                "utilization_pct": smi_int(utilization),
                "processes": None if apps is None else processes.get(uuid or "", []),
            }
        )
    return {
        "source": "nvidia-smi",
        "driver_version": driver,
        "cuda_driver_version": smi_cuda_version(),
        "devices": devices,
    }


def smi_cuda_version() -> str | None:
    """The CUDA driver version is only in plain ``nvidia-smi``'s banner."""
    try:
        banner = nvidia_smi()
    except SectionError:
        return None
    match = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", banner)
    return match.group(1) if match else None


def disk_section(workdir: str) -> dict[str, Any]:
    path = Path(workdir).expanduser()
    checked = path
    while not checked.exists() and checked != checked.parent:
        checked = checked.parent
    usage = shutil.disk_usage(str(checked))
    return {
        "path": str(path),
        "checked_path": str(checked),
        "free_bytes": usage.free,
        "total_bytes": usage.total,
    }


def parts(path: Path) -> list[str]:
    """``path``'s components after its root, in reverse order: the next to look up last."""
    return list(reversed(path.parts[1:] if path.anchor else path.parts))


def private_group() -> int | None:
    """The user's primary group when it is theirs alone: the group most systems make for each
    user, named after them (a umask of 002 makes what they create writable by it)."""
    import grp
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    group = grp.getgrgid(os.getegid())
    if group.gr_name != user or any(member != user for member in group.gr_mem):
        return None
    return group.gr_gid


def workdir_section(workdir: str) -> dict[str, Any]:
    """Who could change what the workdir holds, for the head to judge: from ``/``, every
    directory and link a lookup of the workdir passes through, with its owner and ``st_mode``
    from ``lstat``. Links are followed as the kernel follows them, by reading them, never by
    trusting a resolved path: a link's own directory matters as much as its target's.

    ``target`` indexes the workdir, or the directory it would be created in when it does not
    exist yet; it is null when the walk stopped short (a directory it may not search, a link
    loop, more than ``MAX_PATH_ENTRIES`` entries).
    """
    path = Path(workdir).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    root = Path("/")
    entries: list[dict[str, Any]] = []
    index: dict[Path, int] = {}

    def record(where: Path, found: os.stat_result) -> None:
        if where not in index:
            index[where] = len(entries)
            entries.append(
                {
                    "path": str(where),
                    "uid": found.st_uid,
                    "gid": found.st_gid,
                    "mode": found.st_mode,
                }
            )

    record(root, root.lstat())
    pending = parts(path)
    current = root
    target: Path | None = None
    exists = False
    links = 0
    while pending:
        part = pending.pop()
        if part == "..":
            current = current.parent
            continue
        step = current / part
        if len(entries) >= MAX_PATH_ENTRIES or len(str(step)) > PATH_MAX:
            break
        try:
            found = step.lstat()
        except FileNotFoundError:
            target = current
            break
        except OSError:
            break
        record(step, found)
        if stat.S_ISLNK(found.st_mode):
            links += 1
            if links > MAX_SYMLINKS:
                break
            link = Path(os.readlink(step))  # noqa: PTH115 (Path.readlink is Python 3.9+)
            if link.is_absolute():
                current = root
            pending += parts(link)
        elif stat.S_ISDIR(found.st_mode):
            current = step
        else:
            # Not a directory: the workdir itself when nothing follows, else no workdir can be.
            if not pending:
                target, exists = step, True
            break
    else:
        target, exists = current, True
    return {
        "path": str(path),
        "uid": os.geteuid(),
        "private_gid": maybe(private_group),
        "exists": exists,
        "target": None if target is None else index[target],
        "entries": entries,
    }


def system_section() -> dict[str, Any]:
    memory = maybe(lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return {
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": memory,
        "memory_available_bytes": maybe(memory_available),
    }


def memory_available() -> int | None:
    """The kernel's estimate of what new processes can take without swapping (Linux ≥ 3.14)."""
    with Path("/proc/meminfo").open("rb") as meminfo:
        for line in meminfo:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def packages_section() -> dict[str, Any]:
    import importlib.metadata

    pip: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        # The first one found wins, as it does for imports.
        if name and normalize(name) not in pip:
            pip[normalize(name)] = dist.version
    conda = None
    meta = Path(sys.prefix) / "conda-meta"
    if meta.is_dir():
        conda = {}
        # Records are named NAME-VERSION-BUILD.json; parsing the name is much faster than
        # loading records that list every installed file.
        for record in meta.glob("*.json"):
            parts = record.stem.rsplit("-", 2)
            if len(parts) == 3:
                conda[normalize(parts[0])] = parts[1]
    return {"pip": pip, "conda": conda}


def port_section(port: int) -> dict[str, Any]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As torchrun's store does, so a port lingering in TIME_WAIT is not reported busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return {"port": port, "in_use": True}
            return {"port": port, "in_use": None, "detail": describe(exc)}
    return {"port": port, "in_use": False}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ddptui-probe")
    parser.add_argument("--workdir", default="~")
    parser.add_argument("--master-port", type=int, default=None)
    parser.add_argument("--master-addr", default=None)
    parser.add_argument("--torch-timeout", type=float, default=20.0)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    deadline = time.monotonic() + args.torch_timeout
    fingerprint = section(torch_fingerprint)
    kept = cached_torch(args.workdir, fingerprint)
    torch_child = section(start_torch) if kept is None else None
    master = None if args.master_addr is None else section(lambda: Lookup(args.master_addr))
    doc = {
        "probe_version": PROBE_VERSION,
        "host": section(host_section),
        "interfaces": section(interfaces_section),
        "python": section(python_section),
        "gpus": section(gpus_section),
        "disk": section(lambda: disk_section(args.workdir)),
        "workdir": section(lambda: workdir_section(args.workdir)),
        "system": section(system_section),
        "packages": section(packages_section),
        "port": None
        if args.master_port is None
        else section(lambda: port_section(args.master_port)),
    }
    if isinstance(master, Lookup):
        doc["master"] = master.section()
    elif master is not None:
        # The thread did not start; the section still names what was to be resolved.
        doc["master"] = {"name": args.master_addr, **master}
    if kept is not None and not agrees_with_gpus(kept, doc["gpus"]):
        kept = None
        deadline = time.monotonic() + args.torch_timeout
        torch_child = section(start_torch)
    if kept is not None:
        doc["torch"] = {**kept, "cached": True}
    elif isinstance(torch_child, dict):
        doc["torch"] = {"status": "error", "detail": torch_child["error"]}
    elif torch_child is not None:
        doc["torch"] = section(lambda: torch_section(torch_child, deadline))
        keep_torch(args.workdir, fingerprint, doc["torch"])
    doc["time"] = time.time()
    sys.stdout.write(json.dumps(doc, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
