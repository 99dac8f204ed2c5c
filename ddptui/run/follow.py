"""Following a run's files on every host: one SSH channel per host, resumed from byte offsets.

The node agent's ``follow`` streams every new line of the run's event, log and status files as
JSON documents, with a heartbeat every 2 s. :class:`HostFollower` turns that into typed
updates, remembers the offset after each line, and on a dropped channel or a silent host
reconnects and asks for the lines after those offsets: none is lost, none repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import asyncssh

from ddptui.aio import QueueReader
from ddptui.config.model import Config, HostConfig
from ddptui.remote.commands import python_argv
from ddptui.remote.connection import HostUnreachable, RemoteCluster, RemoteError
from ddptui.remote.stream import LineTooLong, RemoteStream
from ddptui.run.agent_client import AGENT_SOURCE

MAX_DOCUMENT_BYTES = 256 * 1024
"""The agent cuts lines at 16 KiB; JSON escaping can at most sextuple that."""
MAX_TEXT_CHARS = 16384
SILENCE_S = 12.0
"""No heartbeat for this long (the agent sends one every 2 s): the host is not answering."""
RETRY_S = 2.0
INBOX_LINES = 4096
READER_STOP_S = 2.0


class FileLine(NamedTuple):
    """A complete line of one of the run's files on ``host`` (path relative to the run dir).

    A tuple: there is one for every line a run writes, and a frozen dataclass costs several
    times as much to make."""

    host: str
    path: str
    offset: int
    """The byte offset just after this line: where to resume."""
    text: str
    cut: bool = False


@dataclass(frozen=True)
class Heartbeat:
    host: str
    time: float
    groups: Mapping[int, bool]
    """Attempt number → whether its process group still lives."""
    sample: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HostSilent:
    """The host has not answered for ``seconds`` (link cut, host down, sshd gone)."""

    host: str
    seconds: float
    reason: str


@dataclass(frozen=True)
class HostBack:
    """A silent host answers again."""

    host: str


Update = FileLine | Heartbeat | HostSilent | HostBack


async def _read(stream: RemoteStream, inbox: asyncio.Queue[bytes | None]) -> None:
    """Move the stream's lines into ``inbox``; None once it ends, however it ends."""
    try:
        async for raw in stream.lines():
            await inbox.put(raw)
    except (LineTooLong, asyncssh.Error, OSError):
        pass
    finally:
        with contextlib.suppress(asyncio.QueueFull):
            inbox.put_nowait(None)


def _reason(error: BaseException) -> str:
    return error.reachability.detail if isinstance(error, HostUnreachable) else str(error)


class HostFollower:
    """Follows one host's run directory until :meth:`close` (or the consumer stops)."""

    def __init__(
        self,
        config: Config,
        host: HostConfig,
        run_dir: str,
        *,
        offsets: Mapping[str, int] | None = None,
        silence_s: float = SILENCE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.host = host
        self.run_dir = run_dir
        self.offsets: dict[str, int] = dict(offsets or {})
        self.silence_s = silence_s
        self._clock = clock
        self._remote: RemoteCluster | None = None
        self._stream: RemoteStream | None = None
        self._closed = False
        self.garbled = 0

    async def updates(self) -> AsyncIterator[Update]:
        last_heard = self._clock()
        silent = False
        while not self._closed:
            try:
                stream = await self._open()
            except (RemoteError, OSError) as error:
                await self._reset()
                if self._closed:
                    return
                quiet = self._clock() - last_heard
                if not silent and quiet >= self.silence_s:
                    silent = True
                    yield HostSilent(self.host.name, quiet, _reason(error))
                await asyncio.sleep(min(RETRY_S, self.silence_s))
                continue
            inbox: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=INBOX_LINES)
            reader = asyncio.create_task(_read(stream, inbox))
            lines = QueueReader(inbox)
            # A new channel gets a whole window to say something: the agent starts, then reads
            # every file from its offset before its first line (a silent host, back after a
            # long time, would otherwise be hung up on before it could).
            opened = self._clock()
            try:
                while True:
                    since = self._clock() - max(last_heard, opened)
                    timeout = max(self.silence_s - since, 0.1)
                    try:
                        raw = await lines.get(timeout)
                    except asyncio.TimeoutError:
                        if not silent:
                            silent = True
                            quiet = self._clock() - last_heard
                            yield HostSilent(
                                self.host.name, quiet, "the open connection went quiet"
                            )
                        break
                    if raw is None:
                        break
                    last_heard = self._clock()
                    if silent:
                        silent = False
                        yield HostBack(self.host.name)
                    update = self._parse(raw)
                    if update is not None:
                        yield update
            finally:
                await self._reset()
                # Closing the channel ends the read; a read that ignores its cancellation must
                # not hang whoever stops following, so it is never awaited unbounded.
                reader.cancel()
                await asyncio.wait({reader}, timeout=READER_STOP_S)
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        """Stop following: :meth:`updates` ends and the channel is closed."""
        self._closed = True
        await self._reset()

    async def _open(self) -> RemoteStream:
        # Keepalives every 5 s: a cut link shows as silence within the silence window.
        self._remote = RemoteCluster.for_config(
            self.config, [self.host], keepalive_interval=5.0, keepalive_count_max=2
        )
        reach = await self._remote.connect(self.host)
        if not reach.ok:
            raise HostUnreachable(self.host, reach)
        argv = python_argv(self.host, "-", "follow", self.run_dir, json.dumps(self.offsets))
        self._stream = await self._remote.open_stream(
            self.host, argv, input=AGENT_SOURCE, max_line=MAX_DOCUMENT_BYTES
        )
        return self._stream

    async def _reset(self) -> None:
        stream, remote = self._stream, self._remote
        self._stream = self._remote = None
        if stream is not None:
            await stream.close()
        if remote is not None:
            await remote.close()

    def _parse(self, raw: bytes) -> Update | None:
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):
            self.garbled += 1
            return None
        if not isinstance(document, dict):
            self.garbled += 1
            return None
        kind = document.get("k")
        if kind == "line":
            return self._line(document)
        if kind == "hb":
            return self._heartbeat(document)
        self.garbled += 1
        return None

    def _line(self, document: dict[str, Any]) -> FileLine | None:
        path, offset, text = document.get("f"), document.get("o"), document.get("t")
        if not (
            isinstance(path, str)
            and isinstance(offset, int)
            and not isinstance(offset, bool)
            and isinstance(text, str)
            and len(path) < 1024
        ):
            self.garbled += 1
            return None
        if offset <= self.offsets.get(path, 0):
            # Already delivered (a replay after a reconnect): never repeat a line.
            return None
        self.offsets[path] = offset
        cut = document.get("cut") is True or len(text) > MAX_TEXT_CHARS
        return FileLine(self.host.name, path, offset, text[:MAX_TEXT_CHARS], cut)

    def _heartbeat(self, document: dict[str, Any]) -> Heartbeat | None:
        stamp = document.get("time")
        groups = document.get("groups")
        sample = document.get("sample")
        if not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
            self.garbled += 1
            return None
        alive = {
            int(attempt): value is True
            for attempt, value in (groups.items() if isinstance(groups, dict) else ())
            if isinstance(attempt, str) and _whole(attempt, 9)
        }
        return Heartbeat(self.host.name, float(stamp), alive, sample_of(sample))


GPU_FIELDS = (
    "index",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.max.sm",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "pstate",
    "ecc.errors.uncorrected.volatile.total",
)
"""What the agent samples of each GPU every 2 s (nvidia-smi's names and its printed values)."""
GPU_TEXT_FIELDS = frozenset({"pstate"})
"""Kept as text (``P0``); every other field is a number, or left out when nvidia-smi printed
none (``[N/A]``, ``[Not Supported]``)."""
MAX_GPUS = 64


MAX_SAMPLED_RANKS = 1024
PROCESS_STATE_LETTERS = frozenset("RSDZTtWXxKPI")
"""The states ``/proc/PID/stat`` shows (``ps``'s STAT letters)."""


def _whole(text: str, digits: int) -> bool:
    """An ASCII whole number of at most ``digits`` digits (``"²".isdigit()`` is true too)."""
    return text.isascii() and text.isdigit() and len(text) <= digits


def _finite(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def sample_of(value: Any) -> dict[str, Any]:
    """The heartbeat's sample with only known keys, numbers finite, strings short."""
    if not isinstance(value, dict):
        return {}
    sample: dict[str, Any] = {}
    for key in ("procs", "cpu_pct", "rss_mib"):
        number = _finite(value.get(key))
        if number is not None:
            sample[key] = number
    gpus = value.get("gpus")
    if isinstance(gpus, list):
        sample["gpus"] = [_gpu(gpu) for gpu in gpus[:MAX_GPUS] if isinstance(gpu, dict)]
    ranks = value.get("ranks")
    if isinstance(ranks, dict):
        sample["ranks"] = _ranks(ranks)
    return sample


def _ranks(value: dict[Any, Any]) -> dict[int, dict[str, Any]]:
    """Global rank → its process's state letter and CPU, for the hang judgement."""
    found: dict[int, dict[str, Any]] = {}
    for rank, seen in list(value.items())[:MAX_SAMPLED_RANKS]:
        if not (isinstance(rank, str) and _whole(rank, 6) and isinstance(seen, dict)):
            continue
        state, cpu = seen.get("state"), _finite(seen.get("cpu_pct"))
        found[int(rank)] = {
            "state": state if isinstance(state, str) and state in PROCESS_STATE_LETTERS else None,
            "cpu_pct": max(float(cpu), 0.0) if cpu is not None else None,
        }
    return found


def _gpu(printed: dict[Any, Any]) -> dict[str, int | float | str]:
    """One GPU's row as nvidia-smi printed it, typed: whole numbers as ints, the rest finite
    floats; an ``index`` that is no whole number is left out."""
    gpu: dict[str, int | float | str] = {}
    for key in GPU_FIELDS:
        text = printed.get(key)
        if not isinstance(text, str):
            continue
        text = text.strip()[:32]
        if key in GPU_TEXT_FIELDS:
            gpu[key] = text
            continue
        try:
            number = float(text)
        except ValueError:
            continue
        if not math.isfinite(number):
            continue
        if number.is_integer():
            gpu[key] = int(number)
        elif key != "index":
            gpu[key] = number
    return gpu
