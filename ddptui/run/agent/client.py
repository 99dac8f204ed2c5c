"""The node agent's client: operations on one node of a run (:mod:`ddptui.onhost.agent`).

Each operation is one agent command (:func:`~ddptui.run.agent.call.agent`), its answer read
part by part (:mod:`ddptui.run.agent.answers`): whatever the host printed, an operation returns
a typed value or raises :class:`~ddptui.run.agent.call.NodeError` naming the host, never any
other exception. The code's way to a host is :mod:`ddptui.run.code.upload`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddptui.config.model import HostConfig
from ddptui.layout import code_dir, flight_prefix
from ddptui.remote.files import UnreadableFile
from ddptui.remote.transport import Transport
from ddptui.run.agent import answers
from ddptui.run.agent.answers import MAX_ATTEMPT, AttemptStatus
from ddptui.run.agent.call import AGENT_TIMEOUT_S, NodeError, agent
from ddptui.run.checkpoints import Held
from ddptui.run.evidence.flight import MAX_DUMP_BYTES
from ddptui.run.evidence.stacks import RankStack
from ddptui.untrusted import count

DUMP_S = 15.0
"""How long a host's agent waits for its ranks' stacks: py-spy takes seconds on a busy host."""


async def list_files(
    remote: Transport, host: HostConfig, directory: str, globs: Sequence[str]
) -> dict[str, dict[str, Held]]:
    """Glob → path → the file as ``host`` holds it, for the regular files each glob matches in
    ``directory`` (relative paths inside it only)."""
    answer = await agent(remote, host, "list-files", directory, sent=list(globs))
    return answer.take("files", lambda value: answers.listed_files(value, globs))


async def start(
    remote: Transport,
    host: HostConfig,
    run_dir: str,
    attempt: int,
    env: Mapping[str, str],
    argv: Sequence[str],
) -> int:
    """Start ``argv`` detached on ``host``; its process group id."""
    answer = await agent(
        remote,
        host,
        "start",
        run_dir,
        code_dir(run_dir),
        str(attempt),
        *argv,
        sent=dict(env),
    )
    return answer.take("pgid", answers.pid)


async def status(
    remote: Transport,
    host: HostConfig,
    run_dir: str,
    *,
    wait: float = 0.0,
    linger: float | None = None,
    attempts: int | None = None,
) -> list[AttemptStatus]:
    """Every attempt of the run on ``host``: process group, liveness, processes, exit status.

    With ``wait``, the answer comes once no process of the run is left on the host, or (with
    ``linger``) none of what is left has been a rank's for ``linger`` seconds, or after
    ``wait`` seconds. ``attempts``: how many the run record knows; a host that reports a
    later one answered garbage.
    """
    if wait > 0:
        command = ["wait", run_dir, f"{wait:g}"]
        if linger is not None:
            command.append(f"{linger:g}")
        answer = await agent(remote, host, *command, timeout=wait + AGENT_TIMEOUT_S)
    else:
        answer = await agent(remote, host, "status", run_dir)
    latest = MAX_ATTEMPT if attempts is None else attempts
    return answer.take("attempts", lambda value: answers.attempts(value, latest))


async def send_signal(
    remote: Transport,
    host: HostConfig,
    run_dir: str,
    name: str,
    *,
    attempts: int | None = None,
) -> list[str]:
    """Send SIGname to every live process of the run on ``host``; the names of those it reached.

    ``attempts`` as for :func:`status`.
    """
    answer = await agent(remote, host, "signal", run_dir, name)
    latest = MAX_ATTEMPT if attempts is None else attempts
    return answer.take("signalled", lambda value: answers.signalled(value, latest))


@dataclass(frozen=True)
class HostDump:
    """What one host's agent answered to ``dump``."""

    attempt: int
    stacks: list[RankStack]
    flight: dict[int, int]
    """Global rank → size of its flight-recorder dump in the node's directory."""


async def dump(
    remote: Transport, host: HostConfig, node_rank: int, run_dir: str, *, attempts: int
) -> HostDump:
    """The latest attempt on ``host``, each of its ranks' Python stacks (or why not), and the
    flight-recorder dumps there."""
    answer = await agent(remote, host, "dump", run_dir, f"{DUMP_S:g}", timeout=DUMP_S + 15)
    return HostDump(
        answer.take("attempt", lambda value: count(value, attempts)),
        answer.take("ranks", lambda value: answers.rank_stacks(value, host.name, node_rank)),
        answer.take("flight", answers.flight_sizes),
    )


async def read_flight(
    remote: Transport, host: HostConfig, run_dir: str, rank: int, *, max_bytes: int
) -> bytes:
    """Rank ``rank``'s flight-recorder dump on ``host``, as it is there, at most
    ``max_bytes`` (and never more than :data:`~ddptui.run.evidence.flight.MAX_DUMP_BYTES`)."""
    path = flight_prefix(run_dir) + str(rank)
    try:
        return await remote.read_file(
            host, path, max_bytes=min(max_bytes, MAX_DUMP_BYTES), timeout=AGENT_TIMEOUT_S
        )
    except UnreadableFile as error:
        raise NodeError(f"{host.name}: the flight-recorder dump {path}: {error}") from None


async def request(remote: Transport, host: HostConfig, run_dir: str, what: str) -> None:
    """Create ``control/<what>`` for the trainer (``stop``, ``save`` or ``rescue``)."""
    answer = await agent(remote, host, "control", run_dir, what)
    if answer.document.get("created") != what:
        raise answer.garbage()


async def free_port(remote: Transport, host: HostConfig, wanted: int = 0) -> int:
    """``wanted`` if it is free on ``host`` now (else :class:`NodeError`), or any free port."""
    answer = await agent(remote, host, "free-port", str(wanted))
    port = count(answer.document.get("port"), 65535)
    # Any other port than the one asked for would move the run's rendezvous where the host says.
    if not port or (wanted and port != wanted):
        raise answer.garbage()
    return port
