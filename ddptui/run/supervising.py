"""A run's supervisor as the viewers reach it: whether one holds the run, starting one (detached,
in a session of its own) when none does, ending one that holds the run but does not answer,
and connecting to it over its socket.

:class:`~ddptui.run.control.RunControl` and every :class:`~ddptui.run.attachment.Attachment`
reach supervisors through :class:`Supervisors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ddptui.aio import wait_for
from ddptui.atomic import open_file
from ddptui.errors import DdptuiError
from ddptui.layout import RunFiles
from ddptui.remote.head import HEAD_CWD, head_python
from ddptui.run import protocol
from ddptui.run.protocol import Attach, Hello, Reply
from ddptui.run.record import RunRecord
from ddptui.run.store import RunStore
from ddptui.untrusted import plain

Say = Callable[[str], None]
"""Progress for people: one short line per step."""

START_S = 30.0
"""How long a started supervisor may take to answer (it imports, reads the record, binds)."""
ANSWER_S = 15.0
"""How long a supervisor that holds the run may take to say hello before it counts as stuck."""


class ControlError(DdptuiError):
    """A request could not be made or was refused; the message says why."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def quiet(line: str) -> None:
    """A :data:`Say` that says nothing."""
    del line


class Supervisors:
    """The supervisors of the runs in one store."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    def supervised(self, run_id: str) -> bool:
        """Whether a supervisor holds ``run_id`` now."""
        import fcntl

        path = self.store.files(run_id).supervisor_lock
        try:
            with os.fdopen(open_file(path, os.O_WRONLY | os.O_APPEND), "ab") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return True
                return False
        except OSError:
            return False

    def adopt(self, records: Iterable[RunRecord], *, say: Say = quiet) -> list[str]:
        """Start a supervisor for each run in ``records`` that is not over and has none (the
        head node restarted, or it was killed), saying so; the ids of those adopted."""
        adopted = []
        for record in records:
            if record.state.final or self.supervised(record.id):
                continue
            say(_adopted(record.id))
            self.spawn(record.id)
            adopted.append(record.id)
        return adopted

    async def release(self, run_id: str) -> None:
        """End ``run_id``'s supervisor now (SIGTERM) rather than after its idle time, and wait
        for the process to be gone, not only its lock: for a run that ended, when what served
        its hosts goes too (a demo). One that does not go within :data:`ANSWER_S` is killed."""
        files = self.store.files(run_id)
        pid = self._supervisor_pid(files)
        if pid is None:
            return
        try:
            # A pidfd names this process, never one the kernel gives its pid to later.
            process = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            if self._supervisor_pid(files) != pid:
                return
            for number in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(process, number)
                if await _gone(process, ANSWER_S):
                    return
        finally:
            os.close(process)

    def spawn(self, run_id: str, *args: str) -> None:
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

    async def connect(
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
                    await asyncio.get_running_loop().run_in_executor(None, self.spawn, record.id)
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
        """The pid of the live process that supervises this run, if there is one: the pid its
        file names, if that process is a supervisor holding the run's lock open (a pid the
        kernel gave to another process since is not). A supervisor started as a standby was
        told its run on stdin: its argv does not name it."""
        try:
            pid = int(files.supervisor_pid.read_text().strip())
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        if b"ddptui.run.supervisor" in argv and holds_open(pid, files.supervisor_lock):
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


async def _gone(process: int, timeout: float) -> bool:
    """Whether the process of pidfd ``process`` ends within ``timeout`` (its pidfd becomes
    readable when it does; it need not be this process's child)."""
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    loop.add_reader(process, ended.set)
    try:
        await wait_for(ended.wait(), timeout)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(process)


def holds_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` (this user's) has ``path`` open."""
    wanted = str(path.resolve())
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            if str(descriptor.readlink()) == wanted:
                return True
    return False


def _adopted(run_id: str) -> str:
    return (
        f"run {run_id} had no supervisor (the head node restarted, or it was killed): started "
        "one, which follows it from where the last one left off"
    )


class _NoHello(Exception):
    """The socket answered with something other than a hello."""
