"""ddptui's events (docs/events.md) from a script that trains with Lightning, Hugging Face's
``Trainer`` or Accelerate, with no change to the script: written beside the stack handler as
``ddptui_instrument.py`` and installed by it in every rank's own process unless
``DDPTUI_INSTRUMENT=0`` (``[job] instrument = false``).

It imports nothing of a framework: it waits for the script to import one (a finder first on
``sys.meta_path`` that only wraps the loader of the modules below), then adds the framework's
own hook: a Lightning ``Callback`` to every ``Trainer``, a ``TrainerCallback`` to every
Hugging Face ``Trainer`` (and its ``training_step`` read for the rank's own loss), and a wrapper
around ``Accelerator.backward``. Each rank then writes its own events: ``start``, ``step``
(its own loss, samples/s where the batch is known, step time, memory), ``phase`` around
evaluation and checkpoint saves, ``done``, and ``error`` for the exception that ends it.
Whatever fails in here is one warning on stderr and the end of the events, never the end of
the script. On gloo, ranks whose training ended wait for each other at exit
(:func:`_exit_together`): torch's gloo otherwise aborts a rank now and then as it finalizes.

The frameworks' hooks are :mod:`ddptui.onhost.instrument_frameworks`, written beside it as
``ddptui_instrument_frameworks.py``. Never imported by ddptui: its source is what is
written. Stdlib only, Python ≥ 3.8.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

EVENTS_VERSION = 1
TAIL_BYTES = 16 * 2**20
STOP_EVERY_S = 1.0
MAX_STOP_INTERVAL = 64
WARNED: list[str] = []
PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 0.0


def _warn(what: str, error: BaseException) -> None:
    if not WARNED:
        WARNED.append(what)
        sys.stderr.write(
            f"ddptui: no events from this rank ({what}: {type(error).__name__}: {error}); "
            "the run goes on\n"
        )


class Events:
    """This rank's events file, appended a whole line per write."""

    def __init__(self, run_dir: str) -> None:
        env = os.environ
        self.ids = {
            "rank": int(env["RANK"]),
            "local_rank": int(env.get("LOCAL_RANK", "0")),
            "node_rank": int(env.get("GROUP_RANK", "0")),
            "world_size": int(env.get("WORLD_SIZE", "1")),
        }
        directory = Path(run_dir, "events")
        directory.mkdir(parents=True, exist_ok=True)
        self.path = str(directory / f"rank{self.ids['rank']}.jsonl")
        self.broken = False
        self.owner: Rank | None = None
        """The framework whose events these are: the first to start (Hugging Face's Trainer,
        not the Accelerate it trains with)."""

    def emit(self, kind: str, **fields: Any) -> None:
        if self.broken:
            return
        document = {"v": EVENTS_VERSION, "type": kind}
        document.update(self.ids)
        document["time"] = time.time()
        document.update(fields)
        try:
            line = json.dumps(document, allow_nan=False, default=str) + "\n"
        except ValueError:
            line = json.dumps(_finite(document), default=str) + "\n"
        try:
            handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(handle, line.encode("utf-8"))
            finally:
                os.close(handle)
        except OSError as error:
            self.broken = True
            _warn("writing " + self.path, error)


_INFINITE = (float("inf"), float("-inf"))


def _finite(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with its top-level numbers that JSON cannot carry (NaN, infinities) as null."""
    return {
        key: None if isinstance(value, float) and (value != value or value in _INFINITE) else value
        for key, value in document.items()
    }


def number_of(value: Any) -> float | None:
    """A loss as a float: a tensor's value (one sync with the device), a number, or None."""
    if value is None:
        return None
    try:
        if hasattr(value, "detach"):
            value = value.detach()
            if getattr(value, "numel", lambda: 1)() != 1:
                return None
            value = value.item()
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if number == number and number not in _INFINITE else None


def total_of(losses: list[float | None]) -> float | None:
    """An optimizer step's loss from its micro-batches' (each already divided by their
    number), or None when one is unknown."""
    known = [loss for loss in losses if loss is not None]
    return sum(known) if known and len(known) == len(losses) else None


def epoch_of(epoch: Any) -> int | None:
    return int(epoch) if isinstance(epoch, (int, float)) else None


def _memory() -> dict[str, float]:
    found: dict[str, float] = {}
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            found["cuda_allocated_mib"] = torch.cuda.memory_allocated() / 2**20
            found["cuda_reserved_mib"] = torch.cuda.memory_reserved() / 2**20
            found["cuda_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
            return found
    except Exception:
        pass
    with contextlib.suppress(OSError, ValueError, IndexError):
        found["rss_mib"] = int(Path("/proc/self/statm").read_text().split()[1]) * PAGE_MIB
    return found


def _versions(**more: str) -> dict[str, str]:
    versions = {"python": ".".join(str(part) for part in sys.version_info[:3])}
    torch = sys.modules.get("torch")
    if torch is not None:
        versions["torch"] = str(getattr(torch, "__version__", "?"))
    versions.update(more)
    return versions


def _backend() -> str | None:
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_initialized():
            return str(distributed.get_backend())
    except Exception:
        pass
    return None


def batch_size_of(batch: Any) -> int | None:
    """The samples in a batch: the first dimension of its first tensor (in a tuple, list or
    dict, one level deep)."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()), None)
    elif isinstance(batch, (tuple, list)) and batch:
        batch = batch[0]
    shape = getattr(batch, "shape", None)
    try:
        return int(shape[0]) if shape is not None and len(shape) else None
    except (TypeError, ValueError, IndexError):
        return None


class Pace:
    """Steps and samples since the previous step event: its rates."""

    def __init__(self) -> None:
        self.since = time.monotonic()
        self.steps = 0
        self.samples = 0
        self.known = True

    def add(self, samples: int | None) -> None:
        if samples is None:
            self.known = False
        else:
            self.samples += samples

    def step_fields(self, steps: int) -> dict[str, float]:
        now = time.monotonic()
        elapsed = max(now - self.since, 1e-9)
        fields = {"step_time_s": elapsed / max(steps, 1)}
        if self.known and self.samples:
            fields["samples_per_s"] = self.samples / elapsed
        self.since, self.samples, self.known = now, 0, True
        return fields


class Rank:
    """What one rank's hooks share: its events, and the step and pace of its last step event."""

    def __init__(self, events: Events, framework: str, version: str) -> None:
        self.events = events
        self.framework = framework
        self.version = version
        self.pace = Pace()
        self.last_step = -1
        self.started = False

    def start(self, **fields: Any) -> None:
        if self.events.owner is None:
            self.events.owner = self
        self.started = True
        if self.muted:
            return
        self.pace = Pace()
        self.last_step = int(fields.get("start_step") or 0)
        fields.setdefault("task", self.framework)
        fields.setdefault("config", {})
        self.events.emit(
            "start",
            versions=_versions(**{self.framework: self.version}),
            backend=_backend(),
            hostname=socket.gethostname(),
            pid=os.getpid(),
            **fields,
        )

    @property
    def muted(self) -> bool:
        return self.events.owner is not self

    def step(self, step: int, loss: float | None, **fields: Any) -> None:
        if self.muted or step <= self.last_step:
            return
        done = step - self.last_step if self.last_step >= 0 else 1
        self.last_step = step
        fields.update(self.pace.step_fields(done))
        fields.update(_memory())
        self.events.emit("step", step=step, loss=loss, **fields)

    def phase(self, phase: str) -> None:
        if not self.muted:
            self.events.emit("phase", phase=phase)

    def checkpoint(self, path: str, seconds: float) -> None:
        if not self.muted:
            self.events.emit("checkpoint", path=path, step=self.last_step, seconds=seconds)

    def saved_step(self, path: str) -> int | None:
        """The step of this rank's last ``checkpoint`` event for ``path`` in the tail of its
        events (the newest checkpoint is among the last events an attempt wrote)."""
        try:
            with Path(self.events.path).open("rb") as handle:
                handle.seek(max(handle.seek(0, os.SEEK_END) - TAIL_BYTES, 0))
                lines = handle.read().splitlines()
        except OSError:
            return None
        for line in reversed(lines):
            if b'"checkpoint"' not in line:
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("type") == "checkpoint" and event.get("path") == path:
                    step = event.get("step")
                    return step if isinstance(step, int) and step >= 0 else None
        return None

    def done(self, stopped: bool) -> None:
        ENDED.append(stopped)
        if self.muted:
            return
        self.events.emit(
            "done", step=max(self.last_step, 0), reason="stopped" if stopped else "completed"
        )

    def error(self, error: BaseException) -> None:
        if self.muted:
            return
        import traceback

        self.events.emit(
            "error",
            message=f"{type(error).__name__}: {error}",
            traceback="".join(traceback.format_exception(type(error), error, error.__traceback__)),
        )


class StopRequests:
    """Whether ddptui asked the run to stop (``control/stop`` in node 0's run directory, as the
    bundled trainer reads it), agreed on by every rank at the same step, so that all of them
    checkpoint and end together: at exchange steps every rank knows in advance, one all-reduce
    (MAX) of ``[stop, steps until the next exchange]``, rank 0 proposing the interval from its
    step time so that one happens about every :data:`STOP_EVERY_S`.

    Every rank takes part in every exchange whatever happened to its events (a rank that left
    them would keep its peers waiting); one whose exchange fails (as every rank's would, running
    the same code) says so and reads no more requests: a stop then ends it by SIGTERM."""

    def __init__(self) -> None:
        self.countdown = 1
        self.steps = 0
        self.since = time.monotonic()
        self.broken = False
        run_dir = os.environ.get("DDPTUI_RUN_DIR", "")
        self.request = Path(run_dir, "control", "stop") if os.environ["RANK"] == "0" else None

    def asked(self, device: Any) -> bool:
        """Called by every rank after each step; True on the step all of them stop at."""
        if self.broken:
            return False
        try:
            return self._exchange(device)
        except Exception as error:
            self.broken = True
            sys.stderr.write(
                f"ddptui: this rank reads no more stop requests ({type(error).__name__}: "
                f"{error}); a stop ends it by SIGTERM\n"
            )
            return False

    def _exchange(self, device: Any) -> bool:
        self.countdown -= 1
        self.steps += 1
        if self.countdown > 0:
            return False
        stop, interval = 0, 0
        if self.request is not None:
            per_step = (time.monotonic() - self.since) / self.steps
            interval = max(1, min(int(STOP_EVERY_S / max(per_step, 1e-6)), MAX_STOP_INTERVAL))
            if self.request.exists():
                stop = 1
                with contextlib.suppress(OSError):
                    self.request.unlink()
        torch = sys.modules["torch"]
        distributed = torch.distributed
        if distributed.is_available() and distributed.is_initialized():
            agreed = torch.tensor([stop, interval], dtype=torch.int64, device=device)
            distributed.all_reduce(agreed, op=distributed.ReduceOp.MAX)
            stop, interval = (int(value) for value in agreed.tolist())
        self.countdown, self.steps, self.since = max(interval, 1), 0, time.monotonic()
        return bool(stop)


def guarded(what: str, hook: Any) -> Any:
    """``hook`` that warns once and stops the events, never raising into the framework."""

    def warning_once(*args: Any, **kwargs: Any) -> Any:
        if WARNED:
            return None
        try:
            return hook(*args, **kwargs)
        except Exception as error:
            _warn(what, error)
            return None

    return warning_once


ERRORS: list[BaseException] = []
"""The uncaught exception that is ending the process, if one is."""
ENDED: list[bool] = []
"""Set once the framework's training has ended on this rank (its ``done``)."""
EXIT_TOGETHER_S = 30.0


def _exit_together() -> None:
    """At the exit of a rank whose training ended (no exception), wait up to
    :data:`EXIT_TOGETHER_S` for its peers to reach theirs, on gloo. gloo's process group is torn
    down as the interpreter finalizes, and a rank that gets there while a peer is still inside
    its last collective now and then aborts ("terminate called without an active exception"):
    5 of 20 runs of a 4-rank DDP script under load here, 0 of 20 with this barrier. torchrun
    then fails the node, and a graceful stop ends by SIGKILL after torch's exit barrier. Never
    after an exception: a rank leaving the training early would meet its peers' collectives."""
    distributed = sys.modules.get("torch.distributed")
    if not ENDED or ERRORS or distributed is None:
        return
    try:
        if not (distributed.is_available() and distributed.is_initialized()):
            return
        if distributed.get_backend() != "gloo":
            return
        import datetime

        work = distributed.barrier(async_op=True)
        work.wait(datetime.timedelta(seconds=EXIT_TOGETHER_S))
    except Exception as error:
        sys.stderr.write(f"ddptui: ranks not waited for at exit ({type(error).__name__})\n")


STOPPING = ("SIGTERMException", "KeyboardInterrupt")
"""What a framework raises as it stops on a signal (Lightning on SIGTERM): a stop, not an
error."""


def _excepthook(kind: Any, error: BaseException, trace: Any) -> None:
    ERRORS.append(error)
    owner = _EVENTS[0].owner if _EVENTS else None
    if owner is not None:
        if type(error).__name__ in STOPPING:
            guarded("excepthook", owner.done)(True)
        else:
            guarded("excepthook", owner.error)(error)
    _NEXT_EXCEPTHOOK[0](kind, error, trace)


_NEXT_EXCEPTHOOK = [sys.excepthook]


# --- installing -------------------------------------------------------------------------------

_EVENTS: list[Events] = []


def rank_events() -> Events:
    """The rank's one events file, whichever frameworks write to it."""
    if not _EVENTS:
        _EVENTS.append(Events(os.environ["DDPTUI_RUN_DIR"]))
    return _EVENTS[0]


def _framework(name: str) -> Any:
    """The hook of ``ddptui_instrument_frameworks`` (:mod:`ddptui.onhost.instrument_frameworks`)
    named ``name``, imported only once a script imports that framework."""

    def hook(module: Any) -> None:
        import ddptui_instrument_frameworks  # type: ignore[import-not-found]

        getattr(ddptui_instrument_frameworks, name)(module)

    return hook


HOOKS = {
    "lightning.pytorch": _framework("lightning"),
    "pytorch_lightning": _framework("lightning"),
    "transformers.trainer": _framework("transformers"),
    "accelerate": _framework("accelerate"),
}
"""A framework's module → what adds ddptui's hook to it once it has run (a package whole:
inside it, its parts are only partly there)."""


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        guarded("instrumenting " + self.name, HOOKS[self.name])(module)


class Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: the framework modules' specs from the finders after it, with a
    loader that adds ddptui's hook once the module has run."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None


def install() -> None:
    if any(isinstance(finder, Finder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, Finder())
    _NEXT_EXCEPTHOOK[0] = sys.excepthook
    sys.excepthook = _excepthook
    # Registered first, so run last: after the script's and the frameworks' own exit handlers.
    atexit.register(_exit_together)
