"""One command of the node agent (:mod:`ddptui.onhost.agent`) on one host, over a
:class:`~ddptui.remote.transport.Transport`: its one JSON answer, or the error that names the
host.

The agent is sent to the host's Python and its answer read with a byte cap and a deadline.
What comes back is the host's word: :func:`agent` returns it as a JSON object or raises
:class:`NodeError` (:class:`GarbledAnswer`, quoting the answer, when the host answered
something else), never any other exception; :meth:`Answer.take` reads a part of it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import asyncssh

from ddptui.aio import wait_for
from ddptui.config.model import HostConfig
from ddptui.errors import DdptuiError
from ddptui.remote.programs import KEPT_AGENT_BOOTSTRAP, agent_program, kept_agent_input
from ddptui.remote.stream import LineTooLong, RemoteStream, SendFailed
from ddptui.remote.transport import RemoteError, Transport
from ddptui.untrusted import plain

AGENT_TIMEOUT_S = 30.0
MAX_ANSWER_BYTES = 1 << 20
"""What an agent command may print: its answer is one line far shorter, and a host that floods
is hung up on at this much."""
EXCERPT_CHARS = 120
"""What a :class:`GarbledAnswer` quotes of the answer."""

_T = TypeVar("_T")

log = logging.getLogger(__name__)


class NodeError(DdptuiError):
    """An operation on a node failed; the message names the host."""


class GarbledAnswer(NodeError):
    """The host answered, but not as the node agent does: its processes are not known."""


@dataclass(frozen=True)
class Answer:
    """The node agent's JSON object, and the line it came in (to quote when it is garbage)."""

    host: str
    command: str
    line: str
    document: dict[str, Any]

    def garbage(self) -> GarbledAnswer:
        return _garbage(self.host, self.command, self.line)

    def take(self, key: str, read: Callable[[Any], _T | None]) -> _T:
        """The answer's ``key`` as ``read`` makes it; ``read``'s None (not what the agent
        sends) makes the whole answer garbage."""
        value = read(self.document.get(key))
        if value is None:
            raise self.garbage()
        return value


def _garbage(host: str, command: str, said: str) -> GarbledAnswer:
    excerpt = plain(said, limit=EXCERPT_CHARS, one_line=True)
    return GarbledAnswer(f"{host} answered garbage to {command}: {excerpt}")


async def agent(
    remote: Transport,
    host: HostConfig,
    *args: str,
    sent: object = None,
    timeout: float = AGENT_TIMEOUT_S,
) -> Answer:
    """Run one agent command on ``host`` (``sent``: its document too large for argv); its
    JSON answer. Raises :class:`NodeError`.

    Inside :func:`kept_agents` the command goes to the agent kept on ``host``, if it has one."""
    kept = _kept.get().get(host.name)
    if kept is not None and kept.remote is remote and not kept.broken:
        return await kept.ask(args, sent, timeout)
    command = args[0]
    result = await remote.run(
        host,
        remote.python(host, "-", *args),
        input=agent_program(sent),
        timeout=timeout,
        max_stdout=MAX_ANSWER_BYTES,
    )
    if result.reach is not None:
        raise NodeError(f"{host.name}: {plain(result.reach.detail, one_line=True)}")
    if result.timed_out:
        raise _no_answer(host.name, command, timeout)
    if result.overflow is not None:
        raise _garbage(host.name, command, f"it {result.overflow}")
    failed = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.exit_status}"]
    return _answer(host.name, command, result.stdout.strip().splitlines(), failed[0])


def _no_answer(host: str, command: str, timeout: float) -> NodeError:
    return NodeError(f"{host}: the node agent ({command}) did not answer in {timeout:g} s")


def _answer(host: str, command: str, lines: Sequence[str], failed: str) -> Answer:
    """The agent's answer among the ``lines`` it printed; ``failed``: why it printed none."""
    if not lines:
        excerpt = plain(failed, limit=EXCERPT_CHARS, one_line=True)
        raise NodeError(f"{host}: the node agent ({command}) failed: {excerpt}")
    # The last line: a login script may print before the agent does.
    line = lines[-1]
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):
        # ValueError also covers integers of more than 4300 digits.
        raise _garbage(host, command, line) from None
    if not isinstance(document, dict):
        raise _garbage(host, command, line)
    if "error" in document:
        error = document["error"]
        if not isinstance(error, str):
            raise _garbage(host, command, line)
        # One line: a host's newline would start a line of the report (``ddptui dump``) that
        # reads as another host's.
        raise NodeError(f"{host}: {plain(error, limit=2000, one_line=True)}")
    return Answer(host, command, line, document)


class _Ended(Exception):
    """A kept agent's output ended before its command's end line."""


class KeptAgent:
    """The node agent kept running on one host (its ``serve`` command), asked one command at a
    time: a command costs a line each way instead of a session and a Python start.

    A kept agent that fails to answer as ``serve`` does (in time, within the caps, with its
    end line) is closed, and that command fails as a one-shot agent's would; the next command
    to that host goes one-shot."""

    def __init__(self, remote: Transport, host: HostConfig, stream: RemoteStream) -> None:
        self.remote = remote
        self.host = host
        self._stream = stream
        self._lines = stream.lines()
        self._turn = asyncio.Lock()
        self.broken = False

    async def ask(self, args: Sequence[str], sent: object, timeout: float) -> Answer:
        command = args[0]
        async with self._turn:
            try:
                request = json.dumps({"args": list(args), "sent": sent}) + "\n"
                await self._stream.send(request.encode("utf-8"))
                lines, failed = await wait_for(self._served(command), timeout)
            except asyncio.TimeoutError:
                await self._break()
                raise _no_answer(self.host.name, command, timeout) from None
            except (_Ended, SendFailed, LineTooLong, OSError) as error:
                await self._break()
                raise NodeError(
                    f"{self.host.name}: the node agent ({command}) was lost: "
                    f"{plain(str(error), limit=EXCERPT_CHARS, one_line=True)}"
                ) from None
            except NodeError:
                await self._break()
                raise
        return _answer(self.host.name, command, lines, failed)

    async def serving(self) -> None:
        """Once the agent has said it serves; :class:`_Ended` if it never does."""
        size = 0
        while True:
            raw = await self._line()
            size += len(raw) + 1
            if size > MAX_ANSWER_BYTES:
                raise _Ended(f"more than {MAX_ANSWER_BYTES} bytes before it served")
            if _serving_line(raw.decode("utf-8", errors="replace")):
                return

    async def _line(self) -> bytes:
        try:
            return await anext(self._lines)
        except StopAsyncIteration:
            raise _Ended("its output ended") from None
        except (asyncssh.Error, OSError) as error:
            # The connection, not just the channel: asyncssh raises where a channel ends.
            raise _Ended(f"the connection was lost: {error}") from None

    async def _served(self, command: str) -> tuple[list[str], str]:
        """The lines one command printed, and its end line's ``failed``."""
        lines: list[str] = []
        size = 0
        while True:
            raw = await self._line()
            size += len(raw) + 1
            if size > MAX_ANSWER_BYTES:
                raise _garbage(self.host.name, command, f"it sent more than {MAX_ANSWER_BYTES}")
            line = raw.decode("utf-8", errors="replace")
            end = _end_line(line)
            if end is None:
                lines.append(line)
                continue
            status, failed = end
            return lines, failed or f"exit status {status}"

    async def _break(self) -> None:
        self.broken = True
        await self._stream.close()

    async def close(self) -> None:
        async with self._turn:
            if not self.broken:
                self.broken = True
                await self._stream.close()


def _serving_line(line: str) -> bool:
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(document, dict) and isinstance(document.get("serving"), int)


def _end_line(line: str) -> tuple[int, str] | None:
    """``serve``'s line after a command: (exit status, failed), or None for any other line."""
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or "served" not in document:
        return None
    status, failed = document["served"], document.get("failed", "")
    if not isinstance(status, int) or not isinstance(failed, str):
        return None
    return status, failed


_kept: ContextVar[Mapping[str, KeptAgent]] = ContextVar("kept_agents", default=MappingProxyType({}))


@contextlib.asynccontextmanager
async def kept_agents(remote: Transport, hosts: Sequence[HostConfig]) -> AsyncIterator[None]:
    """Within this block (in this task and those it starts), :func:`agent` asks each of
    ``hosts`` through an agent kept running there, started now on all at once. A host where
    none can be started (a transport without sessions, a host not reached) is asked one-shot,
    and says so then, as it would have anyway."""
    started = await asyncio.gather(*(_start_kept(remote, host) for host in hosts))
    kept = {agent.host.name: agent for agent in started if agent is not None}
    token = _kept.set({**_kept.get(), **kept})
    try:
        yield
    finally:
        _kept.reset(token)
        await asyncio.gather(*(agent.close() for agent in kept.values()))


async def _start_kept(remote: Transport, host: HostConfig) -> KeptAgent | None:
    """The agent kept on ``host``, once it said it serves (what a login script prints first
    is passed over); None where it did not start (no such Python, say), so that the host is
    asked one-shot and its failure worded as ever."""
    try:
        stream = await remote.open_session(
            host,
            remote.python(host, "-c", KEPT_AGENT_BOOTSTRAP, "serve"),
            input=kept_agent_input(),
            max_line=MAX_ANSWER_BYTES,
        )
    except RemoteError:
        return None
    agent = KeptAgent(remote, host, stream)
    try:
        await wait_for(agent.serving(), AGENT_TIMEOUT_S)
    except (asyncio.TimeoutError, _Ended, LineTooLong):
        await agent.close()
        return None
    return agent


def described(host: str, error: Exception) -> str:
    """What ``error``, from an operation on ``host``, says, naming the host.

    Anything but a :class:`NodeError` is a bug; it is still that host's alone (the operation
    goes on for the others), and its traceback goes to the log.
    """
    if isinstance(error, NodeError):
        return str(error)
    log.error("%s: unexpected error", host, exc_info=error)
    why = plain(str(error), limit=EXCERPT_CHARS, one_line=True)
    return f"{host}: unexpected {type(error).__name__}: {why}"
