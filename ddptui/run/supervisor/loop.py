"""The supervisor's loop: the one owner of a run while it lives, doing one job at a time (a
viewer's request, the backend's event, what judging asks), and judging the run as its lines
come; what it does to the record and tells viewers is :mod:`ddptui.run.supervisor.owning`'s.

Why did my run end? Each attempt's end is recorded by :meth:`RunOwner.end_attempt
<ddptui.run.supervisor.owning.RunOwner.end_attempt>`, from exactly one of four places in this
loop, each a phase move (:mod:`ddptui.run.supervisor.phase`):

- **judged** (RUNNING → CONCLUDING): the run's model says the ranks finished, failed, or a
  node went silent while the others stopped stepping (:func:`~.judging.judge`, then
  :meth:`Supervisor._conclude`); a failure also ends the other nodes and keeps the flight
  recorders;
- **the backend saw the nodes end** (RUNNING → CONCLUDING): a scheduler ended the job under
  it (:meth:`Supervisor._nodes_ended`, the words from the backend's ``ending``);
- **the start failed** (STARTING → IDLE, or RUNNING → CONCLUDING when the nodes were already
  followed, as a failed allocation check): :meth:`Supervisor._start_failed`;
- **stopped** (RUNNING or CONCLUDING → STOPPING): a stop or kill asked by a viewer
  (:meth:`Supervisor._stop`), or ``on_hang = "stop"`` (:meth:`Supervisor._stop_hung`).

:meth:`RunOwner.ended <ddptui.run.supervisor.owning.RunOwner.ended>` then tells viewers and
moves back to IDLE. The attempt's detail in
the record (``ddptui status``) is what was said there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import traceback
from collections.abc import Callable

from ddptui.aio import wait_for
from ddptui.config import Config
from ddptui.run import protocol
from ddptui.run.backends import NodesEnded, Restarted, RunBackend, StartFailed, backend_for
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Hang, Judgement, Verdict
from ddptui.run.journal import Journal
from ddptui.run.protocol import Hello, Request
from ddptui.run.record import RunRecord, RunState
from ddptui.run.store import RunStore
from ddptui.run.supervisor import evidence, judging, recovery
from ddptui.run.supervisor.faults import Faults
from ddptui.run.supervisor.following import Following
from ddptui.run.supervisor.healing import Healing
from ddptui.run.supervisor.jobs import (
    Asked,
    Conclude,
    Crashed,
    DumpHang,
    Interrupted,
    Job,
    Launch,
    Resume,
    Stop,
    StopHang,
    asked_job,
    name,
)
from ddptui.run.supervisor.phase import Phase, Phases
from ddptui.run.supervisor.stragglers import StragglerNotes
from ddptui.run.supervisor.timing import LaunchTiming
from ddptui.run.supervisor.viewers import Audience, Viewer
from ddptui.run.view import RunView

IDLE_EXIT_S = 10.0
"""An ended run's supervisor waits this long for another request (a resume) before it exits."""
STRAGGLERS_EVERY_S = 2.0
"""Stragglers are named after 20 s of being slow (judging.STRAGGLER_WINDOW_S): looked for every
2 s rather than at every judging (twice a second), which at 4,096 ranks cost the supervisor 2%
of a core for a verdict that may come 1.5 s later."""
log = logging.getLogger("ddptui.supervisor")


class Supervisor(Healing):
    """The loop: one job at a time (a viewer's request, the backend's event, what judging
    asks), each a phase move."""

    def __init__(
        self,
        store: RunStore,
        record: RunRecord,
        config: Config,
        *,
        backend: Callable[[Config, Supervisor], RunBackend] = backend_for,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        idle_exit_s: float = IDLE_EXIT_S,
    ) -> None:
        self.store = store
        self.idle_exit_s = idle_exit_s
        self._record = record
        self.config = config
        self.files = store.files(record.id)
        self._clock = clock
        self._wall = wall
        self.phases = Phases()
        self.backend = backend(config, self)
        self.journal = Journal(self.files.journal)
        self.audience = Audience(self.journal, self._hello, self._asked)
        self.faults = Faults(self.note, lambda: self.following.heard_since_judged)
        self.following = Following(
            self.journal,
            self.audience,
            self.backend.follower,
            self._judge,
            lambda error: self.enqueue(Crashed(error)),
            self.faults.set_aside,
            clock=clock,
            wall=wall,
        )
        self.timing, self.stragglers = LaunchTiming(wall), StragglerNotes()
        reached = self.following.reached
        self.dumps = evidence.AskedDumps(self.backend, self.files, self.audience, reached)
        self._stragglers_due = 0.0
        self.jobs: asyncio.Queue[Job] = asyncio.Queue()
        self.queued: list[Job] = []
        """The jobs waiting in :attr:`jobs`, in order."""
        self.current: Job | None = None
        self.judgement = Judgement.of_record(record)
        self._doing = ""
        self.hang: Hang | None = None
        self.hang_due: float | None = None
        """When the hang window ends if nothing steps (the judging's clock)."""
        self.hang_stacks = ""
        """Where the stacks of the latest hang were kept (said in the attempt's detail)."""
        self.notifying: set[asyncio.Task[None]] = set()

    # --- jobs ------------------------------------------------------------------------------

    def first_jobs(self, first: Job | None) -> None:
        """What a new supervisor does first: ``first``, or what the record says was cut short
        (a start), or follow the live run."""
        state = self.record.state
        if first is not None:
            self.enqueue(first)
        elif state in (RunState.STAGING, RunState.STARTING):
            self.phases.move(Phase.STARTING, "a start was cut short")
            self.enqueue(Interrupted())
        elif not state.final:
            self._follow("a live run, found without a supervisor")
            if state is RunState.STOPPING:
                self.phases.move(Phase.STOPPING, "its stop was under way")

    async def work(self) -> None:
        """Do the jobs as they come, until the run has ended and nothing is asked of it for
        :attr:`idle_exit_s` (and neither the backend nor a host set aside holds anything of
        it)."""
        while True:
            try:
                live = not self.record.state.final
                job = await (
                    self.jobs.get() if live else wait_for(self.jobs.get(), self.idle_exit_s)
                )
            except asyncio.TimeoutError:
                held = self.backend.holds_run or self.leftovers_pending()
                if self.jobs.empty() and not held:
                    return
                continue
            self.queued.remove(job)
            self.current = job
            self.audience.job_began(True)
            await self.backend.connect()
            try:
                await self._do(job)
            except Exception as error:  # a bug must not leave the run unsupervised silently
                if isinstance(job, Crashed):
                    raise
                log.error("%s failed: %s", name(job), traceback.format_exc())
                if isinstance(job, (Launch, Resume, Stop)):
                    self._reply(job.asked, False, f"{name(job)} failed in the supervisor: {error}")
            finally:
                self.current = None
                self.audience.job_began(False)
                await self.backend.disconnect()

    async def watch_backend(self) -> None:
        async for event in self.backend.watch():
            self.enqueue(event)

    async def _do(self, job: Job) -> None:
        match job:
            case Launch() | Resume():
                await self._start(job)
            case Stop():
                await self._stop(job)
            case Conclude(verdict=verdict):
                await self._conclude(verdict)
            case DumpHang():
                await self._dump_hang()
            case StopHang():
                await self._stop_hung()
            case Interrupted():
                await self._interrupted()
            case NodesEnded():
                await self._nodes_ended(job)
            case Restarted():
                await self._restarted(job)
            case Crashed(error=error):
                raise error

    def enqueue(self, job: Job) -> None:
        self.queued.append(job)
        self.jobs.put_nowait(job)

    def _asked(self, viewer: Viewer, request: Request) -> None:
        if request.op == "dump":
            self.dumps.ask(viewer, request.id)
            return
        if request.op == "snapshot":
            if self.following.followed is None and self.record.state.final:
                # Started for an ended run: it knows no more than the run's files on the hosts.
                self.audience.reply(viewer, request.id, False, "the run has ended: read its hosts")
            else:
                self.audience.reply(viewer, request.id, True, "", self._snapshot())
            return
        pending = (self.current, *self.queued)
        job = asked_job(Asked(viewer, request.id), request, self.record, pending)
        if isinstance(job, str):
            self.audience.reply(viewer, request.id, False, job)
            return
        self.enqueue(job)
        if self.current is not None:
            self.say(f"{name(job)}: queued behind the {name(self.current)} under way")

    def _snapshot(self) -> dict[str, object]:
        model = self.following.followed or RunModel(self.record, self._clock, self._wall)
        model.read_steps()
        return RunView.of(self.record, model, self.judgement).live_document()

    def _hello(self) -> Hello:
        hello = (self.record.id, os.getpid(), protocol.VERSION)
        return Hello(*hello, self.journal.start, self.journal.end, self.judgement, protocol.OPS)

    async def _resume(self) -> None:
        await self._start(Resume())

    # --- starting --------------------------------------------------------------------------

    async def _start(self, job: Launch | Resume) -> None:
        record, resume = self.record, isinstance(job, Resume)
        if resume and not record.state.final:
            why = (
                f"run {record.id} is {record.state.value}; stop it first (ddptui stop {record.id})"
            )
            self._reply(job.asked, False, why)
            return
        if isinstance(job, Resume) and (job.bring_back or record.set_aside):
            refused = recovery.not_set_aside(record, job.bring_back)
            if refused is not None:
                self._reply(job.asked, False, refused)
                return
            self.take_back(job.bring_back)
        number = record.attempt.number + 1 if resume and record.attempts else 1
        self.phases.move(Phase.STARTING, name(job))
        self.timing.begin(number, asked_at=job.began if isinstance(job, Resume) else None)
        if resume:
            # Where the command's start and its wait for this supervisor end on each node.
            for node in record.nodes:
                self.timing.reached(node.host, "checking")
        failed = await self.backend.start(number, resume=resume, debug=job.debug)
        if failed is not None:
            await self._start_failed(failed)
            self._reply(job.asked, False, failed.message, dict(failed.data))
            return
        said = f"resumed (attempt {number})" if resume else "is running"
        self._reply(job.asked, True, f"run {self.record.id} {said}")

    async def _start_failed(self, failed: StartFailed) -> None:
        if failed.end is None or self.record.state.final:
            self.phases.move(Phase.IDLE, "nothing was started")
            return
        if not self.following.active:
            self.phases.move(Phase.IDLE, "the start failed")
            self.end_attempt(failed.end, failed.detail or failed.message)
            self.ended()
            return
        self.phases.move(Phase.CONCLUDING, "the start failed on followed nodes")
        self.end_attempt(failed.end, failed.detail or failed.message)
        await self.backend.terminate()
        await self.following.end()
        self.ended()

    async def _restarted(self, job: Restarted) -> None:
        self.phases.move(Phase.STARTING, "the scheduler started the job again")
        failed = await self.backend.restart(job)
        if failed is not None:
            await self._start_failed(failed)

    async def _interrupted(self) -> None:
        """A launch or resume whose supervisor died before every node started."""
        was = self.record.state
        report = await self.backend.terminate()
        self.phases.move(Phase.IDLE, "the cut-short start is ended")
        self.end_attempt(RunState.FAILED, evidence.interrupted_words(was))
        self.note(*report.lines())
        self.ended()

    # --- ending ----------------------------------------------------------------------------

    async def _stop(self, job: Stop) -> None:
        was = self.record.state
        if was.final:
            self.say(f"run {self.record.id} is already {was.value}; making sure nothing is left")
            report = await self.backend.stop(kill=job.kill, graceful=False)
        else:
            self.phases.move(Phase.STOPPING, name(job))
            why = "kill requested" if job.kill else "stop requested"
            self.change(lambda record: record.transition(RunState.STOPPING, why, now=self._wall()))
            model = self.following.followed
            reads = model is not None and model.reads_stop()
            graceful = self.record.entry == "trainer" or reads
            report = await self.backend.stop(kill=job.kill, graceful=graceful)
            self.end_attempt(RunState.STOPPED, "killed" if job.kill else "stopped on request")
        words = evidence.stop_words(self.record, report, was)
        self._reply(job.asked, report.clean, words, evidence.stop_data(report, was))
        if not was.final:
            await self.following.end()
            self.ended()

    async def _conclude(self, verdict: Verdict) -> None:
        if self.record.state.final:
            return
        # Recorded first: `ddptui status` says failed at once, while the others are stopped.
        self.end_attempt(verdict.state, verdict.detail)
        recovering = verdict.state is RunState.FAILED and self.config.recovery.on
        model = self.following.model
        # Judged before the followers end: a host's last lines may yet blame another. A node
        # the scheduler lost is at fault, whichever rank said the failure first.
        found = None
        if recovering:
            found = (
                recovery.blame_lost(await self.backend.lost())
                or recovery.blame_gpu(model)
                or recovery.blame(verdict, model)
            )
        last = max(
            (rank.step for rank in model.progress.ranks if rank.step is not None), default=None
        )
        raised = recovery.code_fault(model, last) if recovering and found is None else None
        times = recovery.fault_times(model, verdict, found, last)
        number = self.open_incident(verdict.detail, found, last, times) if recovering else None
        unended: set[str] = set()
        unreachable: set[str] = set()
        if verdict.state is RunState.FAILED:
            nodes = model.nodes
            silent = {name for name, node in nodes.items() if node.silent}
            others = ", ".join(name for name in nodes if name not in silent)
            self.doing(f"ending what is left of the run on {others}")
            report = await self.backend.terminate(silent)
            self.note(*report.lines())
            unended = silent | report.may_live_on
            unreachable = silent | set(report.unreachable)
            if recovering and found is None and raised is None:
                found = recovery.blame_unreachable(report.unreachable)
            self.doing("keeping the flight recorders' dumps")
            reached = self.following.reached()
            kept = await evidence.keep_flight_recorders(self.backend, self.files, unended, reached)
            if kept is not None:
                self.note(kept)
        else:
            await self._end_outlived(model)
        self.doing("taking the nodes' last lines")
        await self.following.end(unreachable=unreachable)
        self.ended(recovering=recovering)
        if number is not None:
            await self._recover(number, verdict.detail, found, last, unended, raised)

    async def _end_outlived(self, model: RunModel) -> None:
        """End the torchruns that outlived every rank of a completed run: torch's exit barrier
        would hold them for a node that failed on its way out, for up to 300 s."""
        now = model.clock()
        outlived = {name for name, node in model.nodes.items() if node.launcher_outlived(now)}
        if outlived:
            self.doing(f"ending torchrun on {', '.join(sorted(outlived))}")
            report = await self.backend.terminate(set(model.nodes) - outlived)
            self.note(*report.lines())

    async def _nodes_ended(self, job: NodesEnded) -> None:
        verdict = await self.backend.ending(job)
        if verdict is None:
            return
        self.phases.move(Phase.CONCLUDING, "the scheduler ended the nodes")
        self.end_attempt(verdict.state, verdict.detail)
        await self.backend.ended(job, verdict.state)
        await self.following.end()
        self.ended()

    async def _dump_hang(self) -> None:
        """Keep what the hang looks like before anything can end it (``on_hang = "stop"`` is
        the next job)."""
        if self.record.state is not RunState.HUNG or self.hang is None:
            return
        self.hang_stacks = await evidence.keep_hang(
            self.backend, self.files, self.judgement, self._wall(), self.following.reached()
        )
        self.note(self.hang_stacks)

    async def _stop_hung(self) -> None:
        hang = self.hang
        if self.record.state is not RunState.HUNG or hang is None:
            return
        summary = hang.summary(self._wall())
        recovering = self.config.recovery.on
        model = self.following.model
        found = recovery.blame_gpu(model) or recovery.blame_hang(hang) if recovering else None
        times = recovery.fault_times(model, hang, found, hang.step)
        cause = f"hung: {summary}"
        number = self.open_incident(cause, found, hang.step, times) if recovering else None
        said = "recovery blames a host" if found is not None else "on_hang says"
        why = f"hung ({summary}): stopping, as {said}"
        self.change(lambda record: record.transition(RunState.STOPPING, why, now=self._wall()))
        report = await self.backend.terminate()
        self.end_attempt(RunState.FAILED, evidence.hung_words(hang, summary, self.hang_stacks))
        self.note(*report.lines())
        await self.following.end(unreachable=report.unreachable)
        self.ended(recovering=recovering)
        if number is not None:
            await self._recover(number, cause, found, hang.step, report.may_live_on)

    # --- judging ---------------------------------------------------------------------------

    def _judge(self) -> float | None:
        """Judge the run as its model stands; when (its clock) to judge again at the latest,
        the hang window ending. A fault in a part of it is set aside and said, and the run goes
        on being judged: ending the supervisor would not help, since the next one replays the
        same lines into the same state."""
        model = self.following.model
        model.read_steps()
        self.faults.guarded("timing the launch", lambda: self._time_the_launch(model))
        self.hang_due = None
        if self.phases.now is not Phase.RUNNING:
            return None
        now = self._clock()
        if now >= self._stragglers_due:
            self._stragglers_due = now + STRAGGLERS_EVERY_S
            self.faults.guarded(
                "naming stragglers",
                lambda: self.note(
                    *self.stragglers.changes(model.attempt, model.progress, model.nodes)
                ),
            )
        self.faults.guarded("judging", lambda: self._verdict(model))
        return self.hang_due

    def _time_the_launch(self, model: RunModel) -> None:
        if self.timing.observe(self.record, model):
            self.change(lambda record: None)
            summary = self.timing.summary(self.record)
            if summary is not None:
                self.say(f"launch: {summary}")
                self.recovered(model)

    def _verdict(self, model: RunModel) -> None:
        match judging.judge(model, self.record.state, self.config.job):
            case judging.Conclude(verdict=verdict):
                self.phases.move(Phase.CONCLUDING, f"judged {verdict.state.value}")
                self.enqueue(Conclude(verdict))
                return
            case judging.Hung(hang=hang, newly=newly, stop=stop):
                self.hang = hang
                if newly:
                    summary = judging.hang_words(model, hang, self._wall())
                    log.warning("hung: %s", summary)
                    self.change(
                        lambda record: record.transition(RunState.HUNG, summary, now=self._wall())
                    )
                    self.enqueue(DumpHang())
                heals = (
                    self.config.recovery.on
                    and (recovery.blame_gpu(model) or recovery.blame_hang(hang)) is not None
                )
                if stop or heals:
                    why = 'on_hang = "stop"' if stop else "recovery blames a host"
                    self.phases.move(Phase.STOPPING, f"hung, and {why}")
                    self.enqueue(StopHang())
            case judging.SteppingAgain():
                self.hang = None
                self.change(
                    lambda record: record.transition(
                        RunState.RUNNING, "stepping again", now=self._wall()
                    )
                )
            case judging.GoesOn(due=due):
                self.hang, self.hang_due = None, due
        self._publish_judgement()

    def stop_asked(self) -> bool:
        return any(isinstance(job, Stop) for job in self.queued)

    def _reply(
        self, asked: Asked | None, ok: bool, message: str, data: dict[str, object] | None = None
    ) -> None:
        if asked is not None:
            self.audience.reply(asked.viewer, asked.request, ok, message, data)
