"""``follow``: new lines of the run's files from given offsets, and a heartbeat with process and
GPU samples every 2 s, until killed or nobody reads it.

Asked to (the supervisor asks), a rank that steps faster than the head needs to hear of it has
its step events thinned (:class:`~ddptui.onhost.thinning.Thinned`)."""

from __future__ import annotations

import math
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ddptui.onhost.common import (
    FOLLOWED,
    HEARTBEAT_S,
    MAX_LINE,
    POLL_S,
    READ_CHUNK,
    SETTLED_S,
    XID_MARK,
    emit,
)
from ddptui.onhost.gpu_health import asked, nvml_health, smi_field, smi_health, smi_number
from ddptui.onhost.processes import attempts, rank_processes, run_processes
from ddptui.onhost.thinning import Thinned


class Followed:
    __slots__ = ("offset", "size", "skipping", "still_since", "thinned")

    def __init__(self, offset: int, thinned: bool = False) -> None:
        """``thinned``: the file's step events are thinned (a rank's events file)."""
        self.offset = offset
        self.skipping = False
        self.size = -1
        self.still_since = 0.0
        self.thinned = Thinned() if thinned else None


def followed_files(run_dir: Path) -> Iterator[str]:
    for top in ("events", "logs", "node"):
        for directory, _, names in os.walk(run_dir / top):
            for name in names:
                relative = Path(directory, name).relative_to(run_dir).as_posix()
                if FOLLOWED.match(relative):
                    yield relative


def read_new(run_dir: Path, relative: str, state: Followed) -> bool:
    """Sends the file's new whole lines, up to :data:`READ_CHUNK`; whether more is waiting."""
    try:
        with (run_dir / relative).open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < state.offset:
                # Truncated or replaced: start again rather than read past the end forever.
                state.offset = 0
                state.skipping = False
            if size == state.offset:
                return False
            now = time.monotonic()
            if size != state.size:
                state.size, state.still_since = size, now
            handle.seek(state.offset)
            data = handle.read(READ_CHUNK)
    except OSError:
        return False
    start = 0
    while True:
        newline = data.find(b"\n", start)
        if newline < 0:
            break
        line = data[start:newline]
        state.offset += newline + 1 - start
        start = newline + 1
        if state.skipping:
            state.skipping = False
            continue
        send_line(relative, state, line, now)
    rest = data[start:]
    if len(rest) > MAX_LINE and not state.skipping:
        # A line longer than any we show: send its head now, skip the rest up to the newline.
        state.offset += len(rest)
        state.skipping = True
        send_line(relative, state, rest[:MAX_LINE], now, cut=True)
    elif state.skipping:
        state.offset += len(rest)
    elif rest and state.offset + len(rest) == size and now - state.still_since >= SETTLED_S:
        # A last line without a newline (torchrun's error.json has none): once the file has
        # stopped growing, it is complete.
        state.offset += len(rest)
        send_line(relative, state, rest, now)
    return len(data) == READ_CHUNK


def send_line(relative: str, state: Followed, line: bytes, now: float, cut: bool = False) -> None:
    """Send the file's line that ends at ``state.offset``, or hold it (:class:`Thinned`)."""
    if state.thinned is None or cut:
        if state.thinned is not None:
            send_held(relative, state.thinned.release())
        emit_line(relative, state.offset, line, cut)
        return
    send_held(relative, state.thinned.take(state.offset, line, now))


def send_held(relative: str, lines: list[tuple[int, bytes]]) -> None:
    for offset, line in lines:
        emit_line(relative, offset, line, cut=False)


def emit_line(relative: str, offset: int, line: bytes, cut: bool) -> None:
    document: dict[str, Any] = {
        "k": "line",
        "f": relative,
        "o": offset,
        "t": line[:MAX_LINE].decode("utf-8", "replace"),
    }
    if cut or len(line) > MAX_LINE:
        document["cut"] = True
    emit(document)


class Sampler:
    """The run's processes on this host (CPU, RSS) and, where there are any, its GPUs."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.ticks: dict[int, int] = {}
        self.last = time.monotonic()
        self.tick_hz = os.sysconf("SC_CLK_TCK")
        self.page_mib = os.sysconf("SC_PAGE_SIZE") / 2**20
        self.gpus = GpuSampler()
        self.kernel_log = KernelLogWatch() if self.gpus.handles or self.gpus.smi else None

    def sample(self) -> dict[str, Any]:
        now = time.monotonic()
        elapsed = max(now - self.last, 1e-6)
        self.last = now
        cpu = rss = 0.0
        count = 0
        ticks = {}
        processes = run_processes(self.run_dir)
        living = {attempt for _, _, attempt, _, _ in processes}
        groups = {str(attempt): attempt in living for attempt in attempts(self.run_dir)}
        current = max(living, default=0)
        own = {pid: rank for rank, (pid, _, _) in rank_processes(processes, current).items()}
        ranks: dict[str, dict[str, Any]] = {}
        for pid, _, attempt, fields, _ in processes:
            if attempt != current:
                continue
            try:
                used = int(fields[11]) + int(fields[12])
                rss += int(fields[21]) * self.page_mib
            except (IndexError, ValueError):
                continue
            count += 1
            ticks[pid] = used
            share = (used - self.ticks.get(pid, used)) / self.tick_hz / elapsed * 100
            cpu += share
            if pid in own:
                ranks[str(own[pid])] = {"state": fields[0], "cpu_pct": round(share, 1)}
        self.ticks = ticks
        sample: dict[str, Any] = {
            "procs": count,
            "cpu_pct": round(cpu, 1),
            "rss_mib": round(rss, 1),
            "ranks": ranks,
        }
        gpus = self.gpus.sample()
        if gpus is not None:
            sample["gpus"] = gpus
        if self.kernel_log is not None:
            sample.update(self.kernel_log.sample())
        return {"k": "hb", "time": time.time(), "groups": groups, "sample": sample}


class GpuSampler:
    """Each GPU's use and health every heartbeat: through NVML with its handles kept open, so a
    sample costs calls into the driver and no process; else through ``nvidia-smi``, one process
    a sample (and its health queries every :attr:`HEALTH_EVERY` samples)."""

    SMI_QUERY = (
        "index,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,utilization.gpu,"
        "utilization.memory,memory.used,memory.total,pstate,ecc.errors.uncorrected.volatile.total"
    )
    """nvidia-smi's names, which NVML's samples use too."""
    SMI_TEXT = ("pstate",)
    """The fields nvidia-smi prints as words; every other is a number."""
    HEALTH_EVERY = 5
    """Samples between the health counters that cost more: NVLink's (up to 90 calls a GPU)
    through NVML, the health queries (two processes) through nvidia-smi."""
    MAX_GPUS = 64

    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: list[Any] = []
        self.smi = shutil.which("nvidia-smi")
        self.samples = 0
        self.kept: dict[int, dict[str, Any]] = {}
        """Each GPU's health counters of the costlier kind, sent with every sample between."""
        try:
            import pynvml

            pynvml.nvmlInit()
            count = min(pynvml.nvmlDeviceGetCount(), self.MAX_GPUS)
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
            self.nvml = pynvml
        except Exception:
            self.handles = []

    def sample(self) -> list[dict[str, Any]] | None:
        """The GPUs' rows; None where the host has no way to ask."""
        full = self.samples % self.HEALTH_EVERY == 0
        self.samples += 1
        if self.nvml is not None:
            return [self.nvml_row(index, handle, full) for index, handle in enumerate(self.handles)]
        if self.smi is None:
            return None
        rows = self.smi_rows(self.smi)
        if full:
            health = self.smi_health(self.smi)
            self.kept = {index: rows_health(counters) for index, counters in health.items()}
        for row in rows:
            index = smi_number(str(row.get("index")))
            if index is not None:
                row.update(self.kept.get(index, {}))
        return rows

    def nvml_row(self, index: int, handle: Any, full: bool) -> dict[str, Any]:
        nvml = self.nvml
        row: dict[str, Any] = {"index": index}
        memory = asked(nvml, "nvmlDeviceGetMemoryInfo", handle)
        if memory is not None:
            row["memory.used"] = memory.used // 2**20
            row["memory.total"] = memory.total // 2**20
        rates = asked(nvml, "nvmlDeviceGetUtilizationRates", handle)
        if rates is not None:
            row["utilization.gpu"] = rates.gpu
            row["utilization.memory"] = rates.memory
        row["temperature.gpu"] = asked(nvml, "nvmlDeviceGetTemperature", handle, 0)
        for key, call in (
            ("power.draw", "nvmlDeviceGetPowerUsage"),
            ("power.limit", "nvmlDeviceGetEnforcedPowerLimit"),
        ):
            milliwatts = asked(nvml, call, handle)
            row[key] = None if milliwatts is None else milliwatts / 1000
        row["clocks.sm"] = asked(nvml, "nvmlDeviceGetClockInfo", handle, 1)
        row["clocks.max.sm"] = asked(nvml, "nvmlDeviceGetMaxClockInfo", handle, 1)
        state = asked(nvml, "nvmlDeviceGetPerformanceState", handle)
        row["pstate"] = None if state is None else f"P{state}"
        health = rows_health(nvml_health(nvml, handle, nvlink=full))
        if full:
            self.kept[index] = {
                key: health[key] for key in ("nvlinks_down", "nvlink_errors") if key in health
            }
        row.update(health)
        row.update(self.kept.get(index, {}))
        return {key: value for key, value in row.items() if value is not None}

    def smi_rows(self, smi: str) -> list[dict[str, Any]]:
        try:
            output = subprocess.run(
                [smi, "--query-gpu=" + self.SMI_QUERY, "--format=csv,noheader,nounits"],
                capture_output=True,
                timeout=2,
                check=False,
            ).stdout.decode("utf-8", "replace")
        except (OSError, subprocess.TimeoutExpired):
            return []
        names = self.SMI_QUERY.split(",")
        rows: list[dict[str, Any]] = []
        for line in output.splitlines()[: self.MAX_GPUS]:
            cells = line.split(",")
            if len(cells) == len(names):
                pairs = zip(names, cells)  # noqa: B905 (Python 3.8 hosts)
                typed = {name: smi_value(name, cell) for name, cell in pairs}
                rows.append({name: value for name, value in typed.items() if value is not None})
        return rows

    def smi_health(self, smi: str) -> dict[int, dict[str, Any]]:
        def run(*args: str) -> str:
            done = subprocess.run([smi, *args], capture_output=True, timeout=2, check=False)
            if done.returncode != 0:
                raise OSError(done.returncode)
            return done.stdout.decode("utf-8", "replace")

        try:
            return smi_health(run)
        except (OSError, subprocess.TimeoutExpired):
            return {}


def smi_value(name: str, cell: str) -> int | float | str | None:
    """A cell of nvidia-smi's CSV as NVML's sample has it: a number typed, so that the head
    takes it as it is (typing 8 GPUs' printed numbers was most of a heartbeat's cost at the
    head, 256 heartbeats a second at 512 hosts); ``pstate`` as text; None where the driver
    would not say (``[N/A]``). The head checks every value again."""
    value = smi_field(cell)
    if value is None or name in GpuSampler.SMI_TEXT:
        return value
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


XID_MARK_BYTES = XID_MARK.encode()


class KernelLogWatch:
    """The NVIDIA driver's Xid lines the kernel logs from now on, read as they come: the
    kernel's log device is opened once, at its end, and read without waiting at each
    heartbeat (no ``dmesg`` a sample). Where this user may not read it
    (``kernel.dmesg_restrict``), the heartbeat says why instead.

    ``DDPTUI_KERNEL_LOG`` names another file to read as the kernel's log: a test bed's hosts
    share one kernel, so each is given its own."""

    MAX_LINES = 8
    """Xid lines a heartbeat carries at most, the first: a GPU in trouble logs one a second or
    more, and the first says what went wrong first."""

    def __init__(self) -> None:
        self.why = ""
        self.fd: int | None = None
        self.rest = b""
        path = os.environ.get("DDPTUI_KERNEL_LOG") or "/dev/kmsg"
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError as error:
            self.why = f"{path}: {error.strerror or error}"

    def sample(self) -> dict[str, Any]:
        if self.fd is None:
            return {"kernel_log": self.why}
        lines: list[str] = []
        for _ in range(1024):
            try:
                data = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except OSError:
                # EPIPE: the kernel's ring wrapped past what was read; the next read goes on.
                continue
            if not data:
                break
            *whole, self.rest = (self.rest + data).split(b"\n")
            self.rest = self.rest[-MAX_LINE:]
            lines += [
                line.decode("utf-8", "replace")[:512] for line in whole if XID_MARK_BYTES in line
            ]
        return {"xids": lines[: self.MAX_LINES]} if lines else {}


def rows_health(health: dict[str, Any]) -> dict[str, Any]:
    """A sample's health fields from the counters :mod:`.gpu_health` reads: the throttle
    reasons, whether memory waits for a reset, the PCIe replays and NVLink's errors."""
    row: dict[str, Any] = {
        key: health[key]
        for key in ("pci_bus_id", "throttle_reasons", "pcie_replays", "nvlink_errors")
        if key in health
    }
    if "ecc_uncorrected" in health:
        row["ecc.errors.uncorrected.volatile.total"] = health["ecc_uncorrected"]
    if "nvlinks_down" in health:
        row["nvlinks_down"] = len(health["nvlinks_down"])
    pending = [health.get(key) for key in ("remapped_rows_pending", "retired_pages_pending")]
    if any(flag is not None for flag in pending):
        row["reset_pending"] = int(any(pending))
    if health.get("remap_failed") is not None:
        row["remap_failed"] = int(health["remap_failed"])
    return row


def grew(path: Path, state: Followed) -> bool:
    try:
        return path.stat().st_size != state.offset
    except OSError:
        return False


def holding(states: dict[str, Followed]) -> Iterator[tuple[str, Thinned]]:
    """Each thinned file that holds a step event back, and its thinning."""
    for relative, state in states.items():
        if state.thinned is not None and state.thinned.held is not None:
            yield relative, state.thinned


def release_all(states: dict[str, Followed]) -> None:
    for relative, thinned in holding(states):
        send_held(relative, thinned.release())


def reader_gone(fd: int) -> bool:
    """Whether what reads ``fd`` (a pipe's writing end: sshd, for a channel) has closed it. A
    writer learns that only as it next writes, and the follower may write nothing new for a
    heartbeat: asked each round, it goes within a round of its channel being closed, and sshd
    confirms the close only once it has gone."""
    poller = select.poll()
    poller.register(fd, 0)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def follow(run_dir: Path, offsets: Any, thin: bool = False) -> int:
    def followed(path: str, offset: int) -> Followed:
        return Followed(offset, thin and path.startswith("events/"))

    states = {path: followed(path, int(offset)) for path, offset in (offsets or {}).items()}
    sampler = Sampler(run_dir)
    next_beat = 0.0
    while not reader_gone(sys.stdout.fileno()):
        behind = False
        for relative in followed_files(run_dir):
            state = states.get(relative)
            if state is None:
                state = states[relative] = followed(relative, 0)
            if relative.endswith(".exit") and grew(run_dir / relative, state):
                # The node's exit status comes after every line its ranks wrote before it.
                release_all(states)
            behind = read_new(run_dir, relative, state) or behind
        now = time.monotonic()
        for relative, thinned in holding(states):
            send_held(relative, thinned.end_round(now))
        if time.monotonic() >= next_beat:
            # A heartbeat that is not behind says every line written before it was sent.
            emit({**sampler.sample(), "behind": behind})
            next_beat = time.monotonic() + HEARTBEAT_S
        sys.stdout.flush()
        time.sleep(POLL_S)
    return 0
