"""Following a run's files on every host: one SSH channel per host, resumed from byte offsets.

The node agent's ``follow`` streams every new line of the run's event, log and status files as
JSON documents, with a heartbeat every 2 s. :class:`HostFollower` turns that into typed
updates, remembers the offset after each line, and on a dropped channel or a silent host
reconnects and asks for the lines after those offsets: none is lost, none repeated.

What a host sends is untrusted, and what it may cost the head node is bounded per host:

- the lines read and not taken yet (:class:`Inbox`): at most :data:`INBOX_BYTES` bytes, each
  line counted with its objects (:data:`LINE_OBJECT_BYTES`), plus the one read that crossed it
  (a 64 KiB read and the document it finished, :data:`MAX_DOCUMENT_BYTES`): 2.4 MiB a host,
  155 MiB for 64 hosts. A full inbox makes its reader wait (SSH's flow control then holds the
  agent): no line is dropped;
- the offsets (:attr:`HostFollower.offsets`): only the host's own files as its plan names them
  (:class:`~ddptui.layout.HostFiles`: its ranks' events, its attempts' torchrun files, and
  as many local ranks' logs as its attempts can have: 268 for 8 ranks after 10 attempts, of
  paths up to :data:`~ddptui.layout.MAX_PATH_CHARS` characters), so files a host invents
  can neither grow the offsets nor crowd out its real ones. A line of any other file is
  dropped and counted (:attr:`HostFollower.unknown`), never remembered: 4,096 offsets of
  256-character paths take 1.4 MiB (measured), so 268 take under 0.1 MiB, 6 MiB for 64 hosts;
- a heartbeat: its document (256 KiB at most), its sample read by
  :func:`~ddptui.run.following.sample.sample_of` (cut to so many GPUs and ranks); the model
  keeps of it only the host's own ranks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, Protocol

import asyncssh

from ddptui.aio import QueueReader, SizedQueue, one_by_one
from ddptui.config.model import Config, HostConfig
from ddptui.layout import HostFiles
from ddptui.remote.programs import agent_program
from ddptui.remote.stream import LineStream, LineTooLong
from ddptui.remote.target import Keepalive
from ddptui.remote.transport import HostUnreachable, RemoteError, Transport
from ddptui.run.following.sample import sample_of
from ddptui.run.following.updates import (
    SILENCE_S,
    FileLine,
    Heartbeat,
    HostBack,
    HostSilent,
    Update,
)
from ddptui.run.record import NodeRecord, RunRecord
from ddptui.untrusted import count, finite, whole

MAX_DOCUMENT_BYTES = 256 * 1024
"""The agent cuts lines at 16 KiB; JSON escaping can at most sextuple that."""
MAX_TEXT_CHARS = 16384
FOLLOWING_KEEPALIVE = Keepalive(interval_s=5.0, count_max=2)
"""A cut link shows as silence within :data:`SILENCE_S`."""
RETRY_S = 2.0
INBOX_BYTES = 2 * 1024 * 1024
"""A host's lines read and not taken yet: thousands of typical lines (a step event is about
300 bytes), a few documents of the largest kind."""
LINE_OBJECT_BYTES = 40
"""What a line read costs in memory besides its bytes (its object, its place in a list): an
empty line is not free."""
MAX_OFFSET = 2**63 - 1
"""A file's size can be no more (``off_t``)."""
READER_STOP_S = 2.0
THIN = ("thin",)
"""The agent's ``follow`` argument that thins its fast ranks' step events."""


class Inbox(SizedQueue[list[bytes] | None]):
    """The reads from a host's channel not taken yet, each a list of lines, then None for its
    end.

    Full at ``max_bytes`` bytes of lines (:data:`LINE_OBJECT_BYTES` more for each): a reader
    then waits for room, so nothing is dropped. The end always goes in, full or not: its reader
    is done, and whoever takes the lines must learn so at once.
    """

    def __init__(self, max_bytes: int = INBOX_BYTES) -> None:
        super().__init__(0, max_bytes, _read_size)
        self._ended = False

    def full(self) -> bool:
        return not self._ended and super().full()

    def end(self) -> None:
        """Put the end of the channel in (None)."""
        self._ended = True
        self.put_nowait(None)


def _read_size(lines: list[bytes] | None) -> int:
    return sum(map(len, lines)) + LINE_OBJECT_BYTES * len(lines) if lines else 0


async def _read(stream: LineStream, inbox: Inbox) -> None:
    """Move the stream's lines into ``inbox``; its end once the stream ends, however it ends."""
    try:
        async for lines in stream.batches():
            await inbox.put(lines)
    except (LineTooLong, asyncssh.Error, OSError):
        pass
    finally:
        inbox.end()


class OpenTransport(Protocol):
    """What reaches a run's nodes now, the way its kind of cluster reaches them
    (:meth:`ddptui.run.backends.kind.Kind.transport`): SSH for a hosts file's hosts (with these
    keepalives), a Slurm job's ``srun`` steps, or the login node once the job has ended."""

    async def __call__(
        self,
        hosts: Sequence[HostConfig],
        job_id: str | None,
        keepalive: Keepalive = ...,
    ) -> Transport: ...


def _reason(error: BaseException) -> str:
    return error.reachability.detail if isinstance(error, HostUnreachable) else str(error)


class HostFollower:
    """Follows one host's run directory until :meth:`close` (or the consumer stops)."""

    def __init__(
        self,
        config: Config,
        host: HostConfig,
        run_dir: str,
        files: HostFiles,
        *,
        offsets: Mapping[str, int] | None = None,
        silence_s: float = SILENCE_S,
        clock: Callable[[], float] = time.monotonic,
        job_id: str | None = None,
        open_transport: OpenTransport | None = None,
        thin: bool = False,
    ) -> None:
        """``offsets``: path → where to resume (the lines taken before); ``files``: the files
        the host's plan gives it (:meth:`of_node`), the only ones followed; ``job_id``: the
        run's scheduler job (:attr:`RunRecord.job_id`), through which the node is reached while
        it runs; ``open_transport``: how the run's kind of cluster reaches the node (None: a
        follower that only reads what it is given, and opens nothing); ``thin``: the agent
        thins its fast ranks' step events (:mod:`ddptui.onhost.thinning`), as the supervisor
        asks: a read of the files as they stand gets every line."""
        self.config = config
        self.host = host
        self.run_dir = run_dir
        self.files = files
        self.offsets: dict[str, int] = {}
        self._logs = 0
        """Local ranks' log files among the offsets (``files.logs`` at most)."""
        self.unknown = 0
        """Lines of files that are not the host's, or past the bounds: dropped, not kept."""
        for path, offset in (offsets or {}).items():
            if count(offset, MAX_OFFSET) is not None and self._admits(path):
                self.offsets[path] = offset
        self.silence_s = silence_s
        self._clock = clock
        self.job_id = job_id
        self.open_transport = open_transport
        self.thin = thin
        self._last_heard = 0.0
        self._silent = False
        self._heard = False
        """Whether the current channel said anything."""
        self._remote: Transport | None = None
        self._stream: LineStream | None = None
        self._closed = False
        self.garbled = 0

    @classmethod
    def of_node(
        cls, config: Config, record: RunRecord, node: NodeRecord, **options: Any
    ) -> HostFollower:
        """The follower of ``node``'s part of ``record``, bounded by what its plan can write."""
        return cls(
            config,
            config.host(node.host),
            node.run_dir,
            record.host_files(node),
            job_id=record.job_id,
            **options,
        )

    def updates(self) -> AsyncGenerator[Update, None]:
        """What :meth:`batches` brings, one update at a time."""
        return one_by_one(self.batches())

    async def batches(self) -> AsyncGenerator[list[Update], None]:
        """The host's updates, as many at a time as each read from its channel brought: a
        busy host's lines are handed on together, not one by one."""
        self._last_heard = self._clock()
        self._silent = False
        while not self._closed:
            try:
                stream = await self._open()
            except (RemoteError, OSError) as error:
                failure = _reason(error)
            else:
                channel = self._channel(stream)
                try:
                    async for batch in channel:
                        yield batch
                finally:
                    # Closed here, by whoever leaves: left to the loop, its close (which ends
                    # the channel's process) runs as a task of its own, and can be cut short.
                    await channel.aclose()
                if self._heard or self._closed:
                    await asyncio.sleep(0.2)
                    continue
                # A channel that ended before it said anything never reached the agent (a step
                # Slurm could not start on the node): as good as no channel at all.
                failure = stream.why_ended or "the node agent ended before it answered"
            await self._reset()
            if self._closed:
                return
            quiet = self._clock() - self._last_heard
            if not self._silent and quiet >= self.silence_s:
                self._silent = True
                yield [HostSilent(self.host.name, quiet, failure)]
            await asyncio.sleep(min(RETRY_S, self.silence_s))

    async def _channel(self, stream: LineStream) -> AsyncGenerator[list[Update], None]:
        """What one channel says, a read at a time, until it ends or goes quiet for the
        silence window."""
        self._heard = False
        inbox = Inbox()
        reader = asyncio.create_task(_read(stream, inbox))
        reads = QueueReader(inbox)
        # A new channel gets a whole window to say something: the agent starts, then reads
        # every file from its offset before its first line (a silent host, back after a long
        # time, would otherwise be hung up on before it could).
        opened = self._clock()
        try:
            while True:
                since = self._clock() - max(self._last_heard, opened)
                timeout = max(self.silence_s - since, 0.1)
                try:
                    lines = await reads.get(timeout)
                except asyncio.TimeoutError:
                    if not self._silent:
                        self._silent = True
                        quiet = self._clock() - self._last_heard
                        yield [HostSilent(self.host.name, quiet, "the open connection went quiet")]
                    return
                if lines is None:
                    return
                self._last_heard = self._clock()
                self._heard = True
                batch: list[Update] = []
                if self._silent:
                    self._silent = False
                    batch.append(HostBack(self.host.name))
                for raw in lines:
                    update = self._parse(raw)
                    if update is not None:
                        batch.append(update)
                if batch:
                    yield batch
        finally:
            await self._reset()
            # Closing the channel ends the read; a read that ignores its cancellation must not
            # hang whoever stops following, so it is never awaited unbounded.
            reader.cancel()
            await asyncio.wait({reader}, timeout=READER_STOP_S)

    def reached(self) -> tuple[str, Transport] | None:
        """The host's name and the transport it is followed through, while the channel is
        open and the host heard (a dump asks it there: no connection to make)."""
        if self._remote is None or self._stream is None or self._silent:
            return None
        return self.host.name, self._remote

    async def close(self) -> None:
        """Stop following: :meth:`updates` ends and the channel is closed."""
        self._closed = True
        await self._reset()

    async def _open(self) -> LineStream:
        if self.open_transport is None:
            raise TypeError(f"the follower of {self.host.name} was given no way to reach it")
        self._remote = await self.open_transport([self.host], self.job_id, FOLLOWING_KEEPALIVE)
        reach = await self._remote.connect(self.host)
        if not reach.ok:
            raise HostUnreachable(self.host, reach)
        self._stream = await self._remote.open_stream(
            self.host,
            self._remote.python(
                self.host, "-", "follow", self.run_dir, *(THIN if self.thin else ())
            ),
            input=agent_program(self.offsets),
            max_line=MAX_DOCUMENT_BYTES,
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
        offset = count(offset, MAX_OFFSET)
        if not (isinstance(path, str) and offset is not None and isinstance(text, str)):
            self.garbled += 1
            return None
        known = self.offsets.get(path)
        if known is None and not self._admits(path):
            self.unknown += 1
            return None
        if offset <= (known or 0):
            # Already delivered (a replay after a reconnect): never repeat a line.
            return None
        self.offsets[path] = offset
        cut = document.get("cut") is True or len(text) > MAX_TEXT_CHARS
        text = text[:MAX_TEXT_CHARS]
        if not text.isascii():
            # A lone surrogate (JSON's "\ud800") can be neither written to a file nor encoded
            # for a terminal: replaced here, once, and every reader of the line is spared it.
            text = text.encode("utf-8", "replace").decode("utf-8")
        return FileLine(self.host.name, path, offset, text, cut)

    def _heartbeat(self, document: dict[str, Any]) -> Heartbeat | None:
        stamp = document.get("time")
        groups = document.get("groups")
        sample = document.get("sample")
        stamp = finite(stamp)
        if stamp is None:
            self.garbled += 1
            return None
        alive = {
            number: value is True
            for attempt, value in (groups.items() if isinstance(groups, dict) else ())
            if (number := whole(attempt)) is not None
        }
        behind = document.get("behind") is True
        return Heartbeat(self.host.name, stamp, alive, sample_of(sample), behind)

    def _admits(self, path: str) -> bool:
        """Whether to follow ``path``, not followed yet (counted as followed if so)."""
        named = self.files.of(path)
        if named is not None and named.local is not None:
            if self._logs >= self.files.logs:
                return False
            self._logs += 1
        return named is not None
