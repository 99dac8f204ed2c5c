"""The nodes of a Slurm job, reached through ``srun`` steps from the login node.

Each command is ``srun --jobid=J --overlap --nodelist=NODE`` on the job's allocation: a step
that shares the node with the run's own, so the node agent follows, reports and signals there
as it does over SSH, and no node needs an SSH server or a key. Once the job has ended there is
no allocation to run a step in; the run's files are still on the workdir the login node shares
with the nodes, so the agent then runs here and reads them (it finds no process of the run on
this machine, which is so: Slurm ended them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence

from ddptui.aio import wait_for
from ddptui.config.model import HostConfig
from ddptui.remote.commands import CommandResult, python_argv
from ddptui.remote.connection import MAX_STDERR_BYTES, MAX_STDOUT_BYTES, RemoteError
from ddptui.remote.failures import remote_reason
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.stream import Capped, LineStream, drain_both

STREAM_ERROR_BYTES = 16 * 1024
"""What a stream keeps of its command's stderr: enough for srun's reason it could not start."""
STOP_S = 2.0
"""How long an srun that was asked to end (SIGTERM: it ends its step) gets before SIGKILL."""
_JOB_GONE = re.compile(
    r"has expired|already completing or completed|Invalid job id|is not running", re.IGNORECASE
)
"""What srun says for a job that has ended: its steps cannot start any more."""


class SrunCluster:
    """Commands on the nodes of Slurm job ``job_id`` (None: the job is not running, so every
    command runs on this machine, against the shared workdir)."""

    def __init__(self, job_id: str | None, *, here_once_ended: bool = True) -> None:
        """``here_once_ended``: a command that finds the job ended runs here instead (it reads
        the run's files); without it, it fails as srun did (it asks about the node itself)."""
        self.job_id = job_id
        self.here_once_ended = here_once_ended

    @property
    def local(self) -> bool:
        return self.job_id is None

    def python(self, host: HostConfig, *args: str) -> list[str]:
        # Here, the login node's own Python runs the agent: the nodes' may not exist on it.
        return [sys.executable, *args] if self.local else python_argv(host, *args)

    async def connect(self, host: HostConfig) -> Reachability:
        return Reachability(Reach.OK, "this machine" if self.local else f"job {self.job_id}")

    async def run(
        self,
        host: HostConfig,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float,
        env: Mapping[str, str] | None = None,
        max_stdout: int = MAX_STDOUT_BYTES,
        max_stderr: int = MAX_STDERR_BYTES,
    ) -> CommandResult:
        """As :meth:`RemoteCluster.run`; a job found ended on the way has the command run here
        instead (its files are shared), with the Python this machine has."""
        result = await self._run(host, argv, input, timeout, env, max_stdout, max_stderr)
        gone = not result.stdout and _JOB_GONE.search(result.stderr)
        if not self.local and self.here_once_ended and gone:
            self.job_id = None
            local_argv = [sys.executable, *argv[len(python_argv(host)) :]]
            result = await self._run(host, local_argv, input, timeout, env, max_stdout, max_stderr)
        return result

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
                # A group of its own: ending it never reaches the supervisor that started it.
                start_new_session=True,
            )
        except OSError as error:
            raise RemoteError(
                f"{host.name}: cannot start {'a command' if self.local else 'srun'}: {error}"
            ) from None

    async def _run(
        self,
        host: HostConfig,
        argv: Sequence[str],
        input: str | None,
        timeout: float,
        env: Mapping[str, str] | None,
        max_stdout: int,
        max_stderr: int,
    ) -> CommandResult:
        try:
            process = await self._start(host, argv, env)
        except RemoteError as error:
            return CommandResult(None, "", str(error), reach=Reachability(Reach.ERROR, str(error)))
        assert process.stdout is not None and process.stderr is not None
        await _send(process, input)
        stdout, stderr = Capped(max_stdout, "stdout"), Capped(max_stderr, "stderr")
        try:
            await wait_for(drain_both(process.stdout, process.stderr, stdout, stderr), timeout)
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
