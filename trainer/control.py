"""Stop and save requests, agreed on by every rank at the same step.

Requests come from SIGTERM/SIGINT (any rank) and from files that ddptui drops into
``<run-dir>/control/`` on node 0 (polled by global rank 0 only): ``stop`` asks for a checkpoint and
a clean exit, ``save`` for a checkpoint without stopping. Each step every rank publishes its
requests in an asynchronous all-reduce (MAX) on the CPU control group and reads the result of the
previous step's one, so the check overlaps the next step and every rank acts at the same step, one
step after the request is seen.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist

STOP, SAVE = 0, 1


@dataclass(frozen=True)
class Requests:
    stop: bool
    save: bool
    source: str | None


class Control:
    def __init__(self, control_dir: Path | None, group: dist.ProcessGroup | None) -> None:
        """control_dir is given on global rank 0 only."""
        self._dir = control_dir
        self._group = group
        self._stop_source: str | None = None
        self._pending: tuple[dist.Work, torch.Tensor] | None = None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: the step in flight finishes and the stop is agreed collectively.
        self._stop_source = self._stop_source or signal.Signals(signum).name

    def _consume(self, name: str) -> bool:
        if self._dir is None:
            return False
        path = self._dir / name
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def poll(self) -> Requests:
        """Publish this step's local requests; return what all ranks agreed on one step ago."""
        if self._consume("stop"):
            self._stop_source = self._stop_source or "control/stop"
        flags = torch.zeros(2, dtype=torch.int32)
        flags[STOP] = self._stop_source is not None
        flags[SAVE] = self._consume("save")
        agreed = self.settle()
        work = dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        assert work is not None
        self._pending = (work, flags)
        return agreed

    def settle(self) -> Requests:
        """Wait for the outstanding publication; every rank calls it once, at the end."""
        if self._pending is None:
            return Requests(False, False, None)
        work, flags = self._pending
        self._pending = None
        work.wait()
        stop = bool(flags[STOP])
        source = (self._stop_source or "peer") if stop else None
        return Requests(stop, bool(flags[SAVE]), source)
