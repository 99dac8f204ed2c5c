"""Stop and save requests, agreed on by every rank at the same step.

Requests come from SIGTERM/SIGINT (any rank) and from files that ddptui drops into
``<run-dir>/control/`` on node 0 (looked for by global rank 0 at each sync step, see below):
``stop`` asks for a checkpoint and a clean exit, ``save`` for a checkpoint without stopping.
Ranks publish their requests in an asynchronous all-reduce (MAX) on the CPU control group and
read the result one step later, so the exchange overlaps a step and every rank acts at the same
step.

The exchange happens at sync steps that every rank knows in advance: rank 0 measures the step
time and, inside the same all-reduce, proposes how many steps until the next one, so that one
exchange happens about every ``SYNC_EVERY_S`` (every step when steps are slower than that). An
exchange every step cost 4% of a small model's step on CPU, and one every 0.25 s still showed in
the overhead benchmark. So a request takes effect within about ``SYNC_EVERY_S`` plus one step:
prompt for a person pressing a key, and far inside torchrun's 30 s signal window. Looking for
the files at every step would not make a request land any sooner: it can only travel at a sync
step.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist

STOP, SAVE, INTERVAL = 0, 1, 2
SYNC_EVERY_S = 1.0
MAX_SYNC_INTERVAL = 64


@dataclass(frozen=True)
class Requests:
    stop: bool
    save: bool
    source: str | None


NOTHING = Requests(False, False, None)


class Control:
    def __init__(self, control_dir: Path | None, group: dist.ProcessGroup | None) -> None:
        """control_dir is given on global rank 0 only."""
        self._dir = control_dir
        if control_dir is not None:
            # Made up front, so that a plain `touch <run-dir>/control/stop` works.
            control_dir.mkdir(parents=True, exist_ok=True)
        self._group = group
        self._stop_source: str | None = None
        self._save = False
        self._pending: tuple[dist.Work, torch.Tensor] | None = None
        self._countdown = 0
        """Polls to let pass before the next publication; 0: publish at this one."""
        self._published_at = time.perf_counter()
        self._polls_since_publication = 0
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
        """Called once per step by every rank; returns what all ranks agreed, if anything."""
        self._polls_since_publication += 1
        agreed = self.settle() if self._pending is not None else NOTHING
        if self._countdown == 0:
            self._publish()
        else:
            self._countdown -= 1
        return agreed

    def _publish(self) -> None:
        # The files are looked at only here: a request travels no sooner than this anyway, and
        # two failed unlinks per step were a measurable part of a fast step.
        if self._consume("stop"):
            self._stop_source = self._stop_source or "control/stop"
        self._save = self._consume("save") or self._save
        flags = torch.zeros(3, dtype=torch.int32)
        flags[STOP] = self._stop_source is not None
        flags[SAVE] = self._save
        flags[INTERVAL] = self._proposed_interval()
        self._save = False
        work = dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        assert work is not None
        self._pending = (work, flags)

    def _proposed_interval(self) -> int:
        # Only rank 0's proposal counts (the others send 0 and the reduction is MAX), so every
        # rank learns the same next sync step.
        if self._dir is None:
            return 0
        now = time.perf_counter()
        step_time = (now - self._published_at) / max(self._polls_since_publication, 1)
        self._published_at, self._polls_since_publication = now, 0
        if step_time <= 0:
            return 1
        return max(1, min(MAX_SYNC_INTERVAL, int(SYNC_EVERY_S / step_time)))

    def settle(self) -> Requests:
        """Wait for the outstanding publication, if any; every rank calls it once at the end."""
        if self._pending is None:
            return NOTHING
        work, flags = self._pending
        self._pending = None
        work.wait()
        # Counted from the publication one poll ago: this poll is the first step of the wait.
        self._countdown = max(int(flags[INTERVAL]), 1) - 1
        stop = bool(flags[STOP])
        source = (self._stop_source or "peer") if stop else None
        return Requests(stop, bool(flags[SAVE]), source)
