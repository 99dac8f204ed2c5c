"""Serving viewers: each attached connection gets the journal from its position, then what
happens live, in the supervisor's order; what it asks is handed to the supervisor."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from ddptui.run import protocol
from ddptui.run.following.updates import Heartbeat, Update
from ddptui.run.journal import Journal
from ddptui.run.protocol import Attach, Hello, Reply, Request, Said

VIEWER_BACKLOG = 1024
"""Messages (other than lines and heartbeats) a viewer may fall behind by before it is hung
up on; it can attach again from where it was, since the lines come from the journal."""
SAID_KEPT = 64
"""Lines of the job in progress, or else of the last one, kept for a viewer that attaches
from before where they were said."""
CLOSE_WAIT_S = 10.0


class Viewer:
    """One attached connection: the journal from its position, then what happens live."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.position: int | None = None
        self.attached = False
        self.wake = asyncio.Event()
        self.backlog: deque[tuple[int, bytes]] = deque()
        """Messages with the journal position they follow: sent in the supervisor's order."""
        self.beats: dict[str, bytes] = {}
        """The newest heartbeat per host not sent yet: a slow viewer gets fewer, never old."""
        self.closed = False

    def push(self, position: int, data: bytes) -> None:
        if len(self.backlog) >= VIEWER_BACKLOG:
            self.close()
            return
        self.backlog.append((position, data))
        self.wake.set()

    def beat(self, host: str, data: bytes) -> None:
        self.beats[host] = data
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()
        self.writer.close()


class Audience:
    """Every viewer of the run, and what a newcomer is told first."""

    def __init__(
        self,
        journal: Journal,
        hello: Callable[[], Hello],
        asked: Callable[[Viewer, Request], None],
    ) -> None:
        self.journal = journal
        self._hello = hello
        self._asked = asked
        self.viewers: set[Viewer] = set()
        self.in_job = False
        self.said_in_job: deque[tuple[int, bytes]] = deque(maxlen=SAID_KEPT)
        """What the job in progress, or else the last one, said, each with the journal
        position it follows. Kept past the job's end: a launch's command may connect only
        once the launch is done (a quick staging), and must still print what it said."""
        self.latest: dict[str, bytes] = {}
        """Host → its latest heartbeat, silence or return, for viewers that attach later."""
        self._handlers: set[asyncio.Task[None]] = set()

    def job_began(self, began: bool) -> None:
        if began:
            self.said_in_job.clear()
        self.in_job = began

    async def connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        handler.add_done_callback(self._handlers.discard)
        viewer = Viewer(writer)
        self.viewers.add(viewer)
        sender: asyncio.Task[None] | None = None
        try:
            while not viewer.closed:
                try:
                    raw = await reader.readline()
                except (ValueError, OSError):
                    break  # over the line limit, or the connection broke
                if not raw:
                    break
                item = protocol.decode(raw)
                if isinstance(item, Attach) and not viewer.attached:
                    if item.version != protocol.VERSION:
                        refusal = (
                            f"this run's supervisor speaks protocol v{protocol.VERSION}, not "
                            f"v{item.version}: use the ddptui that started it"
                        )
                        writer.write(protocol.message(Reply("attach", False, refusal)))
                        break
                    viewer.position = item.position
                    viewer.attached = True
                    for position, said in self.said_in_job:
                        if self.in_job if item.position is None else position >= item.position:
                            viewer.push(position, said)
                    sender = asyncio.create_task(self._send(viewer))
                elif isinstance(item, Request) and viewer.attached:
                    self._asked(viewer, item)
        finally:
            self.viewers.discard(viewer)
            viewer.close()
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
                    await sender

    async def _send(self, viewer: Viewer) -> None:
        writer, journal = viewer.writer, self.journal
        try:
            writer.write(protocol.message(self._hello()))
            for data in self.latest.values():
                writer.write(data)
            while not viewer.closed:
                # Lines up to where the next message was said, then the message: the viewer
                # learns of a new attempt before any of its lines, as the supervisor did.
                upto = min(viewer.backlog[0][0] if viewer.backlog else journal.end, journal.end)
                if viewer.position is not None and viewer.position < upto:
                    start, data = journal.read(viewer.position, upto - viewer.position)
                    if start > viewer.position:
                        writer.write(protocol.message(protocol.Gap(viewer.position, start)))
                    writer.write(data)
                    viewer.position = start + len(data)
                elif viewer.backlog or viewer.beats:
                    while viewer.backlog and (
                        viewer.position is None or viewer.backlog[0][0] <= viewer.position
                    ):
                        writer.write(viewer.backlog.popleft()[1])
                    beats, viewer.beats = viewer.beats, {}
                    for data in beats.values():
                        writer.write(data)
                else:
                    viewer.wake.clear()
                    await writer.drain()
                    await viewer.wake.wait()
                    continue
                await writer.drain()
        except (ConnectionError, OSError):
            viewer.close()

    def update(self, update: Update) -> None:
        """A host's heartbeat, silence or return, to every viewer (heartbeats: the newest)."""
        data = protocol.message(update)
        self.latest[update.host] = data
        for viewer in self.viewers:
            if viewer.attached:
                if isinstance(update, Heartbeat):
                    viewer.beat(update.host, data)
                else:
                    viewer.push(self.journal.end, data)

    def broadcast(self, data: bytes) -> None:
        if self.journal.flush():
            self.wake()
        for viewer in list(self.viewers):
            if viewer.attached:
                viewer.push(self.journal.end, data)

    def wake(self) -> None:
        for viewer in self.viewers:
            viewer.wake.set()

    def say(self, line: str) -> None:
        said = protocol.message(Said(line))
        self.broadcast(said)
        if self.in_job:
            self.said_in_job.append((self.journal.end, said))

    def reply(
        self,
        viewer: Viewer,
        request: str,
        ok: bool,
        message: str,
        data: dict[str, object] | None = None,
    ) -> None:
        if not viewer.closed:
            viewer.push(self.journal.end, protocol.message(Reply(request, ok, message, data or {})))

    async def close(self) -> None:
        """Hang up on everyone; each connection's handler sees its end and returns."""
        for viewer in list(self.viewers):
            viewer.close()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=CLOSE_WAIT_S)
