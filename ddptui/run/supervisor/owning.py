"""The supervisor as its run's owner: the run's record, and what its viewers are told of it.

:class:`RunOwner` is what a backend may do to the run it serves (the
:class:`~ddptui.run.backends.base.Owner` protocol: say, change the record, note, begin and run
an attempt) and how an attempt's end is recorded and told (:meth:`RunOwner.end_attempt`,
:meth:`RunOwner.ended`). Every change of the record goes through :meth:`RunOwner.change`,
which keeps it at once and tells viewers the judgement that follows from it; the supervisor's
loop (:mod:`ddptui.run.supervisor.loop`) decides when.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from ddptui.config import Config
from ddptui.run import protocol
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Hang, Judgement, Verdict
from ddptui.run.notify import incident_document, notify
from ddptui.run.protocol import Ended, Judged
from ddptui.run.record import Attempt, NodeRecord, RunRecord, RunState, SchedulerJob
from ddptui.run.store import RunStore
from ddptui.run.supervisor.following import Following
from ddptui.run.supervisor.phase import Phase, Phases
from ddptui.run.supervisor.stragglers import StragglerNotes
from ddptui.run.supervisor.timing import LaunchTiming
from ddptui.run.supervisor.viewers import Audience

log = logging.getLogger("ddptui.supervisor")


class RunOwner:
    """The record and the viewers' side of a supervisor; the loop
    (:class:`~ddptui.run.supervisor.loop.Supervisor`) sets these up."""

    store: RunStore
    _record: RunRecord
    _wall: Callable[[], float]
    phases: Phases
    audience: Audience
    following: Following
    timing: LaunchTiming
    stragglers: StragglerNotes
    config: Config
    notifying: set[asyncio.Task[None]]
    """``[recovery] notify`` runs under way (kept: a task only the loop holds may go)."""
    judgement: Judgement
    _doing: str
    hang: Hang | None
    hang_stacks: str

    @property
    def record(self) -> RunRecord:
        return self._record

    def _publish_judgement(self) -> None:
        model = self.following.followed
        if model is None:
            judgement = Judgement.of_record(self.record)
        else:
            hang = self.hang if self.record.state is RunState.HUNG else None
            judgement = model.judgement(self.record, hang, self.stragglers.named(model.attempt))
        if self._doing:
            judgement = dataclasses.replace(judgement, doing=self._doing)
        if judgement != self.judgement:
            self.judgement = judgement
            self.audience.broadcast(protocol.message(Judged(judgement)))

    async def verdict_within(self, seconds: float) -> Verdict | None:
        stopping = self.phases.now is Phase.STOPPING
        return await self.following.verdict_within(seconds, stopping=stopping)

    def doing(self, what: str) -> None:
        """Tell viewers what the supervisor does for the run now ("": nothing beyond
        following it)."""
        self._doing = what
        self._publish_judgement()

    def say(self, line: str) -> None:
        log.info("%s", line)
        self.audience.say(line)

    def change(self, change: Callable[[RunRecord], None]) -> None:
        self._record = self.store.update(self.record.id, self.timing.applied(change))
        if self.following.followed is not None:
            self.following.followed.record = self._record
        self._publish_judgement()

    def note(self, *lines: str) -> None:
        """``lines`` added to the current attempt's detail (what ``status`` shows of it)."""
        if lines:
            self.change(lambda record: record.add_to_detail(lines))

    def reached(self, host: str, stage: str) -> None:
        self.timing.reached(host, stage)

    def starting(self) -> bool:
        return self.phases.now is Phase.STARTING

    def attempt_starting(
        self, number: int, master_port: int, detail: str, scheduler: SchedulerJob | None = None
    ) -> None:
        attempt = Attempt(number, self._wall(), master_port, scheduler=scheduler)
        self.timing.begin(number)
        self.change(lambda record: record.begin_attempt(attempt, detail))

    def attempt_running(
        self, detail: str, placed: list[NodeRecord] | None = None, allocation: str = ""
    ) -> None:
        if placed is not None:
            self.following.place(self.record, placed)
        self.timing.started(placed or self.record.nodes)
        self.change(lambda record: record.runs(detail, self._wall(), placed, allocation))
        self._follow(detail)

    def _follow(self, why: str) -> None:
        self.phases.move(Phase.RUNNING, why)
        self.hang, self.hang_stacks = None, ""
        self.following.begin(self.record)
        self._publish_judgement()

    def end_attempt(self, state: RunState, detail: str) -> None:
        self.change(lambda record: record.end_attempt(state, detail, self._wall()))
        log.info("attempt %d %s: %s", self.judgement.attempt, state.value, detail)

    def ended(self, *, recovering: bool = False) -> None:
        """Tell viewers the attempt's end is recorded and dealt with (the others stopped after
        a failure): following it is over, unless ``recovering`` (recovery decides next)."""
        self.doing("")
        self.phases.move(Phase.IDLE, f"attempt {self.judgement.attempt} {self.record.state.value}")
        if self.following.followed is not None:
            self.following.followed.conclude(self.record.state)
        self.tell_ended(recovering=recovering)

    def tell_ended(self, *, recovering: bool = False) -> None:
        """Tell viewers how the latest attempt ended, as recorded."""
        record = self.record
        ended = Ended(record.state, record.detail, self.judgement.attempt, recovering)
        self.audience.broadcast(protocol.message(ended))

    def notify_incident(self, number: int) -> None:
        """Tell ``[recovery] notify`` of incident ``number`` in the background: recovery never
        waits for it, and what it says is kept in the incident."""
        argv = self.config.recovery.notify
        if not argv:
            return
        document = incident_document(self.record, self.record.incident(number))

        async def told() -> None:
            said = await notify(argv, document)

            def keep(record: RunRecord) -> None:
                record.incident(number).notified = said

            self.change(keep)

        task = asyncio.get_running_loop().create_task(told())
        self.notifying.add(task)
        task.add_done_callback(self.notifying.discard)

    def recovered(self, model: RunModel) -> None:
        """Every node made its first step of the attempt: if a recovery started it, when, and
        from which checkpoint's step (what the incident's steps redone count from)."""
        record = self.record
        last = record.incidents[-1] if record.incidents else None
        if last is None or last.resumed_attempt != record.attempt.number or last.first_step_at:
            return
        starts = [
            rank.start.start_step
            for rank in model.progress.ranks
            if rank.start is not None and rank.start.start_step is not None
        ]
        at = self._wall()

        def first_step(record: RunRecord) -> None:
            record.incidents[-1].first_step_at = at
            record.incidents[-1].checkpoint_step = min(starts, default=None)

        self.change(first_step)

    def take_back(self, hosts: tuple[str, ...]) -> None:
        """Hosts recovery set aside that the user takes back (``resume --with``): spares again;
        the others still set aside are said."""
        if hosts:

            def taken_back(record: RunRecord) -> None:
                record.set_aside = [aside for aside in record.set_aside if aside.host not in hosts]

            self.change(taken_back)
            self.say(f"taken back as spares: {', '.join(hosts)}")
        if self.record.set_aside:
            named = ", ".join(aside.host for aside in self.record.set_aside)
            self.say(f"set aside by recovery: {named} (`ddptui resume --with HOST` takes one back)")
