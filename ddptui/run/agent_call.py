"""One command of the node agent (:mod:`ddptui.onhost.agent`) on one host, over a
:class:`~ddptui.remote.transport.Transport`: its one JSON answer, or the error that names the
host.

The agent is sent to the host's Python and its answer read with a byte cap and a deadline.
What comes back is the host's word: :func:`agent` returns it as a JSON object or raises
:class:`NodeError` (:class:`GarbledAnswer`, quoting the answer, when the host answered
something else), never any other exception; :meth:`Answer.take` reads a part of it the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ddptui.config.model import HostConfig
from ddptui.errors import DdptuiError
from ddptui.remote.programs import agent_program
from ddptui.remote.transport import Transport
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
    JSON answer. Raises :class:`NodeError`."""
    command = args[0]
    result = await remote.run(
        host,
        remote.python(host, "-", *args),
        input=agent_program(sent),
        timeout=timeout,
        max_stdout=MAX_ANSWER_BYTES,
    )
    if result.reach is not None:
        raise NodeError(f"{host.name}: {plain(result.reach.detail)}")
    if result.timed_out:
        raise NodeError(f"{host.name}: the node agent ({command}) did not answer in {timeout:g} s")
    if result.overflow is not None:
        raise _garbage(host.name, command, f"it {result.overflow}")
    lines = result.stdout.strip().splitlines()
    if not lines:
        why = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.exit_status}"]
        excerpt = plain(why[0], limit=EXCERPT_CHARS, one_line=True)
        raise NodeError(f"{host.name}: the node agent ({command}) failed: {excerpt}")
    # The last line: a login script may print before the agent does.
    line = lines[-1]
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):
        # ValueError also covers integers of more than 4300 digits.
        raise _garbage(host.name, command, line) from None
    if not isinstance(document, dict):
        raise _garbage(host.name, command, line)
    if "error" in document:
        error = document["error"]
        if not isinstance(error, str):
            raise _garbage(host.name, command, line)
        raise NodeError(f"{host.name}: {plain(error, limit=2000)}")
    return Answer(host.name, command, line, document)


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
