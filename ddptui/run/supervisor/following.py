"""Following the attempt: one follower per node feeding one inbox, its lines kept in the
journal and applied to the run's model (:class:`~ddptui.run.following.model.RunModel`), the rest
passed to viewers, and the supervisor's judging called twice a second."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Collection, Coroutine, Mapping

from ddptui.aio import QueueReader, SizedQueue, wait_for
from ddptui.remote.transport import Transport
from ddptui.run import protocol
from ddptui.run.backends import Follower
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Steps, Verdict
from ddptui.run.following.updates import FileLine, Heartbeat, HostBack, HostSilent, Update
from ddptui.run.journal import Journal
from ddptui.run.record import NodeRecord, RunRecord
from ddptui.run.supervisor import ending
from ddptui.run.supervisor.viewers import Audience

FLUSH_EVERY_S = 0.1
FLUSH_BYTES = 256 * 1024
JUDGE_EVERY_S = 0.5
"""Judging looks at every rank: twice a second, not after every burst of lines, and as the
hang window ends (a moment after, :data:`PAST_DUE_S`): a hang is not said up to a tick late."""
PAST_DUE_S = 0.01
CHECKPOINT_EVERY_S = 5.0
FOLLOW_STOP_S = 10.0
SETTLE_S = 6.0
"""How long following goes on after an attempt ended, for the lines its ranks wrote last."""
INBOX = 10000
INBOX_BYTES = 16 * 1024 * 1024
"""What the updates of every host waiting to be judged may hold, in at most :data:`INBOX` reads
of a host's channel: a line keeps up to 16,384 characters, 64 KiB in memory when they are not
ASCII, so a count alone would allow 640 MiB."""
HEARTBEAT_BYTES = 4096
"""What a heartbeat is counted as: its GPU samples are capped (64 GPUs of a few fields)."""
UPDATE_OBJECT_BYTES = 100
"""What an update costs besides its text (its tuple, its strings' headers): a read of short
lines is not free."""

log = logging.getLogger("ddptui.supervisor")


def updates_inbox() -> SizedQueue[list[Update]]:
    """Every host's updates waiting to be judged, a read of a host's channel at a time: full at
    :data:`INBOX` reads or :data:`INBOX_BYTES`, whereupon the followers wait (their hosts'
    channels then fill)."""
    return SizedQueue(INBOX, INBOX_BYTES, _batch_size)


def _batch_size(batch: list[Update]) -> int:
    return sum(map(_update_size, batch))


def _update_size(update: Update) -> int:
    if isinstance(update, FileLine):
        # A str of any non-ASCII character takes up to 4 bytes a character (PEP 393).
        text = len(update.text) if update.text.isascii() else 4 * len(update.text)
        return text + len(update.path) + UPDATE_OBJECT_BYTES
    return HEARTBEAT_BYTES if isinstance(update, Heartbeat) else UPDATE_OBJECT_BYTES


class Following:
    """The followers of the current attempt and what they feed."""

    def __init__(
        self,
        journal: Journal,
        audience: Audience,
        follower: Callable[[NodeRecord, Mapping[str, int] | None], Follower],
        judge: Callable[[], float | None],
        crashed: Callable[[BaseException], None],
        faulted: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.journal = journal
        self.audience = audience
        self._follower = follower
        self._judge = judge
        self._crashed = crashed
        self._faulted = faulted
        self._clock = clock
        self._wall = wall
        self.followed: RunModel | None = None
        self._inbox = updates_inbox()
        self._followers: list[Follower] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._beats_after: dict[str, int] = {}
        self._settled = asyncio.Event()
        self.heard_since_judged: set[str] = set()
        """The hosts whose lines were taken since judging last looked: where a fault in
        judging came from."""

    @property
    def model(self) -> RunModel:
        assert self.followed is not None, "the run is not followed"
        return self.followed

    @property
    def active(self) -> bool:
        return bool(self._tasks)

    def reached(self) -> dict[str, Transport]:
        """Host → what it is followed through, for each host followed and heard now."""
        return dict(found for follower in self._followers if (found := follower.reached()))

    def begin(self, record: RunRecord) -> None:
        """Follow ``record``'s latest attempt on its nodes, each from where the journal left
        it."""
        if self.followed is None:
            model = RunModel(record, self._clock, self._wall, steps=Steps.LATEST)
            # What an earlier supervisor took (earlier attempts' too) shapes the state, less
            # what it set aside: replayed, a line that faulted would fault again.
            for raw in self.journal.lines():
                line = protocol.decode(raw)
                if isinstance(line, FileLine) and not self.journal.was_set_aside(line):
                    model.apply(line)
            self._set_aside(model)
            self.followed = model
        elif self.followed.attempt != record.attempt.number:
            self.followed.next_attempt(record)
        self._followers = [
            self._follower(node, self.journal.offsets.get(node.host)) for node in record.nodes
        ]
        self._tasks = [self._task(self._pump(follower)) for follower in self._followers]
        self._tasks.append(self._task(self._judge_loop()))

    def place(self, record: RunRecord, placed: list[NodeRecord]) -> None:
        """The attempt's nodes chosen anew: the journal resumes each node's files by node
        rank, since a new allocation may give a node rank another machine."""
        previous = {node.node_rank: node.host for node in record.nodes}
        offsets = self.journal.offsets
        self.journal.offsets = {
            node.host: offsets.get(previous.get(node.node_rank, node.host), {}) for node in placed
        }

    async def end(self, *, settle: bool = True, unreachable: Collection[str] = ()) -> None:
        """Stop following; with ``settle``, once every host that answers has sent what its run's
        files hold now (the last lines of ranks that just ended), or after ``SETTLE_S``.
        ``unreachable``: hosts known not to answer (SSH refused as the attempt was ended),
        whose follower may not have found them silent yet: not waited for."""
        followers, tasks = self._followers, self._tasks
        if not tasks:
            return
        self._beats_after = dict.fromkeys(
            (
                node.host
                for node in self.model.nodes.values()
                if node.silent is None and node.host not in unreachable
            ),
            0,
        )
        self._settled.clear()
        if settle and not self._all_sent():
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_for(self._settled.wait(), SETTLE_S)
        self._beats_after = {}
        self._followers, self._tasks = [], []
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(asyncio.gather(*(f.close() for f in followers)), FOLLOW_STOP_S)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=FOLLOW_STOP_S)
        self._drain()
        self.journal.checkpoint()

    async def verdict_within(self, seconds: float, *, stopping: bool) -> Verdict | None:
        """What the followed ranks say of the attempt's end (:func:`~.ending.verdict`), looked
        at as often as judging looks, for up to ``seconds``."""
        deadline = self._clock() + seconds
        while (verdict := ending.verdict(self.model, stopping=stopping)) is None:
            if self._clock() >= deadline:
                return None
            await asyncio.sleep(JUDGE_EVERY_S)
        return verdict

    def _task(self, work: Coroutine[None, None, None]) -> asyncio.Task[None]:
        """``work`` as a task whose failure ends the supervisor, logged: a bug in following or
        judging must not leave the run looking supervised while nothing watches it."""
        task = asyncio.create_task(work)
        task.add_done_callback(self._failed)
        return task

    def _failed(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        assert error is not None
        log.critical(
            "following failed; ending this supervisor (the next ddptui command starts "
            "another):\n%s",
            "".join(traceback.format_exception(error)),
        )
        self._crashed(error)

    def _all_sent(self) -> bool:
        """Whether every host that answered when following was to end has sent all its run's
        files held then. The agent reads every file in each round, the run's events and logs
        before torchrun's exit status: once a node's status has come, so has what its ranks
        wrote before they ended; else two heartbeats from then on (each follows a round)."""
        nodes = self.model.nodes
        return all(
            nodes[host].exit is not None or beats >= 2 for host, beats in self._beats_after.items()
        )

    async def _pump(self, follower: Follower) -> None:
        async for batch in follower.batches():
            await self._inbox.put(batch)

    async def _judge_loop(self) -> None:
        batches = QueueReader(self._inbox)
        next_tick = next_checkpoint = next_flush = 0.0
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                wait = FLUSH_EVERY_S if self.journal.unwritten else JUDGE_EVERY_S
                self._take(await batches.get(max(0.0, min(wait, next_tick - self._clock()))))
            now = self._clock()
            if now >= next_flush or self.journal.unwritten >= FLUSH_BYTES:
                # Written out and sent in bursts: a write and a wake-up of every viewer for
                # each few lines would cost more than the lines. Not held for a moment when no
                # host's lines wait: with hundreds of hosts some always do, and a trickle then
                # waited for FLUSH_BYTES (0.8 s at 1,024 thinned ranks).
                next_flush = now + FLUSH_EVERY_S
                if self.journal.flush():
                    self.audience.wake()
            if now >= next_checkpoint:
                next_checkpoint = now + CHECKPOINT_EVERY_S
                self.journal.checkpoint()
            if now >= next_tick:
                due = self._judge()
                next_tick = now + JUDGE_EVERY_S
                if due is not None and now < due < next_tick:
                    next_tick = due + PAST_DUE_S
                self.heard_since_judged.clear()
                # Step events are read when judging looks: their faults surface here.
                self._set_aside(self.model)

    def _set_aside(self, model: RunModel) -> None:
        """Keep the lines ``model`` could not take out of every later replay, and say so."""
        for fault in model.take_faults():
            if fault.line is not None:
                self.journal.set_aside(fault.line)
            self._faulted(fault.words)

    def _drain(self) -> None:
        while not self._inbox.empty():
            self._take(self._inbox.get_nowait())
        if self.journal.flush():
            self.audience.wake()

    def _take(self, batch: list[Update]) -> None:
        """Take one read of a host's channel: its lines into the journal and the model, the
        rest to the model and every viewer."""
        model = self.model
        for update in batch:
            if isinstance(update, FileLine):
                if self.journal.append(update):
                    self.heard_since_judged.add(update.host)
                    model.apply(update)
            else:
                self._take_news(update)
        self._set_aside(model)
        if self._beats_after and self._all_sent():
            self._settled.set()

    def _take_news(self, update: Heartbeat | HostSilent | HostBack) -> None:
        model = self.model
        model.apply(update)
        if isinstance(update, HostSilent):
            log.warning("%s does not answer: %s", update.host, update.reason)
        elif not isinstance(update, Heartbeat):
            log.info("%s answers again", update.host)
        if update.host in self._beats_after:
            self._beats_after[update.host] += 2 if isinstance(update, HostSilent) else 1
        self.audience.update(update)
