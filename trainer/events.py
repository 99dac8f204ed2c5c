"""One JSON object per line per rank, appended to ``<run-dir>/events/rank{R}.jsonl``.

Every event: ``{"v": 1, "type", "rank", "local_rank", "node_rank", "world_size", "time"}`` plus
the fields of its type (see README.md). Lines are written whole and line-buffered, so a reader
tailing from a byte offset never sees half an event; a failing disk turns logging off rather than
stopping the training.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .dist import Placement

SCHEMA_VERSION = 1
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 0.0


class EventLog:
    def __init__(self, run_dir: Path, placement: Placement) -> None:
        path = run_dir / "events" / f"rank{placement.rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("a", buffering=1, encoding="utf-8")
        self._identity = {
            "rank": placement.rank,
            "local_rank": placement.local_rank,
            "node_rank": placement.node_rank,
            "world_size": placement.world_size,
        }

    def emit(self, kind: str, **fields: Any) -> None:
        if self._file.closed:
            return
        record = {"v": SCHEMA_VERSION, "type": kind, **self._identity, "time": time.time()}
        record.update(fields)
        try:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        except OSError as e:
            print(f"trainer: events disabled, cannot write {self.path}: {e}", file=sys.stderr)
            self._file.close()

    def close(self) -> None:
        self._file.close()


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
    fd = _statm()
    if fd is None:
        return {}
    try:
        resident_pages = int(os.pread(fd, 128, 0).split()[1])
    except (OSError, IndexError, ValueError):
        return {}
    return {"rss_mib": resident_pages * _PAGE_MIB}


@functools.cache
def _statm() -> int | None:
    # Opened once: reopening it every step cost ~0.2 ms, 1% of a small model's CPU step.
    # Each read at offset 0 regenerates the numbers.
    try:
        return os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        return None
