"""The parts of the node agent's answers, read (pure).

Each reader takes one part of an answer, any JSON value, and returns its typed value, or None
when it is not what :mod:`ddptui.onhost.agent` sends: the caller then holds the whole answer
garbage (:meth:`~ddptui.run.agent.call.Answer.take`). Every number is range-checked, every text
made plain and cut, every list capped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.run.checkpoints import MAX_LISTED, Held, carriable, matches
from ddptui.run.evidence.stacks import RankStack, parse_stacks
from ddptui.run.following.progress import MAX_RANKS
from ddptui.untrusted import count, finite, plain, whole

PID_LIMIT = 1 << 22
"""Linux's PID_MAX_LIMIT: ``kernel.pid_max`` cannot be set above it, so no process nor process
group has an id this large. 0 and 1 are not ours either: 1 is init, and ``kill`` reads 0 and
-1 as "my group" and "every process"."""
MAX_ATTEMPT = 10**9 - 1
"""The highest attempt number read when the caller does not know the record's."""
MAX_PROCESSES = 256
"""Processes kept of an attempt's status or of a signal's answer: enough to name a node's ranks
and their helpers."""
MAX_STACK_CHARS = 64 * 1024
"""Per rank, as the agent caps it."""


@dataclass(frozen=True)
class AttemptStatus:
    """One attempt's processes on one host, as the agent saw them."""

    attempt: int
    pgid: int | None
    alive: bool
    exit: int | None
    processes: tuple[tuple[int, str], ...]
    ranks: int | None = None
    """How many of ``processes`` are ranks' (a rank and what it started); None: not said."""


def attempts(value: Any, latest: int) -> list[AttemptStatus] | None:
    """Every attempt's status, by attempt, none later than ``latest``."""
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
        ranks = fields.get("ranks")
        if (
            (pgid is not None and pid(pgid) is None)
            or (exit_status is not None and count(exit_status, 255) is None)
            or not isinstance(alive, bool)
            or processes is None
            or (ranks is not None and count(ranks, PID_LIMIT) is None)
        ):
            return None
        found.append(AttemptStatus(number, pgid, alive, exit_status, processes, ranks))
    return sorted(found, key=lambda item: item.attempt)


def _processes(value: Any) -> tuple[tuple[int, str], ...] | None:
    if not isinstance(value, list):
        return None
    processes = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2):
            return None
        number, name = pid(item[0]), item[1]
        if number is None or not isinstance(name, str):
            return None
        processes.append((number, name))
    return tuple((number, _name(name)) for number, name in processes[:MAX_PROCESSES])


def signalled(value: Any, latest: int) -> list[str] | None:
    """The names of the processes a signal reached, of attempts up to ``latest``."""
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


def rank_stacks(value: Any, host: str, node_rank: int) -> list[RankStack] | None:
    """Each rank's Python stacks on ``host`` (node ``node_rank``), or why there are none."""
    if not isinstance(value, list):
        return None
    stacks = []
    for item in value[:MAX_PROCESSES]:
        if not isinstance(item, dict):
            return None
        rank, number = count(item.get("rank"), MAX_RANKS - 1), pid(item.get("pid"))
        via, text = item.get("via"), item.get("text")
        error, note = item.get("error"), item.get("note")
        if rank is None or number is None or via not in ("", "py-spy", "faulthandler"):
            return None
        if not (isinstance(text, str) and isinstance(error, str) and isinstance(note, str)):
            return None
        text = plain(text[:MAX_STACK_CHARS])
        stacks.append(
            RankStack(
                host,
                node_rank,
                rank,
                number,
                via,
                parse_stacks(text),
                plain(error, limit=500, one_line=True),
                plain(note, limit=500, one_line=True),
                text,
            )
        )
    return stacks


def flight_sizes(value: Any) -> dict[int, int] | None:
    """Global rank → the size of its flight-recorder dump."""
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


def listed_files(value: Any, globs: Sequence[str]) -> dict[str, dict[str, Held]] | None:
    """Glob → relative path → the file as the host holds it, for each of ``globs``.

    A path no copy could carry (:func:`~ddptui.run.checkpoints.carriable`: too long, or a
    control character or a byte that is not UTF-8 in a name, which the lister can list) is
    left out. Any other path the lister could not have listed under its glob
    (:func:`~ddptui.run.checkpoints.matches`: outside the directory, not in normal form, or
    not matched) makes the whole answer garbage: that host is lying or broken, and the resume
    stops naming it rather than weigh the rest of its word.
    """
    if not isinstance(value, dict):
        return None
    listed: dict[str, dict[str, Held]] = {}
    for glob in globs:
        entries = value.get(glob)
        if not isinstance(entries, list) or len(entries) > MAX_LISTED:
            return None
        listed[glob] = {}
        for entry in entries:
            held = _held(entry)
            if held is None:
                return None
            path, file = held
            if not carriable(path):
                continue
            if not matches(path, glob):
                return None
            listed[glob][path] = file
    return listed


def _held(entry: object) -> tuple[str, Held] | None:
    if not isinstance(entry, list) or len(entry) != 3:
        return None
    path, size, mtime = entry
    if not isinstance(path, str):
        return None
    size, when = count(size, 1 << 50), finite(mtime)
    if size is None or when is None:
        return None
    # To the millisecond: a copy's mtime is set from this figure, and must read back equal.
    return path, Held(size, round(when, 3))


def pid(value: Any) -> int | None:
    """A process or process group id that can be one of the run's."""
    number = count(value, PID_LIMIT - 1)
    return number if number is not None and number > 1 else None


def _name(name: str) -> str:
    return plain(name, limit=64, one_line=True)
