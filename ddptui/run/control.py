"""RunControl: the one way the command line and the console reach runs.

Front ends check, plan, and then ask: launch, resume, stop, attach, view. Every run has one
supervisor (:mod:`ddptui.run.supervisor`) that owns it; what changes a run is a request to it,
and following a run is attaching to it (an :class:`Attachment`), so any number of viewers cost
the hosts one channel each. A command that finds a live run without a supervisor (the head
rebooted, the supervisor killed) starts one and says so. A finished run is read from its hosts
directly (:meth:`RunControl.read_back`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path

from ddptui.aio import QueueReader, wait_for
from ddptui.check import CheckReport, check_cluster
from ddptui.check.run import Progress
from ddptui.config import Config, load_config
from ddptui.errors import DdptuiError, UsageError
from ddptui.health.slurm import SlurmCheck
from ddptui.plan.launch import LaunchPlan, plan_launch
from ddptui.plan.slurm import BatchPlan, plan_batch
from ddptui.remote.commands import HEAD_CWD, head_python
from ddptui.run import dump as stack_dump
from ddptui.run import protocol, slurm, slurm_run
from ddptui.run.code import CodeTree, job_code
from ddptui.run.dump import StackDump
from ddptui.run.follow import (
    SILENCE_S,
    FileLine,
    Heartbeat,
    HostBack,
    HostFollower,
    HostSilent,
    Update,
)
from ddptui.run.launcher import new_record
from ddptui.run.layout import RunFiles
from ddptui.run.protocol import (
    BUSY,
    Attach,
    Ended,
    Gap,
    Hello,
    Judged,
    Message,
    Reply,
    Request,
    Said,
)
from ddptui.run.slurm_job import ENDED
from ddptui.run.state import Judgement, RunWatch, Steps
from ddptui.run.store import Catalogue, RunRecord, RunState, RunStore, new_run_id
from ddptui.run.view import RunView
from ddptui.untrusted import plain

Say = Callable[[str], None]
"""Progress for people: one short line per step."""

START_S = 30.0
"""How long a started supervisor may take to answer (it imports, reads the record, binds)."""
ANSWER_S = 15.0
"""How long a supervisor that holds the run may take to say hello before it counts as stuck."""
REATTACH_WAIT_S = 3.0
"""After losing its supervisor, how long a viewer waits for another command to start one
before it starts one itself."""
SACCT_EVERY_S = 30.0
"""Slurm's accounting is asked no more often: a database query for the whole cluster's users."""
SACCT_FILE = "sacct.json"
"""In the run store: when Slurm's accounting was last asked, and what it said."""
READ_BACK_S = 30.0
READ_BYTES = 256 * 1024


class ControlError(DdptuiError):
    """A request could not be made or was refused; the message says why."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _quiet(line: str) -> None:
    del line


class Attachment:
    """A viewer's connection to a run's supervisor.

    :meth:`updates` yields every message as it comes, after applying it to :attr:`watch` (the
    run's state for rendering) and :attr:`judgement` (what the supervisor says of it).
    :meth:`request` asks the supervisor for something and waits for its answer. A supervisor
    that goes away is found again (or started, and said so), and following resumes from the
    last line received: nothing is lost or repeated.
    """

    def __init__(
        self,
        control: RunControl,
        record: RunRecord,
        *,
        position: int | None,
        say: Say,
        steps: Steps = Steps.EVERY,
    ) -> None:
        """``steps``: how much of the step events the viewer's watch reads (:class:`Steps`): a
        console charts every one, one that prints lines and the judgement needs none."""
        self.control = control
        self.record = record
        self.position = position
        """The journal position after the last line received (None: live messages only)."""
        self.say = say
        self.watch = RunWatch(record, steps=steps)
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
    def caught_up(self) -> bool:
        """:meth:`updates` has handed out every line the journal held when this attached (or
        attached again)."""
        hello = self.hello
        return hello is not None and (self.taken or 0) >= hello.journal_end

    async def open(self) -> Attachment:
        await self._connect()
        self._task = asyncio.create_task(self._read())
        return self

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

    async def ask(self, op: str, *, debug: bool = False) -> Reply:
        """:meth:`request` ``op``, taking what comes meanwhile (its steps are said) up to the
        answer, so that what follows it is what comes after it."""
        request = await self._send(op, debug, awaited=False)
        try:
            async for item in self.updates():
                if isinstance(item, Said):
                    self.say(item.line)
                elif isinstance(item, Reply) and item.id == request:
                    return item
        finally:
            self._replies.pop(request, None)
        raise ControlError(f"run {self.record.id}: its supervisor went away before answering")

    async def _send(self, op: str, debug: bool, *, awaited: bool = True) -> str:
        """Send a request; its id (``awaited``: its answer resolves ``_replies[id]``; else it
        is read from :meth:`updates`, and a future nobody awaits would only be reported)."""
        writer = self._writer
        if writer is None:
            raise ControlError(f"run {self.record.id}: not connected to its supervisor")
        request = Request(f"r{next(self._ids)}", op, debug)
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
        reader, writer, hello = await self.control._connect(
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
                if self.control.store.load(self.record.id).state.final or self._closed:
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
        """A received message, for :meth:`updates` (which applies it, so what the watch and
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
            self.watch.apply(item)
        elif isinstance(item, Gap):
            self.gaps += 1
        elif isinstance(item, (Judged, Hello)):
            self._judge(item.judgement)
        elif isinstance(item, Ended):
            self.ended = item
            self.watch.conclude(item.state)

    def _judge(self, judgement: Judgement) -> None:
        new_attempt = judgement.attempt != self.judgement.attempt
        if judgement.state is not self.judgement.state or new_attempt:
            self.record = self.control.store.load(self.record.id)
            if new_attempt and judgement.attempt > self.watch.attempt:
                # The supervisor says so before any line of the new attempt comes.
                self.watch.next_attempt(self.record)
            else:
                self.watch.record = self.record
        self.judgement = judgement
        # Attached after the end: no Ended comes, the judgement says it all.
        self.watch.conclude(judgement.state)


class RunControl:
    """The runs in one store, and the operations both front ends call."""

    def __init__(self, store: RunStore | None = None) -> None:
        self.store = store or RunStore()

    # --- before a run ----------------------------------------------------------------------

    async def check(self, config: Config, progress: Progress | None = None) -> CheckReport:
        return await check_cluster(config, progress)

    def plan(
        self,
        config: Config,
        report: CheckReport,
        *,
        extra_args: Sequence[str] = (),
        debug: bool = False,
    ) -> LaunchPlan:
        return plan_launch(
            config, report.checks, run_id=new_run_id(), extra_args=extra_args, debug=debug
        )

    def plan_batch(
        self, config: Config, *, extra_args: Sequence[str] = (), debug: bool = False
    ) -> BatchPlan:
        """A new run's Slurm batch script for ``config`` (a ``[slurm]`` one), its workdir as
        the head sees it: the nodes share it."""
        assert config.node is not None
        workdir = slurm_run.workdir(config)
        if not workdir.startswith("/"):
            raise UsageError(
                f"{config.path}: [cluster] workdir {config.node.workdir!r}: a Slurm run's "
                "workdir is shared by the login node and the nodes; give an absolute path or "
                "one starting with ~/"
            )
        return plan_batch(
            config, run_id=new_run_id(), workdir=workdir, extra_args=extra_args, debug=debug
        )

    def check_slurm(self, config: Config) -> SlurmCheck:
        """Which nodes Slurm would give ``config``'s runs (a ``[slurm]`` config), and what
        stands in their way."""
        return slurm.check(config)

    def code(self, config: Config) -> CodeTree:
        """What a launch of ``config`` uploads; :class:`~ddptui.run.code.CodeError` saying what
        to change when it cannot (too large, no such directory)."""
        return job_code(config.job)

    # --- runs ------------------------------------------------------------------------------

    def open(self, run_id: str | None) -> tuple[RunRecord, Config]:
        """The run ``run_id`` names (default: the latest), with the hosts file it was launched
        with."""
        record = self.store.resolve(run_id)
        return record, load_config(self.store.hosts_file(record.id), slurm=True)

    def catalogue(self) -> Catalogue:
        """Every run, with Slurm's final state of the jobs whose end no supervisor saw
        (:meth:`settle_slurm_states`)."""
        catalogue = self.store.catalogue()
        if self.settle_slurm_states(catalogue.records):
            catalogue = self.store.catalogue()
        return catalogue

    def settle_slurm_states(self, records: Iterable[RunRecord]) -> bool:
        """Ask Slurm's accounting (``sacct``) how the last job of each ended Slurm run ended,
        where its supervisor did not see it end, and keep the answer in the record; asked at
        most every :data:`SACCT_EVERY_S` by every command and screen together. Whether a
        record changed."""
        waiting = {
            jobs[-1].id: record.id
            for record in records
            if record.state.final and (jobs := record.slurm_jobs) and not jobs[-1].state
        }
        waiting = {job: run for job, run in waiting.items() if not self.supervised(run)}
        if not waiting:
            return False
        asked = self.store.root / SACCT_FILE
        try:
            cached = json.loads(asked.read_text(encoding="utf-8"))
            fresh = time.time() - float(cached["time"]) < SACCT_EVERY_S
            states = {str(k): str(v) for k, v in cached["states"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            fresh, states = False, {}
        if not fresh:
            try:
                states = slurm.accounted_states(sorted(waiting))
            except (slurm.SlurmError, UsageError):
                states = {}
            asked.write_text(json.dumps({"time": time.time(), "states": states}), "utf-8")
        changed = False
        for job_id, run_id in waiting.items():
            state = states.get(job_id)
            if state is None or state not in ENDED:
                continue

            def settle(record: RunRecord, job_id: str = job_id, state: str = state) -> None:
                for attempt in record.attempts:
                    if attempt.job_id == job_id:
                        attempt.slurm_state = state

            self.store.update(run_id, settle)
            changed = True
        return changed

    async def launch(
        self,
        config: Config,
        report: CheckReport,
        plan: LaunchPlan,
        *,
        demo: bool = False,
        say: Say = _quiet,
        steps: Steps = Steps.EVERY,
    ) -> Attachment:
        """Record ``plan`` as a new run, start its supervisor (which stages and starts it) and
        attach from the first line; returns once every node runs (:class:`ControlError` with
        the reason when staging or the start failed). ``steps``: see :class:`Attachment`."""
        record = new_record(config, report, plan, demo=demo)
        return await self._supervise_new(config, record, (), say=say, steps=steps)

    async def launch_slurm(
        self,
        config: Config,
        plan: BatchPlan,
        extra_args: Sequence[str],
        *,
        say: Say = _quiet,
        steps: Steps = Steps.EVERY,
        queued: bool = False,
    ) -> Attachment:
        """Record ``plan`` as a new Slurm run and start its supervisor, which stages the code,
        submits the job and says its queue state; returns, attached from the first line, once
        the job runs (with ``queued``: once it is submitted). :class:`ControlError` with the
        reason when staging or the submission failed."""
        record = slurm_run.new_record(config, plan, extra_args)
        debug = ("--debug",) if plan.debug else ()
        return await self._supervise_new(config, record, debug, say=say, steps=steps, queued=queued)

    async def _supervise_new(
        self,
        config: Config,
        record: RunRecord,
        options: Sequence[str],
        *,
        say: Say,
        steps: Steps,
        queued: bool = False,
    ) -> Attachment:
        """Keep ``record`` (and ``config``, as the run's own hosts file), start the run's
        supervisor to launch it (with ``options``) and attach from the first line; once it runs
        (``queued``: its Slurm job is submitted)."""
        from ddptui.config.render import config_to_toml

        self.store.create(record, config_to_toml(config))
        self._spawn(record.id, "--launch", *options)
        attachment = await Attachment(self, record, position=0, say=say, steps=steps).open()
        try:
            await attachment.wait_started(queued=queued)
        except BaseException:
            await attachment.close()
            raise
        return attachment

    async def resume(
        self,
        run_id: str | None,
        *,
        debug: bool = False,
        say: Say = _quiet,
        steps: Steps = Steps.EVERY,
    ) -> Attachment:
        """A new attempt of a stopped or failed run, from its newest checkpoint; returns once it
        runs, attached from the first line. :class:`ControlError` with the reason when the
        supervisor refuses (the run still runs, another resume is starting it)."""
        record = self.store.resolve(run_id)
        attachment = await Attachment(self, record, position=0, say=say, steps=steps).open()
        try:
            reply = await attachment.ask("resume", debug=debug)
            if not reply.ok:
                # 2 when the hosts file needs a change (checkpoint_files naming nothing there).
                usage = reply.data.get("exit_code") == UsageError.exit_code
                code = UsageError.exit_code if usage else DdptuiError.exit_code
                raise ControlError(plain(reply.message), code)
        except BaseException:
            await attachment.close()
            raise
        return attachment

    async def stop(self, run_id: str | None, *, kill: bool = False, say: Say = _quiet) -> Reply:
        """Ask the run's supervisor to stop it (checkpoint first unless ``kill``) and confirm
        nothing is left; its answer (``data``: ``lines``, ``clean``, ``was``…)."""
        record = self.store.resolve(run_id)
        async with await Attachment(self, record, position=None, say=say).open() as attachment:
            return await attachment.ask("kill" if kill else "stop")

    async def attach(
        self, run_id: str | None, *, say: Say = _quiet, steps: Steps = Steps.EVERY
    ) -> Attachment:
        """Follow a run from its first line (starting its supervisor if it has none)."""
        record = self.store.resolve(run_id)
        return await Attachment(self, record, position=0, say=say, steps=steps).open()

    async def dump(self, run_id: str | None) -> StackDump:
        """Every rank's Python stacks, from every host at once, and the ranks' flight-recorder
        dumps, saved in the run's store (of a finished run, the flight recorders alone)."""
        record, config = self.open(run_id)
        return stack_dump.save(
            await stack_dump.take(config, record), self.store.files(record.id).dumps
        )

    async def view(self, run_id: str | None, *, say: Say = _quiet) -> RunView:
        """The run as it stands: from its supervisor while it lives (started if it has none),
        else from its hosts directly."""
        record, config = self.open(run_id)
        if not record.state.final:
            try:
                async with await Attachment(self, record, position=None, say=say).open() as live:
                    reply = await live.request("snapshot", timeout=ANSWER_S)
                    record = self.store.load(record.id)
                    return RunView.from_live_document(record, reply.data)
            except (ControlError, ValueError) as error:
                say(f"run {record.id}: asking its hosts directly ({error})")
        # A live run's processes are judged by their CPU use, which takes two samples.
        watch = await self.read_back(record, config, heartbeats=1 if record.state.final else 2)
        return RunView.of(record, watch, watch.judgement(record))

    async def read_back(
        self,
        record: RunRecord,
        config: Config,
        *,
        heartbeats: int = 2,
        timeout: float = READ_BACK_S,
    ) -> RunWatch:
        """The run as its files on the hosts stand now, read directly (no supervisor): every
        host followed until it has caught up (:meth:`lines`), or ``timeout``."""
        watch = RunWatch(record)

        async def read() -> None:
            silence_s = min(SILENCE_S, timeout)
            async for update in self.lines(
                record, config, heartbeats=heartbeats, silence_s=silence_s
            ):
                watch.apply(update)

        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(read(), timeout)
        watch.tick()
        watch.conclude(record.state)
        return watch

    async def lines(
        self,
        record: RunRecord,
        config: Config,
        *,
        heartbeats: int = 2,
        silence_s: float = SILENCE_S,
    ) -> AsyncIterator[Update]:
        """Every line of the run's files as they stand, read from its hosts directly (no
        supervisor); it ends once each host has caught up: sent ``heartbeats`` heartbeats, the
        last with every line written before it sent (the agent reads a file a piece at a time,
        so a large one takes several), or stopped answering."""
        queue: asyncio.Queue[Update | None] = asyncio.Queue(maxsize=10000)
        followers = [
            HostFollower.of_node(config, record, node, silence_s=silence_s) for node in record.nodes
        ]

        async def pump(follower: HostFollower) -> None:
            beats = 0
            # Closed as it is left, so its channel is ended now, not when the loop ends.
            updates = follower.updates()
            try:
                async for update in updates:
                    await queue.put(update)
                    if isinstance(update, Heartbeat):
                        beats += 1
                        if beats >= heartbeats and not update.behind:
                            return
                    if isinstance(update, HostSilent):
                        return
            finally:
                await updates.aclose()

        async def pump_all() -> None:
            await asyncio.gather(*(pump(follower) for follower in followers))
            await queue.put(None)

        task = asyncio.create_task(pump_all())
        try:
            while (item := await queue.get()) is not None:
                yield item
        finally:
            task.cancel()
            await asyncio.wait([task], timeout=5.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_for(asyncio.gather(*(f.close() for f in followers)), 10.0)

    # --- supervisors -----------------------------------------------------------------------

    def supervised(self, run_id: str) -> bool:
        """Whether a supervisor holds ``run_id`` now."""
        import fcntl

        path = self.store.files(run_id).supervisor_lock
        try:
            with path.open("ab") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return True
                return False
        except OSError:
            return False

    def adopt(self, records: Iterable[RunRecord], *, say: Say = _quiet) -> list[str]:
        """Start a supervisor for each run in ``records`` that is not over and has none (the
        head node restarted, or it was killed), saying so; the ids of those adopted."""
        adopted = []
        for record in records:
            if record.state.final or self.supervised(record.id):
                continue
            say(_adopted(record.id))
            self._spawn(record.id)
            adopted.append(record.id)
        return adopted

    async def release(self, run_id: str) -> None:
        """End ``run_id``'s supervisor now (SIGTERM) rather than after its idle time, and wait
        for it to go: for a run that ended, when what served its hosts goes too (a demo)."""
        pid = self._supervisor_pid(self.store.files(run_id))
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + ANSWER_S
        while self.supervised(run_id) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def _spawn(self, run_id: str, *args: str) -> None:
        """Start ``run_id``'s supervisor, detached in a session of its own."""
        root = str(self.store.root.resolve())
        subprocess.run(
            head_python("-m", "ddptui.run.supervisor", root, run_id, *args),
            cwd=HEAD_CWD,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            check=False,
            timeout=START_S,
        )

    async def _connect(
        self, record: RunRecord, position: int | None, *, say: Say
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Hello]:
        """Attach to ``record``'s supervisor, starting one if none holds the run."""
        files = self.store.files(record.id)
        began = time.monotonic()
        started = killed = False
        while True:
            try:
                return await self._hello(files, position)
            except (OSError, asyncio.TimeoutError, _NoHello):
                pass
            waited = time.monotonic() - began
            if not self.supervised(record.id):
                if started and waited > START_S:
                    raise ControlError(
                        f"run {record.id}: its supervisor did not start; see {files.supervisor_log}"
                    )
                if not started:
                    if not self.store.load(record.id).state.final:
                        say(_adopted(record.id))
                    await asyncio.get_running_loop().run_in_executor(None, self._spawn, record.id)
                    started = True
            elif waited > ANSWER_S and not killed:
                killed = self._end_stuck(files, say)
                began = time.monotonic()
            elif waited > ANSWER_S:
                raise ControlError(
                    f"run {record.id}: its supervisor holds the run but does not answer; see "
                    f"{files.supervisor_log}"
                )
            await asyncio.sleep(0.05)

    async def _hello(
        self, files: RunFiles, position: int | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Hello]:
        with protocol.socket_address(files.socket) as address:
            reader, writer = await wait_for(
                asyncio.open_unix_connection(address, limit=protocol.MAX_MESSAGE_BYTES), ANSWER_S
            )
        try:
            writer.write(protocol.message(Attach(position)))
            raw = await wait_for(reader.readline(), ANSWER_S)
        except BaseException:
            writer.close()
            raise
        hello = protocol.decode(raw)
        if isinstance(hello, Reply):
            writer.close()
            raise ControlError(plain(hello.message))
        if not isinstance(hello, Hello):
            writer.close()
            raise _NoHello
        return reader, writer, hello

    def _supervisor_pid(self, files: RunFiles) -> int | None:
        """The pid of the live process that says it supervises this run, if there is one."""
        try:
            pid = int(files.supervisor_pid.read_text().strip())
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        if b"ddptui.run.supervisor" in argv and files.directory.name.encode() in argv:
            return pid
        return None

    def _end_stuck(self, files: RunFiles, say: Say) -> bool:
        """End a supervisor that holds the run but does not answer (stopped, deadlocked), so a
        new one can take over; whether there was one to end."""
        pid = self._supervisor_pid(files)
        if pid is None:
            return False
        say(f"the supervisor of run {files.directory.name} (pid {pid}) does not answer: ending it")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return True


def _adopted(run_id: str) -> str:
    return (
        f"run {run_id} had no supervisor (the head node restarted, or it was killed): started "
        "one, which follows it from where the last one left off"
    )


class _NoHello(Exception):
    """The socket answered with something other than a hello."""


__all__ = ["BUSY", "Attachment", "ControlError", "RunControl", "Say"]
