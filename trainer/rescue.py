"""Rescue checkpoints: the state of the last step this rank finished, written with no collective
when a peer's failure ends the run, so that a resume redoes no step.

Under DDP every rank holds the whole model and optimizer, and between steps every rank's copy is
the same. A step changes them only in its optimizer update, which runs after the gradients'
all-reduce: a peer that dies before that all-reduce ends leaves every other rank's copy at the
previous step, and one that dies after it leaves them at this step, both whole steps. So any rank
that outlives the failure holds what a checkpoint taken then would hold; writing it saves the
steps since the last periodic checkpoint (half the interval, on average) from being redone.

Two ways a rank learns of the failure:

- its collective raises (the peer's connection closed): :meth:`Rescuer.after` writes the rescue
  before the exception ends the rank;
- ddptui, having judged the attempt failed or hung, creates ``control/rescue`` in the run
  directory on every node before it ends the ranks: a thread of each rank that sees it appear
  writes the rescue and ends the process. The main thread may be blocked for good in a
  collective (a peer stopped, a link cut), where no Python code of its own can run; the state
  it would be changing is guarded by :meth:`Rescuer.changing`, never held across a collective.

One rank per node writes (the others find a checkpoint at their step or later and skip): node 0's
is what ``--resume latest`` reads; another node's is copied to the node that takes node 0's place
when node 0 is lost with its disk (ddptui's recovery).

Only on the CPU (gloo), without FSDP: on a GPU the host runs ahead of the device, so the step the
host counts is not the one the parameters hold, and NCCL's watchdog ends the ranks itself; under
FSDP no rank holds the whole state.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch.distributed as dist

from .checkpoint import CheckpointStore
from .events import EventLog

LOOK_EVERY_S = 0.1
"""How often a rank looks for ddptui's request (a stat of a file that is not there)."""
RESCUED_EXIT = 143
"""A rank's exit status once its rescue is written on request: as SIGTERM's, which follows."""


def _seen(path: Path) -> tuple[int, int] | None:
    """What tells one creation of ``path`` from another; None while there is none."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns


class Rescuer:
    """Writes this rank's rescue checkpoint when the run fails around it (see the module)."""

    def __init__(
        self,
        store: CheckpointStore,
        log: EventLog,
        state: Callable[[], tuple[dict[str, Any], int, int, int]],
        request: Path,
    ) -> None:
        """``state``: the whole training state with its step, epoch and world size, read while
        :meth:`changing` is not held; ``request``: the file ddptui creates to ask for it."""
        self._store, self._log, self._state = store, log, state
        self._lock = threading.Lock()
        self._done = False
        self._torn = False
        # A request left from an earlier attempt is not this one's.
        stale = _seen(request)
        threading.Thread(
            target=self._watch, args=(request, stale), name="rescue", daemon=True
        ).start()

    @contextlib.contextmanager
    def changing(self) -> Iterator[None]:
        """Held while a step updates the state: a rescue never reads it half-done, and none is
        written once an update failed half-way."""
        with self._lock:
            try:
                yield
            except BaseException:
                self._torn = True
                raise

    def after(self, error: BaseException) -> None:
        """The main thread's exception: a collective's failure is a peer's, and rescued."""
        if isinstance(error, dist.DistError) or "gloo" in str(error).lower():
            self._rescue(f"{type(error).__name__} in a collective")

    def _watch(self, request: Path, stale: tuple[int, int] | None) -> None:
        while _seen(request) in (None, stale):
            time.sleep(LOOK_EVERY_S)
        if self._rescue("asked by ddptui: the attempt failed"):
            self._log.close()
            os._exit(RESCUED_EXIT)

    def _rescue(self, why: str) -> bool:
        """Write the rescue unless a rank of this node has one at this step or later; whether
        this rank is done with the run."""
        with self._lock:
            if self._done or self._torn:
                return False
            self._done = True
            state, step, epoch, world_size = self._state()
            saved = self._store.save(
                state, step=step, epoch=epoch, world_size=world_size, newer_only=True
            )
            if saved is not None:
                self._log.emit(
                    "checkpoint",
                    path=str(saved.path),
                    step=step,
                    epoch=epoch,
                    seconds=saved.seconds,
                    bytes=saved.bytes,
                    rescue=why,
                )
            return True
