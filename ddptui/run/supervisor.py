"""The run's supervisor: one process per run on the head node, the only writer of its record.

:class:`~ddptui.run.control.RunControl` starts it (a launch, a resume, or any command that
finds a live run without one) as ``python -m ddptui.run.supervisor ROOT RUN_ID [--launch |
--resume [--debug]]``. It leaves the terminal's session, so it outlives the console, the shell
and an SSH logout of the head node, and holds the run's supervisor lock for its whole life:
a second one finds the lock taken and leaves (exit 75) for its starter to attach to the first.

While the run lives it follows every host through one channel each (:mod:`ddptui.run.follow`),
keeps what it takes in the run's journal (:mod:`ddptui.run.journal`), judges the run
(:class:`~ddptui.run.state.RunWatch`) and acts: a node that fails or is lost fails the run and
the other nodes are stopped; a hang is recorded (and, with ``[job] on_hang = "stop"``, ended).
Viewers attach over its Unix socket (:mod:`ddptui.run.protocol`) and ask for things (stop,
kill, resume, a snapshot); what changes the run is done one request at a time. Once the run has
ended and nothing more is asked of it for a few seconds, it exits. Its log is the run's
``supervisor.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import logging.handlers
import os
import resource
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ddptui.aio import QueueReader, SizedQueue, wait_for
from ddptui.config import Config, load_config
from ddptui.errors import DdptuiError
from ddptui.health.slurm import allocation_errors
from ddptui.plan.launch import DEBUG_ENV
from ddptui.plan.slurm import master_port
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.transport import Transport
from ddptui.run import dump as stack_dump
from ddptui.run import launcher, protocol, slurm_run
from ddptui.run.follow import FileLine, Heartbeat, HostFollower, HostSilent, Update
from ddptui.run.journal import Journal
from ddptui.run.launcher import LaunchError
from ddptui.run.layout import RunFiles
from ddptui.run.protocol import Attach, Ended, Hello, Judged, Reply, Request, Said
from ddptui.run.slurm import SlurmError
from ddptui.run.slurm_job import SlurmJob
from ddptui.run.slurm_run import SlurmRunError
from ddptui.run.state import Hang, Judgement, RunWatch, Steps, Verdict
from ddptui.run.stopper import StopReport, stop_nodes, terminate
from ddptui.run.store import Attempt, NodeRecord, RunRecord, RunState, RunStore
from ddptui.run.transports import transport_for
from ddptui.run.view import RunView

BUSY = 75
"""Exit status of a supervisor that found the run supervised already (EX_TEMPFAIL)."""
IDLE_EXIT_S = 10.0
"""An ended run's supervisor waits this long for another request (a resume) before it exits."""
FLUSH_EVERY_S = 0.1
FLUSH_BYTES = 256 * 1024
JUDGE_EVERY_S = 0.5
"""Judging looks at every rank: twice a second, not after every burst of lines."""
CHECKPOINT_EVERY_S = 5.0
FOLLOW_STOP_S = 10.0
SETTLE_S = 6.0
"""How long following goes on after an attempt ended, for the lines its ranks wrote last."""
FAILED_GRACE_S = 5.0
"""After a failure the other nodes' ranks wait in collectives: they cannot checkpoint."""
VIEWER_BACKLOG = 1024
"""Messages (other than lines and heartbeats) a viewer may fall behind by before it is hung
up on; it can attach again from where it was, since the lines come from the journal."""
SAID_KEPT = 64
"""Lines of the job in progress replayed to a viewer that attaches during it."""
INBOX = 10000
INBOX_BYTES = 16 * 1024 * 1024
"""What the updates of every host waiting to be judged may hold: a line keeps up to 16,384
characters, 64 KiB in memory when they are not ASCII, so a count alone would allow 640 MiB."""
REQUEUED = "Slurm requeued job"
"""How an attempt's detail says its job was requeued (said once)."""
HEARTBEAT_BYTES = 4096
"""What a heartbeat is counted as: its GPU samples are capped (64 GPUs of a few fields)."""

log = logging.getLogger("ddptui.supervisor")


@dataclass(eq=False)
class Job:
    """Something that changes the run, done one at a time in arrival order."""

    op: str
    """launch, resume, stop, kill, conclude, hang-dump, hang-stop; a Slurm run's job-ended,
    requeued"""
    request: str | None = None
    viewer: Viewer | None = None
    debug: bool = False
    verdict: Verdict | None = None
    slurm_job: SlurmJob | None = None


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


class Supervisor:
    def __init__(
        self,
        store: RunStore,
        record: RunRecord,
        config: Config,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.record = record
        self.config = config
        self.files = store.files(record.id)
        self._clock = clock
        self._wall = wall
        self.journal = Journal(self.files.journal)
        self.remote: Transport
        """The current job's connections (see :meth:`_work`)."""
        self.slurm = config.slurm is not None
        """A Slurm run: its attempts are jobs, its nodes reached through ``srun``."""
        self._job_alive = False
        """A Slurm run's job is queued or runs although the run's record has ended (Slurm
        requeued it: it comes back as the next attempt)."""
        self._job_ending = False
        """The end of the job is being dealt with (a ``job-ended`` is queued)."""
        self.jobs: asyncio.Queue[Job] = asyncio.Queue()
        self.queued: list[Job] = []
        """The jobs waiting in :attr:`jobs`, in order."""
        self.current: Job | None = None
        self.said_in_job: deque[bytes] = deque(maxlen=SAID_KEPT)
        """What the job in progress has said, for viewers that attach while it goes on."""
        self.viewers: set[Viewer] = set()
        self.watch: RunWatch | None = None
        self.judgement = Judgement.of_record(record)
        self.stopping = False
        self.hang: Hang | None = None
        self.hang_stop_asked = False
        self.hang_stacks = ""
        """Where the stacks of the latest hang were kept (said in the attempt's detail)."""
        self.concluded = False
        self.latest: dict[str, bytes] = {}
        """Host → its latest heartbeat, silence or return, for viewers that attach later."""
        self._inbox = updates_inbox()
        self._followers: list[HostFollower] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._beats_after: dict[str, int] = {}
        self._crashed: BaseException | None = None
        self._settled = asyncio.Event()
        self._handlers: set[asyncio.Task[None]] = set()

    # --- life ------------------------------------------------------------------------------

    async def serve(self, first: Job | None) -> None:
        """Serve until the run has ended and nothing is asked of it for ``IDLE_EXIT_S``."""
        with protocol.socket_address(self.files.socket) as address:
            server = await asyncio.start_unix_server(
                self._connected, path=address, limit=protocol.MAX_MESSAGE_BYTES
            )
        self.files.socket.chmod(0o600)
        log.info(
            "supervising run %s (%s), pid %d", self.record.id, self.record.state.value, os.getpid()
        )
        terminated = False
        watching: asyncio.Task[None] | None = None
        try:
            if first is not None:
                self._enqueue(first)
            elif self.record.state in (RunState.STAGING, RunState.STARTING):
                self._enqueue(Job("interrupted"))
            elif not self.record.state.final:
                self._begin_following()
            work = asyncio.create_task(self._work())
            watching = asyncio.create_task(self._watch_job()) if self.slurm else None
            # SIGTERM (a shutdown, `ddptui demo` ending) stops supervising cleanly; the run goes
            # on, and the next command that finds it live starts another supervisor.
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, work.cancel)
            try:
                await work
            except asyncio.CancelledError:
                log.info("SIGTERM: no longer supervising run %s", self.record.id)
                terminated = True
        finally:
            if watching is not None:
                watching.cancel()
            server.close()
            await self._end_following(settle=not terminated)
            for viewer in list(self.viewers):
                viewer.close()
            # Each connection's handler sees its end and returns: none is left to be cancelled.
            if self._handlers:
                await asyncio.wait(self._handlers, timeout=FOLLOW_STOP_S)
            self.journal.close()
            with contextlib.suppress(OSError):
                self.files.socket.unlink()
            log.info(
                "run %s %s; supervisor exits (peak RSS %d MiB)",
                self.record.id,
                self.record.state.value,
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            )

    async def _work(self) -> None:
        while True:
            live = not self.record.state.final
            try:
                job = await (self.jobs.get() if live else wait_for(self.jobs.get(), IDLE_EXIT_S))
            except asyncio.TimeoutError:
                if self.jobs.empty() and not self._job_alive:
                    return
                continue
            self.queued.remove(job)
            self.current = job
            self.said_in_job.clear()
            # Connections of their own for each job: one left from before a host's link was
            # cut would be tried (and time out) before a new one is opened.
            self.remote = await transport_for(self.config, self.record)
            try:
                await self._do(job)
            except Exception as error:  # a bug must not leave the run unsupervised silently
                if job.op == "crashed":
                    raise
                log.error("%s failed: %s", job.op, traceback.format_exc())
                self._reply(job, False, f"{job.op} failed in the supervisor: {error}")
            finally:
                self.current = None
                self.said_in_job.clear()
                await self.remote.close()

    async def _do(self, job: Job) -> None:
        if job.op == "launch":
            await self._launch(job)
        elif job.op == "resume":
            await self._resume(job)
        elif job.op in ("stop", "kill"):
            await self._stop(job)
        elif job.op == "conclude":
            assert job.verdict is not None
            await self._conclude(job.verdict)
        elif job.op == "hang-dump":
            await self._dump_hung()
        elif job.op == "hang-stop":
            await self._stop_hung()
        elif job.op == "interrupted":
            await self._interrupted()
        elif job.op == "job-ended":
            await self._job_ended(job.slurm_job)
        elif job.op == "requeued":
            assert job.slurm_job is not None
            await self._requeued(job.slurm_job)
        elif job.op == "crashed":
            assert self._crashed is not None
            raise self._crashed

    def _enqueue(self, job: Job) -> None:
        self.queued.append(job)
        self.jobs.put_nowait(job)

    # --- requests --------------------------------------------------------------------------

    def _request(self, viewer: Viewer, request: Request) -> None:
        if request.op == "snapshot":
            self._reply_to(viewer, request.id, True, "", self._snapshot())
            return
        busy = self._starting()
        if request.op == "resume" and busy is not None:
            self._reply_to(viewer, request.id, False, busy)
            return
        self._enqueue(Job(request.op, request.id, viewer, debug=request.debug))
        if self.current is not None:
            self._say(f"{request.op}: queued behind the {self.current.op} under way")

    def _starting(self) -> str | None:
        """Why a resume asked now would be one too many, or None."""
        pending = [job for job in (self.current, *self.queued) if job is not None]
        if any(job.op in ("launch", "resume") for job in pending):
            attempt = len(self.record.attempts) + (
                0 if self.record.state is RunState.STARTING else 1
            )
            return f"run {self.record.id}: attempt {attempt} is starting already (asked before you)"
        return None

    def _snapshot(self) -> dict[str, object]:
        watch = self.watch or RunWatch(self.record, self._clock, self._wall)
        watch.read_steps()
        return RunView.of(self.record, watch, self.judgement).live_document()

    # --- jobs ------------------------------------------------------------------------------

    async def _launch(self, job: Job) -> None:
        if self.slurm:
            if await self._submit(job, 1, debug=job.debug):
                self._reply(job, True, f"run {self.record.id} is running")
            return
        try:
            # The port first: a fixed one that is taken stops the launch before anything
            # reaches the hosts.
            port = await launcher.master_port(self.remote, self.config, self.record)
            await launcher.stage(self.remote, self.config, self.record, say=self._say)
        except LaunchError as error:
            self._end_attempt(RunState.FAILED, str(error))
            self._ended()
            self._reply(job, False, str(error))
            return
        if await self._start(job, 1, port, extra_args=(), extra_env=None):
            self._reply(job, True, f"run {self.record.id} is running")

    async def _resume(self, job: Job) -> None:
        record = self.record
        if not record.state.final:
            self._reply(
                job,
                False,
                f"run {record.id} is {record.state.value}; stop it first (ddptui stop {record.id})",
            )
            return
        number = record.attempt.number + 1 if record.attempts else 1
        if self.slurm:
            if await self._submit(job, number, debug=job.debug):
                self._reply(job, True, f"run {record.id} resumed (attempt {number})")
            return
        try:
            await launcher.end_leftovers(self.remote, self.config, record, say=self._say)
            # Copies between hosts go through this machine's SSH connections.
            assert isinstance(self.remote, RemoteCluster)
            await launcher.carry_checkpoints(self.remote, self.config, record, say=self._say)
            port = await launcher.master_port(self.remote, self.config, record)
        except LaunchError as error:
            self._reply(job, False, f"cannot resume: {error}", {"exit_code": error.exit_code})
            return
        started = await self._start(
            job,
            number,
            port,
            extra_args=self.config.job.resume_args,
            extra_env=DEBUG_ENV if job.debug else None,
        )
        if started:
            self._reply(job, True, f"run {record.id} resumed (attempt {number})")

    async def _start(
        self,
        job: Job,
        number: int,
        port: int,
        *,
        extra_args: tuple[str, ...],
        extra_env: Mapping[str, str] | None,
    ) -> bool:
        def starting(record: RunRecord) -> None:
            record.attempts.append(Attempt(number=number, started=self._wall(), master_port=port))
            record.transition(
                RunState.STARTING,
                f"starting attempt {number} on {len(record.nodes)} host(s)",
                now=self._wall(),
            )

        self._change(starting)
        try:
            await launcher.start_attempt(
                self.remote,
                self.config,
                self.record,
                number,
                port,
                say=self._say,
                extra_args=extra_args,
                extra_env=extra_env,
            )
        except LaunchError as error:
            self._end_attempt(RunState.FAILED, str(error))
            self._ended()
            self._reply(job, False, str(error))
            return False
        self._change(
            lambda record: record.transition(
                RunState.RUNNING, "every node started", now=self._wall()
            )
        )
        self._begin_following()
        return True

    async def _submit(self, job: Job, number: int, *, debug: bool) -> bool:
        """A Slurm run's attempt ``number``: its job submitted, waited for (its queue state
        said) and followed once it runs. A stop asked meanwhile cancels the job."""
        try:
            job_id, script = await slurm_run.submit(self.config, self.record, number, debug=debug)
        except SlurmRunError as error:
            if number == 1:
                self._end_attempt(RunState.FAILED, str(error))
                self._ended()
            self._reply(job, False, str(error))
            return False

        def queued(record: RunRecord) -> None:
            record.attempts.append(
                Attempt(
                    number=number,
                    started=self._wall(),
                    master_port=master_port(job_id),
                    job_id=job_id,
                )
            )
            record.transition(
                RunState.STARTING, f"attempt {number}: Slurm job {job_id}", now=self._wall()
            )

        root = slurm_run.run_root(self.config, self.record)
        self._say(f"attempt {number}: Slurm job {job_id} ({script}); its files are in {root}")
        self._change(queued)
        try:
            running = await slurm_run.until_running(job_id, self._say, self._stop_asked)
            placed = await slurm_run.allocation(self.config, self.record, running)
        except (SlurmRunError, SlurmError) as error:
            await slurm_run.cancel(job_id)
            stopped = self._stop_asked()
            self._end_attempt(
                RunState.STOPPED if stopped else RunState.FAILED,
                f"job {job_id} cancelled while it waited to run" if stopped else str(error),
            )
            self._ended()
            self._reply(job, False, str(error))
            return False
        self._place(running, placed)
        failed = await self._check_allocation()
        if failed:
            self._reply(job, False, failed)
            return False
        return True

    async def _check_allocation(self) -> str | None:
        """The check inside the allocation, as its job starts: each node's stack in the record,
        warnings said; an error fails the run (and cancels its job), naming the nodes with the
        ``exclude`` line that avoids them. What failed, or None."""
        assert self.config.slurm is not None
        count = len(self.record.nodes)
        self._say(f"checking the allocation's {count} node(s) (the probe on each, through srun)")
        checks, findings = await slurm_run.check_allocation(self.config, self.record)
        stacks = {check.host.name: launcher.versions(check.facts) for check in checks}

        def versions(record: RunRecord) -> None:
            for node in record.nodes:
                node.versions = stacks.get(node.host, {})

        self._change(versions)
        for finding in findings:
            where = f"{finding.host}: " if finding.host else ""
            self._say(f"{finding.severity.value}: {where}{finding.message}")
        failed = allocation_errors(self.config.slurm, findings)
        if failed is None:
            self._say(
                f"the allocation's nodes can run it ({len(findings)} finding(s) above)"
                if findings
                else "the allocation's nodes: nothing to report"
            )
            return None
        job_id = self.record.job_id
        assert job_id is not None
        with contextlib.suppress(SlurmError):
            found = await slurm_run.job(job_id)
            if found is None or found.state != "RUNNING":
                # What the check could not ask of a job that ended meanwhile is no finding:
                # the run's own end (the ranks' words) says how it went.
                self._say(f"job {job_id} ended before every node could be checked")
                return None
        if not self.record.state.final:
            self.concluded = True
            self._end_attempt(RunState.FAILED, failed)
            await self._terminate()
            await self._end_following()
            self._ended()
        return failed

    def _place(self, running: SlurmJob, placed: list[NodeRecord]) -> None:
        """The running job's nodes in the record, the run running, and followed."""
        # The journal resumes each node's files where it left them: by node rank, since a new
        # allocation may give a node rank another machine.
        previous = {node.node_rank: node.host for node in self.record.nodes}
        offsets = self.journal.offsets
        self.journal.offsets = {
            node.host: offsets.get(previous.get(node.node_rank, node.host), {}) for node in placed
        }

        def runs(record: RunRecord) -> None:
            record.nodes = placed
            record.master_addr = placed[0].address
            record.attempt.allocation = running.nodes or ""
            record.transition(
                RunState.RUNNING,
                f"Slurm job {running.id} runs on {running.nodes}",
                now=self._wall(),
            )

        self._change(runs)
        self._begin_following()

    def _stop_asked(self) -> bool:
        return any(job.op in ("stop", "kill") for job in self.queued)

    def _restarts(self) -> int:
        """How often the latest attempt's job was requeued, as the record knows it."""
        job_id = self.record.job_id
        return sum(attempt.job_id == job_id for attempt in self.record.attempts) - 1

    async def _watch_job(self) -> None:
        """A Slurm run's job, asked after while the supervisor lives: its end while the run
        goes on, and its requeued start as the next attempt."""
        while True:
            await asyncio.sleep(slurm_run.POLL_S)
            job_id = self.record.job_id
            busy = self.current is not None and self.current.op in ("launch", "resume")
            if job_id is None or busy or self._job_ending:
                continue
            try:
                found = await slurm_run.job(job_id)
            except SlurmError:
                continue
            state = self.record.state
            requeued = found is not None and found.restarts > self._restarts()
            if state in (RunState.RUNNING, RunState.HUNG):
                if found is None or found.state != "RUNNING" or requeued:
                    self._job_ending = True
                    self._enqueue(Job("job-ended", slurm_job=found))
            elif state.final:
                self._job_alive = found is not None and not found.ended
                if found is not None and found.ended and not self.record.attempt.slurm_state:
                    self._record_slurm_state(found)
                if requeued and REQUEUED not in self.record.attempt.detail:
                    self._note(f"{REQUEUED} {job_id}: it resumes as the next attempt")
                if found is not None and found.state == "RUNNING" and requeued:
                    self._job_ending = True
                    self._enqueue(Job("requeued", slurm_job=found))

    def _record_slurm_state(self, found: SlurmJob | None) -> None:
        if found is None or not found.ended:
            return

        def record_state(record: RunRecord) -> None:
            record.attempt.slurm_state = found.state

        self._change(record_state)

    async def _job_ended(self, found: SlurmJob | None) -> None:
        """The job stopped running while the run went on: why, in the ranks' words if they
        said, else in Slurm's (the nodes it lost, by name)."""
        self._job_ending = False
        record = self.record
        job_id = record.job_id
        assert job_id is not None
        if record.state.final:
            self._record_slurm_state(found)
            return
        lost = await slurm_run.lost_nodes([node.host for node in record.nodes])
        verdict = None
        if not lost:
            # What the ranks said last (a stop on Slurm's warning, a rank's error) comes with the
            # followers' next round; Slurm's state says less.
            deadline = self._clock() + SETTLE_S
            while (verdict := self._watch().verdict(stopping=self.stopping)) is None:
                if self._clock() >= deadline:
                    break
                await asyncio.sleep(JUDGE_EVERY_S)
        if lost or verdict is None:
            state, detail = RunState.FAILED, slurm_run.ended_words(job_id, found, lost)
        else:
            state, detail = verdict.state, verdict.detail
        requeued = found is not None and found.pending and found.restarts > self._restarts()
        if state is RunState.STOPPED and requeued:
            detail += f"; {REQUEUED} {job_id}: it resumes as the next attempt"
        self.concluded = True
        self._end_attempt(state, detail)
        self._record_slurm_state(found)
        if state is RunState.FAILED and (found is None or not found.ended):
            # A failed run's job must not start again behind its back (Slurm requeues a job
            # whose node failed).
            await slurm_run.cancel(job_id)
        self._job_alive = state is RunState.STOPPED and requeued
        await self._end_following()
        self._ended()

    async def _requeued(self, running: SlurmJob) -> None:
        """Slurm started the run's requeued job again: the run's next attempt, from its newest
        checkpoint (the batch script resumes a requeued start)."""
        self._job_ending = False
        number = self.record.attempt.number + 1

        def starting(record: RunRecord) -> None:
            record.attempts.append(
                Attempt(
                    number=number,
                    started=self._wall(),
                    master_port=master_port(running.id),
                    job_id=running.id,
                )
            )
            record.transition(
                RunState.STARTING,
                f"attempt {number}: Slurm requeued job {running.id}",
                now=self._wall(),
            )

        self._change(starting)
        self._place(running, await slurm_run.allocation(self.config, self.record, running))
        await self._check_allocation()

    async def _stop(self, job: Job) -> None:
        kill = job.op == "kill"
        was = self.record.state
        if was.final:
            self._say(f"run {self.record.id} is already {was.value}; making sure nothing is left")
            report = await self._stop_nodes(kill=kill, graceful=False)
            self._job_alive = False
        else:
            self._change(
                lambda record: record.transition(
                    RunState.STOPPING,
                    "kill requested" if kill else "stop requested",
                    now=self._wall(),
                )
            )
            self.stopping = True
            report = await self._stop_nodes(kill=kill, graceful=self.record.entry == "trainer")
            self._end_attempt(RunState.STOPPED, "killed" if kill else "stopped on request")
        self._reply(
            job, report.clean, _stop_words(self.record, report, was), _stop_data(report, was)
        )
        if not was.final:
            await self._end_following()
            self._ended()

    async def _stop_nodes(self, *, kill: bool, graceful: bool) -> StopReport:
        if not self.slurm:
            return await stop_nodes(
                self.remote, self.config, self.record, kill=kill, graceful=graceful, say=self._say
            )
        if self.record.job_id is None:
            return StopReport()
        return await slurm_run.stop(
            self.remote, self.config, self.record, kill=kill, graceful=graceful, say=self._say
        )

    async def _terminate(self, skip: set[str] | None = None) -> StopReport:
        """End every process of the run now (after a failure or a hang): SIGTERM, then SIGKILL
        after a grace; a Slurm run's job is cancelled."""
        if not self.slurm:
            return await terminate(
                self.remote, self.config, self.record, grace=FAILED_GRACE_S, skip=skip or set()
            )
        job_id = self.record.job_id
        report = StopReport()
        if job_id is not None:
            failed = await slurm_run.cancel(job_id)
            if failed is None and not await slurm_run.wait_ended(job_id, slurm_run.END_WAIT_S):
                failed = f"job {job_id} still runs after scancel"
            if failed is not None:
                report.left[f"Slurm job {job_id}"] = [failed]
        return report

    async def _conclude(self, verdict: Verdict) -> None:
        if self.record.state.final:
            return
        # Recorded first: `ddptui status` says failed at once, while the others are stopped.
        self._end_attempt(verdict.state, verdict.detail)
        if verdict.state is RunState.FAILED:
            silent = {name for name, node in self._watch().nodes.items() if node.silent}
            report = await self._terminate(silent)
            self._note(*report.lines())
            await self._keep_flight_recorders()
        await self._end_following()
        self._ended()

    async def _stop_hung(self) -> None:
        hang = self.hang
        if self.record.state is not RunState.HUNG or hang is None:
            return
        summary = hang.summary(self._wall())
        self._change(
            lambda record: record.transition(
                RunState.STOPPING, f"hung ({summary}): stopping, as on_hang says", now=self._wall()
            )
        )
        self.stopping = True
        report = await self._terminate()
        where = f"at step {hang.step}" if hang.step is not None else "before the first step"
        stacks = f"; {self.hang_stacks}" if self.hang_stacks else ""
        self._end_attempt(RunState.FAILED, f"hung {where}: {summary}{stacks}")
        self._note(*report.lines())
        await self._end_following()
        self._ended()

    async def _interrupted(self) -> None:
        """A launch or resume whose supervisor died before every node started."""
        was = self.record.state
        report = await self._terminate()
        self._end_attempt(
            RunState.FAILED,
            f"the {'staging' if was is RunState.STAGING else 'start'} was interrupted: its "
            "supervisor ended before every node had started; resume to start it again",
        )
        self._note(*report.lines())
        self._ended()

    # --- the record ------------------------------------------------------------------------

    def _change(self, change: Callable[[RunRecord], None]) -> None:
        self.record = self.store.update(self.record.id, change)
        if self.watch is not None:
            self.watch.record = self.record
        self._publish_judgement()

    def _end_attempt(self, state: RunState, detail: str) -> None:
        def end(record: RunRecord) -> None:
            if record.attempts and record.attempt.ended is None:
                record.attempt.ended = self._wall()
                record.attempt.outcome = state.value
                record.attempt.detail = detail
            record.transition(state, detail, now=self._wall())

        self._change(end)
        log.info("attempt %d %s: %s", self.judgement.attempt, state.value, detail)

    def _ended(self) -> None:
        """Tell viewers the attempt's end is recorded and dealt with (the others stopped after
        a failure): following it is over."""
        if self.watch is not None:
            self.watch.conclude(self.record.state)
        self._broadcast(
            protocol.message(Ended(self.record.state, self.record.detail, self.judgement.attempt))
        )

    def _note(self, *lines: str) -> None:
        """``lines`` added to the current attempt's detail (what ``status`` shows of it)."""
        if not lines:
            return

        def note(record: RunRecord) -> None:
            record.attempt.detail = "; ".join([record.attempt.detail, *lines]).strip("; ")

        self._change(note)

    async def _keep_flight_recorders(self) -> None:
        """After a failure, the ranks' flight-recorder dumps (written by NCCL's watchdog on a
        timeout, or by the trainer on a failed collective) to the head, read. Evidence lost
        is said; it never keeps the run from being concluded."""
        try:
            taken = await stack_dump.take(self.config, self.record, self.remote)
            saved = stack_dump.save(taken, self.files.dumps) if taken.flight_dumps else None
        except Exception as error:
            log.exception("the flight recorders could not be kept")
            self._note(f"the flight recorders could not be kept: {type(error).__name__}")
            return
        if saved is None:
            return
        said = "; ".join(finding.text for finding in saved.flight) or "nothing odd in them"
        kept = f"flight recorders kept in {saved.saved_in}: {said}"
        log.warning("%s", kept)
        self._note(kept)

    async def _dump_hung(self) -> None:
        """Keep what the hang looks like before anything can end it (``on_hang = "stop"`` is
        the next job): the verdict, and every rank's stacks."""
        if self.record.state is not RunState.HUNG or self.hang is None:
            return
        taken = stack_dump.take(self.config, self.record, self.remote)
        saved = stack_dump.save(await taken, self.files.dumps)
        self.files.evidence.mkdir(mode=0o700, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self._wall()))
        evidence = {**protocol.judgement_document(self.judgement), "stacks": saved.document()}
        path = self.files.evidence / f"hang-{stamp}.json"
        path.write_text(json.dumps(evidence, indent=2), encoding="utf-8")
        log.warning("hung: every rank's stacks kept in %s", saved.saved_in)
        self.hang_stacks = f"every rank's stacks at the hang: {saved.saved_in}"
        self._note(self.hang_stacks)

    # --- following -------------------------------------------------------------------------

    def _watch(self) -> RunWatch:
        assert self.watch is not None
        return self.watch

    def _begin_following(self) -> None:
        if self.watch is None:
            watch = RunWatch(self.record, self._clock, self._wall, steps=Steps.LATEST)
            # What an earlier supervisor took (earlier attempts' too) shapes the state.
            for raw in self.journal.lines():
                line = protocol.decode(raw)
                if isinstance(line, FileLine):
                    watch.apply(line)
            self.watch = watch
        elif self.watch.attempt != self.record.attempt.number:
            self.watch.next_attempt(self.record)
        self.stopping = self.hang_stop_asked = self.concluded = False
        self.hang_stacks = ""
        self._followers = [
            HostFollower.of_node(
                self.config, self.record, node, offsets=self.journal.offsets.get(node.host)
            )
            for node in self.record.nodes
        ]
        self._tasks = [self._task(self._pump(f)) for f in self._followers]
        self._tasks.append(self._task(self._judge_loop()))
        self._publish_judgement()

    async def _end_following(self, *, settle: bool = True) -> None:
        """Stop following; with ``settle``, once every host that answers has sent what its run's
        files hold now (the last lines of ranks that just ended), or after ``SETTLE_S``."""
        followers, tasks = self._followers, self._tasks
        if not tasks:
            return
        self._beats_after = dict.fromkeys(
            (node.host for node in self._watch().nodes.values() if node.silent is None), 0
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
        log.critical(
            "following run %s failed; ending this supervisor (the next ddptui command starts "
            "another):\n%s",
            self.record.id,
            "".join(traceback.format_exception(error)),
        )
        self._crashed = error
        self._enqueue(Job("crashed"))

    def _all_sent(self) -> bool:
        """Whether every host that answered when following was to end has sent all its run's
        files held then. The agent reads every file in each round, the run's events and logs
        before torchrun's exit status: once a node's status has come, so has what its ranks
        wrote before they ended; else two heartbeats from then on (each follows a round)."""
        nodes = self._watch().nodes
        return all(
            nodes[host].exit is not None or beats >= 2 for host, beats in self._beats_after.items()
        )

    async def _pump(self, follower: HostFollower) -> None:
        async for update in follower.updates():
            await self._inbox.put(update)

    async def _judge_loop(self) -> None:
        updates = QueueReader(self._inbox)
        next_tick = next_checkpoint = next_flush = 0.0
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                wait = FLUSH_EVERY_S if self.journal.unwritten else JUDGE_EVERY_S
                self._take(await updates.get(wait))
            now = self._clock()
            if (now >= next_flush and self._inbox.empty()) or (
                self.journal.unwritten >= FLUSH_BYTES
            ):
                # Written out and sent in bursts: a write and a wake-up of every viewer for
                # each few lines would cost more than the lines.
                next_flush = now + FLUSH_EVERY_S
                if self.journal.flush():
                    self._wake()
            if now >= next_checkpoint:
                next_checkpoint = now + CHECKPOINT_EVERY_S
                self.journal.checkpoint()
            if now >= next_tick:
                next_tick = now + JUDGE_EVERY_S
                self._judge()

    def _drain(self) -> None:
        while not self._inbox.empty():
            self._take(self._inbox.get_nowait())
        if self.journal.flush():
            self._wake()

    def _take(self, update: Update) -> None:
        watch = self._watch()
        if isinstance(update, FileLine):
            if self.journal.append(update):
                watch.apply(update)
                if self._beats_after and self._all_sent():
                    self._settled.set()
            return
        watch.apply(update)
        if isinstance(update, HostSilent):
            log.warning("%s does not answer: %s", update.host, update.reason)
        elif not isinstance(update, Heartbeat):
            log.info("%s answers again", update.host)
        if update.host in self._beats_after:
            self._beats_after[update.host] += 2 if isinstance(update, HostSilent) else 1
            if self._all_sent():
                self._settled.set()
        data = protocol.message(update)
        self.latest[update.host] = data
        for viewer in self.viewers:
            if viewer.attached:
                if isinstance(update, Heartbeat):
                    viewer.beat(update.host, data)
                else:
                    viewer.push(self.journal.end, data)

    def _judge(self) -> None:
        watch = self._watch()
        watch.tick()
        state = self.record.state
        if state.final or state is RunState.STOPPING or self.stopping:
            return
        if not self.concluded:
            verdict = watch.verdict(stopping=self.stopping)
            if verdict is not None:
                self.concluded = True
                self._enqueue(Job("conclude", verdict=verdict))
                return
        hang = self.hang = watch.hang(self.config.job.hang_timeout_s)
        if hang is not None and state is RunState.RUNNING:
            summary = hang.summary(self._wall())
            log.warning("hung: %s", summary)
            self._change(lambda record: record.transition(RunState.HUNG, summary, now=self._wall()))
            self._enqueue(Job("hang-dump"))
        elif hang is None and state is RunState.HUNG:
            self._change(
                lambda record: record.transition(
                    RunState.RUNNING, "stepping again", now=self._wall()
                )
            )
        self._publish_judgement()
        if hang is not None and self.config.job.on_hang == "stop" and not self.hang_stop_asked:
            self.hang_stop_asked = True
            self._enqueue(Job("hang-stop"))

    def _publish_judgement(self) -> None:
        if self.watch is None:
            judgement = Judgement.of_record(self.record)
        else:
            hang = self.hang if self.record.state is RunState.HUNG else None
            judgement = self.watch.judgement(self.record, hang)
        if judgement != self.judgement:
            self.judgement = judgement
            self._broadcast(protocol.message(Judged(judgement)))

    # --- viewers ---------------------------------------------------------------------------

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
                    # What the job in progress said before this viewer came (a launch's
                    # staging, said while its command was still connecting).
                    for said in self.said_in_job:
                        viewer.push(self.journal.end, said)
                    sender = asyncio.create_task(self._send(viewer))
                elif isinstance(item, Request) and viewer.attached:
                    self._request(viewer, item)
        finally:
            self.viewers.discard(viewer)
            viewer.close()
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
                    await sender

    async def _send(self, viewer: Viewer) -> None:
        writer = viewer.writer
        try:
            hello = Hello(
                self.record.id,
                os.getpid(),
                protocol.VERSION,
                self.journal.start,
                self.journal.end,
                self.judgement,
            )
            writer.write(protocol.message(hello))
            for data in self.latest.values():
                writer.write(data)
            while not viewer.closed:
                # Lines up to where the next message was said, then the message: the viewer
                # learns of a new attempt before any of its lines, as the supervisor did.
                upto = viewer.backlog[0][0] if viewer.backlog else self.journal.end
                if viewer.position is not None and viewer.position < min(upto, self.journal.end):
                    start, data = self.journal.read(
                        viewer.position, min(upto, self.journal.end) - viewer.position
                    )
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

    def _broadcast(self, data: bytes) -> None:
        if self.journal.flush():
            self._wake()
        for viewer in list(self.viewers):
            if viewer.attached:
                viewer.push(self.journal.end, data)

    def _wake(self) -> None:
        for viewer in self.viewers:
            viewer.wake.set()

    def _say(self, line: str) -> None:
        log.info("%s", line)
        said = protocol.message(Said(line))
        if self.current is not None:
            self.said_in_job.append(said)
        self._broadcast(said)

    def _reply(
        self, job: Job, ok: bool, message: str, data: dict[str, object] | None = None
    ) -> None:
        if job.viewer is not None and job.request is not None:
            self._reply_to(job.viewer, job.request, ok, message, data)

    def _reply_to(
        self,
        viewer: Viewer,
        request: str,
        ok: bool,
        message: str,
        data: dict[str, object] | None = None,
    ) -> None:
        if not viewer.closed:
            viewer.push(self.journal.end, protocol.message(Reply(request, ok, message, data or {})))


def _stop_words(record: RunRecord, report: StopReport, was: RunState) -> str:
    if was.final:
        stays = f"run {record.id} stays {was.value}"
        if report.clean:
            return f"{stays}; nothing of it is left running"
        return f"{stays}; not everything could be confirmed gone"
    if not report.clean:
        return f"run {record.id} recorded as stopped, but not everything could be confirmed gone"
    return f"run {record.id} stopped in {report.seconds:.1f} s; nothing of it is left running"


def _stop_data(report: StopReport, was: RunState) -> dict[str, object]:
    return {
        "lines": report.lines(),
        "clean": report.clean,
        "graceful": report.graceful,
        "seconds": report.seconds,
        "was": was.value,
    }


# --- the process ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddptui.run.supervisor")
    parser.add_argument("root", type=Path)
    parser.add_argument("run")
    parser.add_argument("--launch", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--foreground", action="store_true", help="do not fork (tests)")
    args = parser.parse_args(argv)
    store = RunStore(args.root)
    files = store.files(args.run)
    if not args.foreground and os.fork():
        # The starter waits for this first process only; the supervisor goes on as an orphan,
        # so it leaves no zombie behind in a long-lived console.
        return 0
    lock = _take_lock(files)
    if lock is None:
        return BUSY
    _log_to(files)
    files.supervisor_pid.write_text(f"{os.getpid()}\n", encoding="utf-8")
    # A closed terminal or a Ctrl-C in the shell that started it must not end it.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        record = store.load(args.run)
        config = load_config(files.hosts, slurm=True)
        first = (
            Job("launch", debug=args.debug)
            if args.launch
            else Job("resume", debug=args.debug)
            if args.resume
            else None
        )
        asyncio.run(Supervisor(store, record, config).serve(first))
    except DdptuiError as error:
        log.error("cannot supervise run %s: %s", args.run, error)
        return 2
    except Exception:
        log.critical("supervisor crashed:\n%s", traceback.format_exc())
        return 1
    finally:
        with contextlib.suppress(OSError):
            files.supervisor_pid.unlink()
    return 0


def updates_inbox() -> SizedQueue[Update]:
    """Every host's updates waiting to be judged: full at :data:`INBOX` of them or
    :data:`INBOX_BYTES`, whereupon the followers wait (their hosts' channels then fill)."""
    return SizedQueue(INBOX, INBOX_BYTES, _update_size)


def _update_size(update: Update) -> int:
    if isinstance(update, FileLine):
        # A str of any non-ASCII character takes up to 4 bytes a character (PEP 393).
        return (len(update.text) if update.text.isascii() else 4 * len(update.text)) + len(
            update.path
        )
    return HEARTBEAT_BYTES if isinstance(update, Heartbeat) else 0


def _take_lock(files: RunFiles) -> IO[bytes] | None:
    """The run's supervisor lock, held until this process ends (the kernel lets go of it when
    the process dies, so a killed supervisor never leaves a stale lock); None if it is held."""
    handle = files.supervisor_lock.open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _log_to(files: RunFiles) -> None:
    handler = logging.handlers.RotatingFileHandler(
        files.supervisor_log, maxBytes=4 * 1024 * 1024, backupCount=1, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # asyncssh logs every channel at INFO: the log would be mostly that.
    logging.getLogger("asyncssh").setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(main())
