"""A viewer's connection to a run's supervisor (:class:`Attachment`): every message as it
comes, applied to the run's state for rendering, and requests with their answers. A
supervisor that goes away is found again, or started (:mod:`ddptui.run.supervising`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from ddptui.aio import QueueReader, wait_for
from ddptui.errors import DdptuiError
from ddptui.run import protocol
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Judgement, Steps
from ddptui.run.following.updates import FileLine, Heartbeat, HostBack, HostSilent
from ddptui.run.protocol import Attach, Ended, Gap, Hello, Judged, Message, Reply, Request, Said
from ddptui.run.record import RunRecord, RunState
from ddptui.run.supervising import ControlError, Say, Supervisors
from ddptui.untrusted import plain

REATTACH_WAIT_S = 3.0
"""After losing its supervisor, how long a viewer waits for another command to start one
before it starts one itself."""
READ_BYTES = 256 * 1024
DUMP_ANSWER_S = 300.0
"""How long a dump may take the supervisor: each host's stacks within 30 s, at once, then its
ranks' flight recorders, one after another."""


class Attachment:
    """A viewer's connection to a run's supervisor.

    :meth:`updates` yields every message as it comes, after applying it to :attr:`model` (the
    run's state for rendering) and :attr:`judgement` (what the supervisor says of it).
    :meth:`request` asks the supervisor for something and waits for its answer. A supervisor
    that goes away is found again (or started, and said so), and following resumes from the
    last line received: nothing is lost or repeated.
    """

    def __init__(
        self,
        supervisors: Supervisors,
        record: RunRecord,
        *,
        position: int | None,
        say: Say,
        steps: Steps = Steps.EVERY,
    ) -> None:
        """``steps``: how much of the step events the viewer's model reads (:class:`Steps`): a
        console charts every one, one that prints lines and the judgement needs none."""
        self.supervisors = supervisors
        self.record = record
        self.position = position
        """The journal position after the last line received (None: live messages only)."""
        self.say = say
        self.model = RunModel(record, steps=steps)
        self.judgement = Judgement.of_record(record)
        self.hello: Hello | None = None
        self.ended: Ended | None = None
        """The last attempt's end, once the supervisor has recorded it."""
        self.gaps = 0
        self._reader: asyncio.StreamReader | None = None
        self._partial = bytearray()
        self._writer: asyncio.StreamWriter | None = None
        self._queue: asyncio.Queue[list[tuple[Message, int | None]] | None] = asyncio.Queue()
        """Bursts of messages as they came, each with the journal position after it."""
        self._left = 0
        """Messages of the burst :meth:`updates` is handing out, not handed out yet."""
        self.taken: int | None = position
        """The journal position after the last line :meth:`updates` handed out."""
        self._replies: dict[str, asyncio.Future[Reply]] = {}
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Whether messages were received and not yet taken from :meth:`updates` (a count of
        them, or of their bursts)."""
        return self._left + self._queue.qsize()

    @property
    def burst_taken(self) -> bool:
        """:meth:`updates` handed out the last message of what one read of the supervisor
        brought: a moment for a front end to draw what it has."""
        return self._left == 0

    @property
    def caught_up(self) -> bool:
        """:meth:`updates` has handed out every line the journal held when this attached (or
        attached again)."""
        hello = self.hello
        return hello is not None and (self.taken or 0) >= hello.journal_end

    async def open(self) -> Attachment:
        await self._connect()
        self._task = asyncio.create_task(self._read())
        return self

    def over(self, item: object) -> bool:
        """Whether ``item`` (one of :meth:`updates`) ends following the run: the latest
        attempt's end, with no recovery to decide what comes after it."""
        return (
            isinstance(item, Ended)
            and item.attempt == self.judgement.attempt
            and not item.recovering
        )

    async def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=2.0)
        for future in self._replies.values():
            if not future.done():
                future.cancel()

    async def __aenter__(self) -> Attachment:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def updates(self) -> AsyncIterator[Message]:
        """Every message, applied, until the supervisor is gone for good or :meth:`close`."""
        reader = QueueReader(self._queue)
        while True:
            try:
                burst = await reader.get(3600.0)
            except asyncio.TimeoutError:
                continue
            if burst is None:
                return
            self._left = len(burst)
            for item, self.taken in burst:
                self._left -= 1
                self._apply(item)
                yield item

    async def request(self, op: str, *, debug: bool = False, timeout: float | None = None) -> Reply:
        """Ask the supervisor for ``op`` and wait for its answer (:class:`ControlError` when
        the connection is lost before it comes), whoever takes the other messages."""
        request = await self._send(op, debug)
        try:
            return await wait_for(asyncio.shield(self._replies[request]), timeout)
        except asyncio.TimeoutError:
            raise ControlError(
                f"run {self.record.id}: no answer to {op} in {timeout:g} s"
            ) from None
        finally:
            self._replies.pop(request, None)

    async def ask(
        self,
        op: str,
        *,
        debug: bool = False,
        began: float | None = None,
        bring_back: tuple[str, ...] = (),
    ) -> Reply:
        """:meth:`request` ``op``, taking what comes meanwhile (its steps are said) up to the
        answer, so that what follows it is what comes after it."""
        request = await self._send(op, debug, awaited=False, began=began, bring_back=bring_back)
        try:
            async for item in self.updates():
                if isinstance(item, Said):
                    self.say(item.line)
                elif isinstance(item, Reply) and item.id == request:
                    return item
        finally:
            self._replies.pop(request, None)
        raise ControlError(f"run {self.record.id}: its supervisor went away before answering")

    async def kept_dump(self) -> str | None:
        """Ask the supervisor for every rank's stacks: the name of the folder under the run's
        ``dumps/`` it kept them in; None from a supervisor that takes none (one started by an
        older ddptui, which would never answer)."""
        if self.hello is None or "dump" not in self.hello.ops:
            return None
        reply = await self.request("dump", timeout=DUMP_ANSWER_S)
        if not reply.ok:
            raise ControlError(f"run {self.record.id}: {plain(reply.message, one_line=True)}")
        kept = reply.data.get("kept")
        if not isinstance(kept, str) or kept in ("", ".", "..") or "/" in kept:
            raise ControlError(f"run {self.record.id}: its supervisor named no dump it kept")
        return kept

    async def _send(
        self,
        op: str,
        debug: bool,
        *,
        awaited: bool = True,
        began: float | None = None,
        bring_back: tuple[str, ...] = (),
    ) -> str:
        """Send a request; its id (``awaited``: its answer resolves ``_replies[id]``; else it
        is read from :meth:`updates`, and a future nobody awaits would only be reported)."""
        writer = self._writer
        if writer is None:
            raise ControlError(f"run {self.record.id}: not connected to its supervisor")
        request = Request(f"r{next(self._ids)}", op, debug, began, bring_back)
        if awaited:
            self._replies[request.id] = asyncio.get_running_loop().create_future()
        writer.write(protocol.message(request))
        await writer.drain()
        return request.id

    async def wait_started(self, *, queued: bool = False) -> None:
        """Wait until a new run's first attempt runs (``queued``: its Slurm job is submitted):
        :class:`ControlError` with the reason if staging or the start failed (a new run ends
        no other way before it runs)."""
        async for item in self.updates():
            if isinstance(item, Said):
                self.say(item.line)
            state = self.judgement.state
            if state is RunState.RUNNING or state is RunState.HUNG:
                return
            if queued and state is RunState.STARTING:
                return
            if state.final:
                raise ControlError(plain(self.judgement.detail))
        raise ControlError(f"run {self.record.id}: its supervisor went away while it started")

    async def _connect(self) -> None:
        reader, writer, hello = await self.supervisors.connect(
            self.record, self.position, say=self.say
        )
        self._reader, self._writer, self.hello = reader, writer, hello
        self._queue.put_nowait([(hello, self.position)])

    async def _read(self) -> None:
        try:
            while not self._closed:
                assert self._reader is not None
                if await self._receive(self._reader):
                    continue
                # The supervisor went away: for good once the run ended and was recorded.
                for future in self._replies.values():
                    if not future.done():
                        future.set_exception(
                            ControlError(f"run {self.record.id}: its supervisor went away")
                        )
                if self.supervisors.store.load(self.record.id).state.final or self._closed:
                    break
                await asyncio.sleep(REATTACH_WAIT_S)
                await self._connect()
        except (DdptuiError, OSError) as error:
            self.say(f"run {self.record.id}: lost its supervisor: {error}")
        finally:
            self._queue.put_nowait(None)

    async def _receive(self, reader: asyncio.StreamReader) -> bool:
        """Take what the supervisor sent next, a burst at a time (a line at a time cost more
        than the lines); False once the connection has ended."""
        try:
            chunk = await reader.read(READ_BYTES)
        except OSError:
            chunk = b""
        if not chunk:
            self._partial.clear()
            return False
        self._partial += chunk
        end = self._partial.rfind(b"\n") + 1
        if not end:
            if len(self._partial) > protocol.MAX_MESSAGE_BYTES:
                self._partial.clear()
                return False
            return True
        lines, self._partial = bytes(self._partial[:end]), self._partial[end:]
        burst = [
            taken
            for raw in lines.splitlines(keepends=True)
            if (taken := self._take(raw)) is not None
        ]
        if burst:
            self._queue.put_nowait(burst)
        return True

    def _take(self, raw: bytes) -> tuple[Message, int | None] | None:
        """A received message, for :meth:`updates` (which applies it, so what the model and
        the judgement say is what the consumer has seen, in order), with the journal position
        after it; replies answer their requests at once."""
        item = protocol.decode(raw)
        if item is None or isinstance(item, (Attach, Request)):
            return None
        if isinstance(item, FileLine):
            if self.position is not None:
                self.position += len(raw)
        elif isinstance(item, Gap):
            self.position = item.lost_to
        elif isinstance(item, Reply):
            future = self._replies.get(item.id)
            if future is not None and not future.done():
                future.set_result(item)
        return item, self.position

    def _apply(self, item: Message) -> None:
        if isinstance(item, (FileLine, Heartbeat, HostSilent, HostBack)):
            self.model.apply(item)
        elif isinstance(item, Gap):
            self.gaps += 1
        elif isinstance(item, (Judged, Hello)):
            self._judge(item.judgement)
        elif isinstance(item, Ended):
            self.ended = item
            self.model.conclude(item.state)

    def _judge(self, judgement: Judgement) -> None:
        new_attempt = judgement.attempt != self.judgement.attempt
        if judgement.state is not self.judgement.state or new_attempt:
            self.record = self.supervisors.store.load(self.record.id)
            placed = [node.host for node in self.record.nodes] != list(self.model.nodes)
            if (new_attempt and judgement.attempt > self.model.attempt) or placed:
                # The supervisor says so before any line of the new attempt comes; so it does
                # when a scheduler placed the attempt (its nodes known once its job runs).
                self.model.next_attempt(self.record)
            else:
                self.model.record = self.record
        self.judgement = judgement
        # Attached after the end: no Ended comes, the judgement says it all.
        self.model.conclude(judgement.state)


__all__ = ["Attachment", "ControlError", "Say"]
