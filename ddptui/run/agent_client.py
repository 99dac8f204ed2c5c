"""The node agent's client: operations on one node of a run (:mod:`ddptui.onhost.agent`).

Each call sends the agent to the host's Python and reads its one JSON answer, with a byte cap
and a deadline. The answer comes from a host, so every part of it is checked against what the
agent sends (types, ranges, the record's attempts): whatever the host printed, a call returns a
typed value or raises :class:`NodeError` naming the host (:class:`GarbledAnswer`, quoting the
answer, when the host answered something else), never any other exception.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.config.model import HostConfig
from ddptui.errors import DdptuiError
from ddptui.remote.files import UnreadableFile
from ddptui.remote.programs import agent_program
from ddptui.remote.transport import Transport
from ddptui.run.checkpoints import MAX_LISTED, Held
from ddptui.run.code import MIB, CodeTree
from ddptui.run.flight import MAX_DUMP_BYTES
from ddptui.run.layout import code_dir, flight_prefix
from ddptui.run.progress import MAX_RANKS
from ddptui.run.stacks import RankStack, parse_stacks
from ddptui.untrusted import count, finite, plain, whole

AGENT_TIMEOUT_S = 30.0
MAX_ANSWER_BYTES = 1 << 20
"""What an agent command may print: its answer is one line far shorter, and a host that floods
is hung up on at this much."""

DUMP_S = 15.0
"""How long a host's agent waits for its ranks' stacks: py-spy takes seconds on a busy host."""
MAX_STACK_CHARS = 64 * 1024
"""Per rank, as the agent caps it."""

log = logging.getLogger(__name__)


class NodeError(DdptuiError):
    """An operation on a node failed; the message names the host."""


class GarbledAnswer(NodeError):
    """The host answered, but not as the node agent does: its processes are not known."""


PID_LIMIT = 1 << 22
"""Linux's PID_MAX_LIMIT: ``kernel.pid_max`` cannot be set above it, so no process nor process
group has an id this large. 0 and 1 are not ours either: 1 is init, and ``kill`` reads 0 and
-1 as "my group" and "every process"."""
MAX_ATTEMPT = 10**9 - 1
"""The highest attempt number read when the caller does not know the record's."""
EXCERPT_CHARS = 120
"""What a :class:`GarbledAnswer` quotes of the answer."""
MAX_PROCESSES = 256
"""Processes kept of an attempt's status or of a signal's answer: enough to name a node's ranks
and their helpers."""


@dataclass(frozen=True)
class AttemptStatus:
    """One attempt's processes on one host, as the agent saw them."""

    attempt: int
    pgid: int | None
    alive: bool
    exit: int | None
    processes: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class Answer:
    """The node agent's JSON object, and the line it came in (to quote when it is garbage)."""

    host: str
    command: str
    line: str
    document: dict[str, Any]

    def garbage(self) -> GarbledAnswer:
        return _garbage(self.host, self.command, self.line)


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


UPLOAD_PIECE = 8 * MIB
"""Content sent per agent call: base64 in the agent's source, so a piece costs about 11 MB of
source for the host's Python to read, and a call's overhead is paid once per piece."""
STAGE_TIMEOUT_S = 300.0
"""Laying out and verifying 100 MiB of code on a slow disk takes seconds; this is plenty."""


async def upload_code(remote: Transport, host: HostConfig, cache_dir: str, tree: CodeTree) -> int:
    """Send the host's cache of code contents what it lacks of ``tree``; the bytes sent."""
    contents = {file.sha256: file for file in tree.files}
    answer = await agent(remote, host, "have", cache_dir, sent=sorted(contents))
    missing = answer.document.get("missing")
    if not isinstance(missing, list) or not all(
        isinstance(digest, str) and digest in contents for digest in missing
    ):
        raise answer.garbage()
    pieces: list[list[object]] = []
    pending = sent = 0
    for digest in missing:
        file = contents[digest]
        read = hashlib.sha256()
        try:
            with file.source.open("rb") as handle:
                offset = 0
                while True:
                    room = UPLOAD_PIECE - pending
                    data = handle.read(room)
                    read.update(data)
                    # A short read is the end: the last piece says the size, which ends it.
                    end = len(data) < room
                    if end and read.hexdigest() != digest:
                        # The host would refuse it as damaged: say what happened instead.
                        raise NodeError(
                            f"{file.source} changed while it was uploaded (a log, or a file "
                            "being written?): leave it out with [job] exclude or .gitignore"
                        )
                    encoded = base64.b64encode(data).decode("ascii")
                    offset += len(data)
                    pieces.append([digest, offset - len(data), encoded, offset if end else None])
                    pending += len(data)
                    if pending >= UPLOAD_PIECE:
                        await _put(remote, host, cache_dir, pieces)
                        sent, pending, pieces = sent + pending, 0, []
                    if end:
                        break
        except OSError as error:
            raise NodeError(f"cannot read {file.source}: {error.strerror}") from None
    if pieces:
        await _put(remote, host, cache_dir, pieces)
        sent += pending
    return sent


async def _put(
    remote: Transport, host: HostConfig, cache_dir: str, pieces: list[list[object]]
) -> None:
    answer = await agent(remote, host, "put", cache_dir, sent=pieces, timeout=STAGE_TIMEOUT_S)
    if count(answer.document.get("stored"), len(pieces)) != len(pieces):
        raise answer.garbage()


async def stage(
    remote: Transport, host: HostConfig, cache_dir: str, run_dir: str, tree: CodeTree
) -> bool:
    """Lay ``tree`` out in the run's code directory from the host's cache, verified and renamed
    into place; True when a host sharing the workdir had staged it already."""
    manifest = tree.manifest()
    answer = await agent(
        remote,
        host,
        "stage",
        cache_dir,
        code_dir(run_dir),
        sent=manifest,
        timeout=STAGE_TIMEOUT_S,
    )
    if count(answer.document.get("staged"), len(manifest)) != len(manifest):
        raise answer.garbage()
    return answer.document.get("shared") is True


async def list_files(
    remote: Transport, host: HostConfig, directory: str, globs: Sequence[str]
) -> dict[str, dict[str, Held]]:
    """Glob → path → the file as ``host`` holds it, for the regular files each glob matches in
    ``directory`` (relative paths inside it only)."""
    answer = await agent(remote, host, "list-files", directory, sent=list(globs))
    found = answer.document.get("files")
    if not isinstance(found, dict):
        raise answer.garbage()
    listed: dict[str, dict[str, Held]] = {}
    for glob in globs:
        entries = found.get(glob)
        if not isinstance(entries, list) or len(entries) > MAX_LISTED:
            raise answer.garbage()
        listed[glob] = {}
        for entry in entries:
            held = _held(entry)
            if held is None:
                raise answer.garbage()
            listed[glob][held[0]] = held[1]
    return listed


def _held(entry: object) -> tuple[str, Held] | None:
    if not isinstance(entry, list) or len(entry) != 3:
        return None
    path, size, mtime = entry
    if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
        return None
    size, when = count(size, 1 << 50), finite(mtime)
    if size is None or when is None:
        return None
    # To the millisecond: a copy's mtime is set from this figure, and must read back equal.
    return path, Held(size, round(when, 3))


async def put_record(remote: Transport, host: HostConfig, run_dir: str, text: str) -> None:
    """Copy the run record to the host's run directory (``run.toml``)."""
    answer = await agent(remote, host, "write", posixpath.join(run_dir, "run.toml"), sent=text)
    if count(answer.document.get("written"), len(text)) != len(text):
        raise answer.garbage()


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
        json.dumps(dict(env)),
        *argv,
    )
    pgid = _pid(answer.document.get("pgid"))
    if pgid is None:
        raise answer.garbage()
    return pgid


async def status(
    remote: Transport,
    host: HostConfig,
    run_dir: str,
    *,
    wait: float = 0.0,
    attempts: int | None = None,
) -> list[AttemptStatus]:
    """Every attempt of the run on ``host``: process group, liveness, processes, exit status.

    With ``wait``, the answer comes once no process of the run is left on the host, or after
    ``wait`` seconds. ``attempts``: how many the run record knows; a host that reports a later
    one answered garbage.
    """
    if wait > 0:
        command = ["wait", run_dir, f"{wait:g}"]
        answer = await agent(remote, host, *command, timeout=wait + AGENT_TIMEOUT_S)
    else:
        answer = await agent(remote, host, "status", run_dir)
    found = _attempts(
        answer.document.get("attempts"), MAX_ATTEMPT if attempts is None else attempts
    )
    if found is None:
        raise answer.garbage()
    return found


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
    reached = _signalled(
        answer.document.get("signalled"), MAX_ATTEMPT if attempts is None else attempts
    )
    if reached is None:
        raise answer.garbage()
    return reached


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
    attempt = count(answer.document.get("attempt"), attempts)
    found = _rank_stacks(answer.document.get("ranks"), host.name, node_rank)
    flight = _flight(answer.document.get("flight"))
    if attempt is None or found is None or flight is None:
        raise answer.garbage()
    return HostDump(attempt, found, flight)


async def read_flight(
    remote: Transport, host: HostConfig, run_dir: str, rank: int, *, max_bytes: int
) -> bytes:
    """Rank ``rank``'s flight-recorder dump on ``host``, as it is there, at most
    ``max_bytes`` (and never more than :data:`~ddptui.run.flight.MAX_DUMP_BYTES`)."""
    path = flight_prefix(run_dir) + str(rank)
    try:
        return await remote.read_file(
            host, path, max_bytes=min(max_bytes, MAX_DUMP_BYTES), timeout=AGENT_TIMEOUT_S
        )
    except UnreadableFile as error:
        raise NodeError(f"{host.name}: the flight-recorder dump {path}: {error}") from None


async def request(remote: Transport, host: HostConfig, run_dir: str, what: str) -> None:
    """Create ``control/<what>`` for the trainer (``stop`` or ``save``)."""
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


# --- the parts of an answer: each one its value, or None when it is not what the agent sends ---


def _attempts(value: Any, latest: int) -> list[AttemptStatus] | None:
    if not isinstance(value, dict):
        return None
    found = []
    for key, fields in value.items():
        number = whole(key)
        if number is None or not 1 <= number <= latest or not isinstance(fields, dict):
            return None
        pgid, exit_status = fields.get("pgid"), fields.get("exit")
        alive = fields.get("alive")
        processes = _processes(fields.get("processes"))
        if (
            (pgid is not None and _pid(pgid) is None)
            or (exit_status is not None and count(exit_status, 255) is None)
            or not isinstance(alive, bool)
            or processes is None
        ):
            return None
        found.append(AttemptStatus(number, pgid, alive, exit_status, processes))
    return sorted(found, key=lambda item: item.attempt)


def _processes(value: Any) -> tuple[tuple[int, str], ...] | None:
    if not isinstance(value, list):
        return None
    processes = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2):
            return None
        pid, name = _pid(item[0]), item[1]
        if pid is None or not isinstance(name, str):
            return None
        processes.append((pid, name))
    return tuple((pid, _name(name)) for pid, name in processes[:MAX_PROCESSES])


def _signalled(value: Any, latest: int) -> list[str] | None:
    if not isinstance(value, list):
        return None
    reached = []
    for item in value:
        if not isinstance(item, dict):
            return None
        # Attempt 0: the agent's word for a process of the run that lost its attempt mark.
        attempt, names = count(item.get("attempt"), latest), item.get("processes")
        if attempt is None or not isinstance(names, list):
            return None
        if not all(isinstance(name, str) for name in names):
            return None
        reached += names
    return [_name(name) for name in reached[:MAX_PROCESSES]]


def _rank_stacks(value: Any, host: str, node_rank: int) -> list[RankStack] | None:
    if not isinstance(value, list):
        return None
    stacks = []
    for item in value[:MAX_PROCESSES]:
        if not isinstance(item, dict):
            return None
        rank, pid = count(item.get("rank"), MAX_RANKS - 1), _pid(item.get("pid"))
        via, text = item.get("via"), item.get("text")
        error, note = item.get("error"), item.get("note")
        if rank is None or pid is None or via not in ("", "py-spy", "faulthandler"):
            return None
        if not (isinstance(text, str) and isinstance(error, str) and isinstance(note, str)):
            return None
        text = plain(text[:MAX_STACK_CHARS])
        stacks.append(
            RankStack(
                host,
                node_rank,
                rank,
                pid,
                via,
                parse_stacks(text),
                plain(error, limit=500, one_line=True),
                plain(note, limit=500, one_line=True),
                text,
            )
        )
    return stacks


def _flight(value: Any) -> dict[int, int] | None:
    if not isinstance(value, list):
        return None
    found = {}
    for item in value[:MAX_PROCESSES]:
        if not (isinstance(item, list) and len(item) == 2):
            return None
        rank, size = count(item[0], MAX_RANKS - 1), count(item[1], 2**62)
        if rank is None or size is None:
            return None
        found[rank] = size
    return found


def _pid(value: Any) -> int | None:
    pid = count(value, PID_LIMIT - 1)
    return pid if pid is not None and pid > 1 else None


def _name(name: str) -> str:
    return plain(name, limit=64, one_line=True)
