"""The nodes of a Slurm job, reached through ``srun`` steps from the login node.

Each command is ``srun --jobid=J --overlap --nodelist=NODE`` on the job's allocation: a step
that shares the node with the run's own, so the node agent follows, reports and signals there
as it does over SSH, and no node needs an SSH server or a key. Once the job has ended there is
no allocation to run a step in; the run's files are still on the workdir the login node shares
with the nodes, so the agent then runs here and reads them (it finds no process of the run on
this machine, which is so: Slurm ended them), and a file is read straight from the disk.

Whether the job has ended is Slurm's word (``job_ended``, asked of the controller), never what
a failed step printed: a node's task writes to srun's stderr too, and could say "Invalid job
id" to have the next command run here. Only the node agent runs here in a node's stead: it is
ddptui's own code, sent on stdin, and only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from ddptui.aio import wait_for
from ddptui.config.model import HostConfig
from ddptui.remote.commands import CommandResult, python_argv
from ddptui.remote.failures import remote_reason
from ddptui.remote.files import UnreadableFile, read_local
from ddptui.remote.head import HEAD_CWD, head_python
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.stream import Capped, LineStream, drain_both
from ddptui.remote.transport import Command, RemoteError, Transport

STREAM_ERROR_BYTES = 16 * 1024
"""What a stream keeps of its command's stderr: enough for srun's reason it could not start."""
STOP_S = 2.0
"""How long an srun that was asked to end (SIGTERM: it ends its step) gets before SIGKILL."""
JobEnded = Callable[[str], bool]
"""Whether Slurm says job J has ended (asked of the controller; blocking)."""


class SrunCluster(Transport):
    """Commands on the nodes of Slurm job ``job_id`` (None: the job is not running, so the
    node agent runs on this machine, against the shared workdir)."""

    def __init__(self, job_id: str | None, *, job_ended: JobEnded | None = None) -> None:
        """``job_ended``: how to ask Slurm whether the job has ended, when a step fails; if it
        has, the node agent runs here from then on (it reads the run's files). Without it, a
        command fails as srun did (it asks about the node itself)."""
        self.job_id = job_id
        self.job_ended = job_ended

    @property
    def local(self) -> bool:
        return self.job_id is None

    def python(self, host: HostConfig, *args: str) -> list[str]:
        # Here, the login node's own Python runs the agent: the nodes' may not exist on it.
        return head_python(*args) if self.local else python_argv(host, *args)

    async def connect(self, host: HostConfig) -> Reachability:
        return Reachability(Reach.OK, "this machine" if self.local else f"job {self.job_id}")

    async def _execute(self, host: HostConfig, command: Command) -> CommandResult:
        """A step that fails once Slurm says the job has ended has the node agent run here
        instead (its files are shared), with this machine's Python; any other command fails
        as srun said."""
        result = await self._run(host, command)
        if self.local or result.ok or result.stdout or not await self._ended_now():
            return result
        node_python = python_argv(host)
        if list(command.argv[: len(node_python)]) != node_python:
            return result
        here = self.python(host, *command.argv[len(node_python) :])
        return await self._run(host, replace(command, argv=tuple(here)))

    async def read_file(
        self, host: HostConfig, path: str, *, max_bytes: int, timeout: float
    ) -> bytes:
        """``path`` on ``host``: from the shared workdir here once the job has ended."""
        if not self.local:
            try:
                return await super().read_file(host, path, max_bytes=max_bytes, timeout=timeout)
            except UnreadableFile:
                # The step's failure asked Slurm: still remote, the job runs.
                if not self.local:
                    raise
        return await read_local(path, max_bytes=max_bytes)

    async def _ended_now(self) -> bool:
        """Whether the job has ended, as Slurm says (asked once a step failed); from then on
        this transport is local."""
        if self.job_ended is None or self.job_id is None:
            return False
        if await asyncio.to_thread(self.job_ended, self.job_id):
            self.job_id = None
        return self.local

    async def open_stream(
        self, host: HostConfig, argv: Sequence[str], *, input: str, max_line: int
    ) -> LineStream:
        process = await self._start(host, argv, None)
        await _send(process, input)
        return ProcessStream(host, process, max_line)

    async def close(self) -> None:
        """Nothing is held between commands: each is a process of its own."""

    def _argv(self, host: HostConfig, argv: Sequence[str]) -> list[str]:
        if self.local:
            own = head_python()
            if list(argv[: len(own)]) != own:
                raise RemoteError(
                    f"{host.name}: Slurm ended the job, and only the node agent runs on this "
                    "machine in a node's stead"
                )
            return list(argv)
        return [
            "srun",
            f"--jobid={self.job_id}",
            "--overlap",
            f"--nodelist={host.name}",
            "--nodes=1",
            "--ntasks=1",
            "--quiet",
            *argv,
        ]

    async def _start(
        self, host: HostConfig, argv: Sequence[str], env: Mapping[str, str] | None
    ) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *self._argv(host, argv),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **env} if env else None,
                cwd=HEAD_CWD,
                # A group of its own: ending it never reaches the supervisor that started it.
                start_new_session=True,
            )
        except OSError as error:
            raise RemoteError(
                f"{host.name}: cannot start {'a command' if self.local else 'srun'}: {error}"
            ) from None

    async def _run(self, host: HostConfig, command: Command) -> CommandResult:
        try:
            process = await self._start(host, command.argv, command.env)
        except RemoteError as error:
            return CommandResult(None, "", str(error), reach=Reachability(Reach.ERROR, str(error)))
        assert process.stdout is not None and process.stderr is not None
        await _send(process, command.input)
        stdout, stderr = Capped(command.max_stdout, "stdout"), Capped(command.max_stderr, "stderr")
        try:
            await wait_for(
                drain_both(process.stdout, process.stderr, stdout, stderr), command.timeout
            )
        except asyncio.TimeoutError:
            await _end_unread(process)
            return CommandResult(None, stdout.text(), stderr.text(), timed_out=True)
        overflow = stdout.overflow or stderr.overflow
        if overflow is not None:
            await _end_unread(process)
            return CommandResult(None, stdout.text(), stderr.text(), overflow=overflow)
        await process.wait()
        return CommandResult(process.returncode, stdout.text(), stderr.text())


async def _send(process: asyncio.subprocess.Process, text: str | None) -> None:
    """``text`` (if any) on the command's stdin, then its end."""
    assert process.stdin is not None
    if text is not None:
        process.stdin.write(text.encode("utf-8"))
    # A command may exit without reading its input: what counts then is its exit status.
    with contextlib.suppress(OSError):
        await process.stdin.drain()
    process.stdin.close()


async def end(process: asyncio.subprocess.Process) -> None:
    """End ``process`` and its group: SIGTERM (srun passes it to its step and leaves), then
    SIGKILL after :data:`STOP_S`."""
    for number in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, number)
        try:
            await wait_for(process.wait(), STOP_S)
            return
        except asyncio.TimeoutError:
            continue


async def _end_unread(process: asyncio.subprocess.Process) -> None:
    """End a command whose output is no longer read, and read what is left of it: its pipes
    close only at their end, and left open they outlive the event loop."""
    await end(process)
    assert process.stdout is not None and process.stderr is not None
    for reader in (process.stdout, process.stderr):
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(_discard(reader), STOP_S)


async def _discard(reader: asyncio.StreamReader) -> None:
    while await reader.read(1 << 20):
        pass


class ProcessStream(LineStream):
    """A local process's stdout (an ``srun`` step's, or the agent's own here) as lines."""

    def __init__(self, host: HostConfig, process: asyncio.subprocess.Process, max_line: int):
        assert process.stdout is not None and process.stderr is not None
        super().__init__(host, process.stdout, max_line)
        self._process = process
        # Read as it comes, so that a step that says much on stderr never blocks on it.
        self._errors = Capped(STREAM_ERROR_BYTES, "stderr")
        self._reading_errors = asyncio.create_task(self._errors.read_from(process.stderr))

    @property
    def exit_status(self) -> int | None:
        return self._process.returncode

    @property
    def why_ended(self) -> str:
        said = self._errors.text().strip().splitlines()
        return remote_reason(said[-1]) if said else ""

    async def close(self) -> None:
        await end(self._process)
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(asyncio.shield(self._reading_errors), STOP_S)
        self._reading_errors.cancel()
        # What the process wrote that nobody read keeps its pipe, and so its transport, open
        # past the event loop.
        assert self._process.stdout is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(_discard(self._process.stdout), STOP_S)
