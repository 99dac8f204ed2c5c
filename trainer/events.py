"""One JSON object per line per rank, appended to ``<run-dir>/events/rank{R}.jsonl``.

Every event: ``{"v": 1, "type", "rank", "local_rank", "node_rank", "world_size", "time"}`` plus
the fields of its type (see README.md). Lines are written whole and in order. Every event but
``step`` is written at once (with the step events before it); step events are written together
at least every ``FLUSH_EVERY_S`` by a background thread, which also writes them while the main
thread hangs in a collective: encoding and writing each step event at once cost 1% of a small
model's CPU step. A reader tailing the file takes it up to its last newline. A failing disk
turns logging off rather than stopping the training.

On a GPU a step event waits (:meth:`EventLog.defer`) for its loss to arrive in host memory: reading
it at once (``.item()``) would stop the CPU from queueing the next step until the GPU caught up,
10-20% of the step rate on an H200. The event keeps the time of its step and its place in order.
An event that comes after such steps does not wait for them either: it queues behind them and is
written as soon as they land. Waiting drained the GPU's queue at every epoch's end, which an
H200's profile showed as one event sync a step where epochs were two steps long. Only a rank's
last words (:data:`LAST_WORDS`) wait, so that nothing before them is lost.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from .dist import Placement

SCHEMA_VERSION = 1
LAST_WORDS = ("done", "error")
"""Events after which a rank may be gone: written at once, with every step before them."""
# default=str: a value JSON cannot hold is written as its text, never lost with its batch.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 0.0


def process_started_at() -> float | None:
    """When this process began (Unix seconds, to 10 ms): its age in /proc taken from now, since
    the boot time there is whole seconds. None off Linux."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        # Field 22 of stat (starttime), counted after the command's closing parenthesis.
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - age


class Pending(Protocol):
    """Values an event waits for, still being computed or copied by a device."""

    names: tuple[str, ...]

    def ready(self) -> bool:
        """Whether :meth:`values` would return without waiting."""
        ...

    def values(self) -> dict[str, Any]:
        """The values, waiting for them if they are not ready."""
        ...


class EventLog:
    FLUSH_EVERY_S = 0.25

    def __init__(self, run_dir: Path, placement: Placement) -> None:
        path = run_dir / "events" / f"rank{placement.rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # O_APPEND, no buffer layers: each batch of whole lines is one write(2).
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._identity = {
            "rank": placement.rank,
            "local_rank": placement.local_rank,
            "node_rank": placement.node_rank,
            "world_size": placement.world_size,
        }
        self._pending: list[dict[str, Any]] = []
        self._pending_lock = threading.Lock()
        # Step events whose device values are on their way, oldest first; the flusher writes
        # them too once ready, so that a hang in a collective does not hold them back.
        self._deferred: deque[tuple[dict[str, Any], Pending]] = deque()
        self._deferred_lock = threading.Lock()
        # Held from taking a batch to having written it, so that batches land in order; a step
        # event only waits for the brief pending lock, never for a slow disk.
        self._write_lock = threading.Lock()
        self._closing = threading.Event()
        self._flusher = threading.Thread(target=self._flush_regularly, name="events", daemon=True)
        self._flusher.start()

    def emit(self, kind: str, **fields: Any) -> None:
        if self._fd is None:
            return
        record = {"v": SCHEMA_VERSION, "type": kind, **self._identity, "time": time.time()}
        record.update(fields)
        if self._deferred and kind not in LAST_WORDS:
            # After the steps before it, which it does not wait for (see the module's text).
            with self._deferred_lock:
                self._deferred.append((record, _NOTHING_PENDING))
            self.poll()
            return
        if self._deferred:
            self._undefer(wait=True)
        if kind == "step":
            # Encoded later, in a batch: encoding one event right after a step's computation
            # took 30 µs (cold caches), several times what it takes in a batch.
            with self._pending_lock:
                self._pending.append(record)
        else:
            self._flush(record)

    def defer(self, pending: Pending, kind: str = "step", **fields: Any) -> None:
        """Emit an event with ``pending``'s values once they are ready, keeping its place."""
        if self._fd is None:
            return
        record = {"v": SCHEMA_VERSION, "type": kind, **self._identity, "time": time.time()}
        record.update(fields)
        with self._deferred_lock:
            self._deferred.append((record, pending))
        self.poll()

    def poll(self) -> None:
        """Emit the deferred events whose values have arrived (call it every step)."""
        if self._deferred and self._undefer(wait=False):
            self._flush()

    def _undefer(self, *, wait: bool) -> bool:
        """Queue the deferred events that are ready (all, with ``wait``) for writing; whether
        one of them is not a step event, which is written at once rather than with the next
        batch."""
        # One lock over taking and queueing, so that two threads cannot swap events' order.
        with self._deferred_lock:
            ready: list[dict[str, Any]] = []
            while self._deferred:
                record, pending = self._deferred[0]
                if not wait and not pending.ready():
                    break
                self._deferred.popleft()
                ready.append(_completed(record, pending))
            if ready:
                with self._pending_lock:
                    self._pending.extend(ready)
        return any(record["type"] != "step" for record in ready)

    def _flush_regularly(self) -> None:
        while not self._closing.wait(self.FLUSH_EVERY_S):
            self._undefer(wait=False)
            self._flush()

    def _flush(self, last: dict[str, Any] | None = None) -> None:
        with self._write_lock:
            with self._pending_lock:
                records, self._pending = self._pending, []
            if last is not None:
                records.append(last)
            if not records or self._fd is None:
                return
            data = "".join(_ENCODER.encode(record) + "\n" for record in records).encode()
            try:
                written = 0
                while written < len(data):
                    count = os.write(self._fd, data[written:])
                    if count == 0:
                        raise OSError("nothing written (is the disk full?)")
                    written += count
            except OSError as e:
                print(f"trainer: events disabled, cannot write {self.path}: {e}", file=sys.stderr)
                os.close(self._fd)
                self._fd = None

    def close(self) -> None:
        """Write what is pending and stop; emit does nothing afterwards."""
        self._closing.set()
        self._flusher.join()
        self._undefer(wait=True)
        self._flush()
        with self._write_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _completed(record: dict[str, Any], pending: Pending) -> dict[str, Any]:
    try:
        record.update(pending.values())
    except Exception:
        # A failed device (often the error about to be reported) loses the values, not events.
        record.update(dict.fromkeys(pending.names))
    return record


class _NothingPending:
    """What an event without device values waits for behind deferred ones: nothing."""

    names: tuple[str, ...] = ()

    def ready(self) -> bool:
        return True

    def values(self) -> dict[str, Any]:
        return {}


_NOTHING_PENDING = _NothingPending()


class DeviceScalars:
    """Scalars on a CUDA device, on their way into pinned host memory without a sync.

    The copy is queued behind the step's work on the current stream, and a CUDA event after it
    says when it has landed; nothing here waits unless :meth:`values` is called early.
    """

    def __init__(
        self,
        scalars: dict[str, torch.Tensor],
        buffers: BufferPool,
        convert: Callable[[float], Any] = float,
    ) -> None:
        self.names = tuple(scalars)
        self._pool, self._convert = buffers, convert
        self._host = buffers.take(len(scalars))
        for slot, value in enumerate(scalars.values()):
            self._host[slot].copy_(value.detach(), non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()

    def ready(self) -> bool:
        return bool(self._copied.query())

    def values(self) -> dict[str, Any]:
        self._copied.synchronize()
        numbers = self._host.tolist()
        self._pool.give_back(self._host)
        return {name: self._convert(n) for name, n in zip(self.names, numbers, strict=True)}


class BufferPool:
    """Pinned float32 buffers, reused: pinning fresh host memory costs more than a fast step."""

    def __init__(self) -> None:
        self._free: dict[int, list[torch.Tensor]] = {}
        self._lock = threading.Lock()

    def take(self, size: int) -> torch.Tensor:
        with self._lock:
            free = self._free.get(size)
            if free:
                return free.pop()
        return torch.empty(size, dtype=torch.float32, pin_memory=True)

    def give_back(self, buffer: torch.Tensor) -> None:
        with self._lock:
            self._free.setdefault(buffer.numel(), []).append(buffer)


def finite(value: float) -> float | None:
    """JSON has no NaN or infinity; a diverged loss is reported as null."""
    return value if math.isfinite(value) else None


def memory_mib(device: torch.device) -> dict[str, float]:
    """Memory fields of a step event; read on the host (no device sync), at most once a second."""
    if device.type == "cuda":
        return _cuda_memory(device).read()
    return _resident.read()


class _Sampled:
    """A reading taken at most once per ``MAX_AGE_S``: nobody watches memory at a step's rate."""

    MAX_AGE_S = 1.0

    def __init__(self) -> None:
        self._read_at = -math.inf
        self._last: dict[str, float] = {}

    def read(self) -> dict[str, float]:
        now = time.monotonic()
        if now - self._read_at >= self.MAX_AGE_S:
            self._read_at = now
            self._last = self._sample()
        return self._last

    def _sample(self) -> dict[str, float]:
        raise NotImplementedError


class _CudaMemory(_Sampled):
    """The caching allocator's counters: kept on the host, so reading them never syncs."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self._device = device

    def _sample(self) -> dict[str, float]:
        stats = torch.cuda.memory_stats(self._device)
        return {
            "cuda_allocated_mib": stats.get("allocated_bytes.all.current", 0) / 2**20,
            "cuda_reserved_mib": stats.get("reserved_bytes.all.current", 0) / 2**20,
            "cuda_peak_mib": stats.get("allocated_bytes.all.peak", 0) / 2**20,
        }


_cuda_samplers: dict[torch.device, _CudaMemory] = {}


def _cuda_memory(device: torch.device) -> _CudaMemory:
    sampler = _cuda_samplers.get(device)
    if sampler is None:
        sampler = _cuda_samplers[device] = _CudaMemory(device)
    return sampler


class _ResidentMemory(_Sampled):
    """This process's resident set.

    A read of /proc after a step's computation takes 30-40 µs (the kernel's paths have gone cold),
    0.2% of a small model's CPU step if done every step.
    """

    def __init__(self) -> None:
        super().__init__()
        self._fd: int | None = None

    def _sample(self) -> dict[str, float]:
        try:
            if self._fd is None:
                # Kept open: each read at offset 0 regenerates the numbers, and reopening cost
                # another 0.2 ms.
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
            resident_pages = int(os.pread(self._fd, 128, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return {}
        return {"rss_mib": resident_pages * _PAGE_MIB}


_resident = _ResidentMemory()
