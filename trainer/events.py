"""One JSON object per line per rank, appended to ``<run-dir>/events/rank{R}.jsonl``.

Every event: ``{"v": 1, "type", "rank", "local_rank", "node_rank", "world_size", "time"}`` plus
the fields of its type (see README.md). Lines are written whole and in order. Every event but
``step`` is written at once (with the step events before it); step events are written together
at least every ``FLUSH_EVERY_S`` by a background thread, which also writes them while the main
thread hangs in a collective: encoding and writing each step event at once cost 1% of a small
model's CPU step. A reader tailing the file takes it up to its last newline. A failing disk
turns logging off rather than stopping the training.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from .dist import Placement

SCHEMA_VERSION = 1
# default=str: a value JSON cannot hold is written as its text, never lost with its batch.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 0.0


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
        if kind == "step":
            # Encoded later, in a batch: encoding one event right after a step's computation
            # took 30 µs (cold caches), several times what it takes in a batch.
            with self._pending_lock:
                self._pending.append(record)
        else:
            self._flush(record)

    def _flush_regularly(self) -> None:
        while not self._closing.wait(self.FLUSH_EVERY_S):
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
        self._flush()
        with self._write_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def finite(value: float) -> float | None:
    """JSON has no NaN or infinity; a diverged loss is reported as null."""
    return value if math.isfinite(value) else None


def memory_mib(device: torch.device) -> dict[str, float]:
    if device.type == "cuda":
        return {
            "cuda_allocated_mib": torch.cuda.memory_allocated(device) / 2**20,
            "cuda_reserved_mib": torch.cuda.memory_reserved(device) / 2**20,
            "cuda_peak_mib": torch.cuda.max_memory_allocated(device) / 2**20,
        }
    return _resident.read()


class _ResidentMemory:
    """This process's resident set, read at most once per ``MAX_AGE_S``.

    A read of /proc after a step's computation takes 30-40 µs (the kernel's paths have gone cold),
    0.2% of a small model's CPU step if done every step; nobody watches memory at that rate.
    """

    MAX_AGE_S = 1.0

    def __init__(self) -> None:
        self._fd: int | None = None
        self._read_at = -math.inf
        self._last: dict[str, float] = {}

    def read(self) -> dict[str, float]:
        now = time.monotonic()
        if now - self._read_at < self.MAX_AGE_S:
            return self._last
        self._read_at = now
        try:
            if self._fd is None:
                # Kept open: each read at offset 0 regenerates the numbers, and reopening cost
                # another 0.2 ms.
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
            resident_pages = int(os.pread(self._fd, 128, 0).split()[1])
        except (OSError, IndexError, ValueError):
            self._last = {}
        else:
            self._last = {"rss_mib": resident_pages * _PAGE_MIB}
        return self._last


_resident = _ResidentMemory()
