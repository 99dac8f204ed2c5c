"""Grouping what went wrong: :class:`Diagnoser` reads a run's lines and events, groups its
findings into diagnoses and names the rank that failed first.

It reads what the ranks and torchrun wrote (every rank's stdout and stderr, the ``error.json``
files torchrun's ``--log-dir`` keeps, torchrun's own console, the trainer's ``error`` and
``step`` events) and groups what went wrong: the same message from many ranks is one
:class:`~.catalogue.Diagnosis` (pids, addresses, ports, times and ids normalised away), naming
its ranks and hosts. :meth:`Diagnoser.first_failure` names the rank that failed first,
preferring a root cause (a rank killed by a signal, out of memory, a refused connection) over
its consequences (peers that lost their connection to it, collectives that timed out) and over
torchrun's report.

Multi-line messages are followed per (host, rank, stream): a Python traceback ends at its
exception line; torch's ``DistBackendError`` is followed by NCCL's code and, after ``Last
error:``, NCCL's own message (kept as the diagnosis' ``detail``); torchrun's ``ChildFailedError``
block names the root-cause rank, its exit code and the signal that killed it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from ddptui.run.diagnose.catalogue import Category, Diagnosis, Failure, Role
from ddptui.run.diagnose.limits import (
    MAX_ERROR_FILE_CHARS,
    MAX_EXAMPLE_CHARS,
    MAX_GROUPS,
    MAX_HOSTS_PER_GROUP,
    MAX_LINE_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_OBSERVATIONS,
    MAX_RANKS_PER_GROUP,
    MAX_STREAMS,
    MAX_TRACEBACK_LINES,
)
from ddptui.run.diagnose.lines import (
    LAST_ERROR,
    NCCL_CODE,
    RANK_PREFIX,
    TRACEBACK,
    Finding,
    LogLine,
    classify,
    killed,
    normalise,
    python_error,
    strip_prefixes,
)
from ddptui.run.diagnose.torchrun import (
    TORCHRUN_CLOSING,
    TORCHRUN_FAILED,
    Block,
    Entry,
    entry_finding,
)
from ddptui.run.following.events import DoneEvent, ErrorEvent, RankEvent, StartEvent, StepEvent

_Key: TypeAlias = tuple[str, "int | None", str]


@dataclass
class _Group:
    category: Category
    message: str
    cause: str
    example: str
    first_time: float
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    count: int = 0
    detail: str | None = None

    def add(self, host: str, rank: int | None, time: float) -> None:
        self.count += 1
        self.first_time = min(self.first_time, time)
        if rank is not None and len(self.ranks) < MAX_RANKS_PER_GROUP:
            self.ranks.add(rank)
        if len(self.hosts) < MAX_HOSTS_PER_GROUP:
            self.hosts.add(host)


@dataclass(frozen=True)
class _Observation:
    time: float
    order: int
    host: str
    node_rank: int
    rank: int | None
    category: Category
    role: Role
    group: tuple[Category, str] | None


@dataclass
class _RankAttempt:
    """Where a rank's events file is: which attempt, and whether it has started or ended."""

    number: int = 1
    started: bool = False
    ended: bool = False


@dataclass
class _Stream:
    """What one (host, rank, stream) is in the middle of."""

    in_traceback: bool = False
    lines: int = 0
    nccl_group: _Group | None = None
    """A DistBackendError whose NCCL code and ``Last error:`` may follow."""
    expect_last_error: bool = False
    block: Block | None = None
    """torchrun's ChildFailedError block, while inside it."""


class Diagnoser:
    """Reads a run's lines and events; says what went wrong, where first."""

    def __init__(
        self, attempt: int | None = None, owned: Mapping[int, range] | None = None
    ) -> None:
        """``attempt``: read only that attempt's events (1: the first launch; ``None``: all).
        ``owned``: each node rank's global ranks, as the plan made them; torchrun's report on
        one host then names none of another host's ranks (``None``: all are believed).

        A rank's events file keeps every attempt's events. Its attempt ends with its ``done``
        or ``error`` event, or when a second ``start`` comes without either (it was killed).
        """
        self._attempt = attempt
        self._owned = owned
        self._rank_attempts: dict[int, _RankAttempt] = {}
        self._groups: dict[tuple[Category, str], _Group] = {}
        self._streams: dict[_Key, _Stream] = {}
        self._observations: dict[Role, list[_Observation]] = {}
        self._observed: set[tuple[str, int | None, Category, Role]] = set()
        self._ranks: dict[tuple[int, int], int] = {}
        """(node rank, local rank) → global rank, as events and torchrun's report say."""
        self._closed_by_torchrun: set[tuple[str, int]] = set()
        """(host, pid) of every worker torchrun said it signalled to end it."""
        self._order = 0
        self.dropped = 0
        """Findings not kept because :data:`MAX_GROUPS` groups were full."""
        self.unreadable_error_files = 0

    # --- input ----------------------------------------------------------------------------

    def feed(self, line: LogLine) -> None:
        if line.stream == "error.json":
            self._error_file(line)
            return
        text = line.text[:MAX_LINE_CHARS].rstrip("\r\n")
        rank = line.rank
        prefixed = RANK_PREFIX.match(text)
        if prefixed:
            text = text[prefixed.end() :]
            if rank is None:
                rank = int(prefixed.group(1))
        self._line(line, rank, text)

    def feed_event(self, host: str, event: RankEvent) -> None:
        """Take any event, in the rank's order: an ``error`` event or a ``step`` event with a
        non-finite loss is a finding; every event tells which rank runs where, and which
        attempt the rank is in."""
        self._name_rank(event.node_rank, event.local_rank, event.rank)
        if self._attempt is not None and self._attempt_of(event) != self._attempt:
            return
        if isinstance(event, StepEvent) and event.loss is None:
            finding = Finding(Category.NONFINITE_LOSS, "loss is NaN or infinite")
            group = self._record(
                finding,
                host,
                event.node_rank,
                event.rank,
                event.time,
                f"step {event.step}: loss null",
            )
            if group is not None and group.detail is None:
                group.detail = f"first at step {event.step} on rank {event.rank}"
        elif isinstance(event, ErrorEvent) and event.message:
            self._message(host, event.node_rank, event.rank, event.time, event.message, "event")

    def _attempt_of(self, event: RankEvent) -> int:
        seen = self._rank_attempts.get(event.rank)
        if seen is None:
            if len(self._rank_attempts) >= MAX_STREAMS:
                return self._attempt or 1  # past any real world size: a host's nonsense
            seen = self._rank_attempts[event.rank] = _RankAttempt()
        if seen.ended or (isinstance(event, StartEvent) and seen.started):
            seen.number, seen.started, seen.ended = seen.number + 1, False, False
        seen.started = seen.started or isinstance(event, StartEvent)
        seen.ended = isinstance(event, (DoneEvent, ErrorEvent))
        return seen.number

    def _error_file(self, line: LogLine) -> None:
        """torchrun's error file: ``{"message": {"message": "Type: text", "extraInfo": …}}``."""
        message = None
        if len(line.text) <= MAX_ERROR_FILE_CHARS:
            try:
                doc = json.loads(line.text)
            except (ValueError, RecursionError):
                doc = None
            inner = doc.get("message") if isinstance(doc, dict) else None
            if isinstance(inner, dict):
                inner = inner.get("message")
            message = inner if isinstance(inner, str) else None
        if message is None:
            self.unreadable_error_files += 1
            return
        self._message(line.host, line.node_rank, line.rank, line.time, message, "error.json")

    def _message(
        self, host: str, node_rank: int, rank: int | None, time: float, message: str, stream: str
    ) -> None:
        """An exception's message (``Type: text`` and maybe more lines): the lines are read as
        a stream of their own, and the first line is a Python error if nothing else matched."""
        before = self._order
        line = LogLine(host, node_rank, rank, stream, time, "")
        for text in message[: MAX_LINE_CHARS * 4].splitlines()[:64]:
            self._line(line, rank, text[:MAX_LINE_CHARS])
        self._streams.pop((host, rank, stream), None)
        first = message.strip().splitlines()[0] if message.strip() else ""
        if self._order == before and first:
            finding = python_error(first[:MAX_LINE_CHARS]) or Finding(
                Category.PYTHON_ERROR, normalise(first)
            )
            self._record(finding, host, node_rank, rank, time, first)

    # --- one line -----------------------------------------------------------------------

    def _stream(self, key: _Key) -> _Stream:
        state = self._streams.get(key)
        if state is None:
            if len(self._streams) >= MAX_STREAMS:
                # The stream heard from longest ago goes: it is the least likely to continue.
                del self._streams[next(iter(self._streams))]
            state = self._streams[key] = _Stream()
        return state

    def _line(self, line: LogLine, rank: int | None, text: str) -> None:
        state = self._stream((line.host, rank, line.stream))
        if state.nccl_group is not None and self._nccl_continues(state, text):
            return
        if state.block is not None:
            self._block_line(line, state, state.block, text)
            return
        body = strip_prefixes(text.rstrip())
        indented = text[:1].isspace()
        closing = TORCHRUN_CLOSING.search(body)
        if closing is not None and len(self._closed_by_torchrun) < MAX_STREAMS:
            self._closed_by_torchrun.add((line.host, int(closing.group(1) or closing.group(2))))
        if "ChildFailedError" in body and not indented:
            state.in_traceback = False
            state.block = Block()
            return
        if body.startswith(TRACEBACK):
            state.in_traceback, state.lines = True, 0
            return
        if state.in_traceback and indented:
            # A frame: its source line may well say "RendezvousConnectionError" or "OOM".
            self._traceback_line(line, rank, state, text, body)
            return
        finding = classify(text)
        if finding is None and (exited := TORCHRUN_FAILED.search(body)):
            code, local_rank = int(exited.group(1)), int(exited.group(2))
            if code < 0:
                # torchrun's "failed (exitcode: -9) local_rank: 0": a worker killed by a signal.
                finding = killed(-code)
                rank = self._ranks.get((line.node_rank, local_rank), rank)
        if finding is not None:
            group = self._record(finding, line.host, line.node_rank, rank, line.time, text)
            if (
                finding.category.name.startswith("NCCL_")
                and finding.category is not Category.NCCL_WARN
            ):
                state.nccl_group, state.expect_last_error = group, False
            state.in_traceback = False
            return
        if state.in_traceback:
            self._traceback_line(line, rank, state, text, body)

    def _traceback_line(
        self, line: LogLine, rank: int | None, state: _Stream, text: str, body: str
    ) -> None:
        state.lines += 1
        if state.lines > MAX_TRACEBACK_LINES:
            state.in_traceback = False
        elif text and not text[0].isspace():
            # Interleaved output of two processes may put other lines here; only an exception
            # line ends the traceback.
            finding = python_error(body)
            if finding is not None:
                state.in_traceback = False
                self._record(finding, line.host, line.node_rank, rank, line.time, text)

    def _nccl_continues(self, state: _Stream, text: str) -> bool:
        """Whether ``text`` continues the NCCL error before it (code, ``Last error:``, detail)."""
        group = state.nccl_group
        assert group is not None
        body = text.strip()
        if state.expect_last_error:
            state.nccl_group, state.expect_last_error = None, False
            if body and group.detail is None:
                group.detail = body[:MAX_MESSAGE_CHARS]
            return True
        if NCCL_CODE.match(body):
            return True
        last = LAST_ERROR.match(body)
        if last:
            if last.group(1):
                state.nccl_group = None
                group.detail = group.detail or last.group(1)[:MAX_MESSAGE_CHARS]
            else:
                state.expect_last_error = True
            return True
        state.nccl_group = None
        return False

    def _block_line(self, line: LogLine, state: _Stream, block: Block, text: str) -> None:
        read = block.read(text)
        if read.named is not None:
            local_rank, rank = read.named
            self._name_rank(line.node_rank, local_rank, rank)
        if read.ended is not None:
            self._end_entry(line, read.ended)
        if read.done:
            state.block = None

    def _owns(self, node_rank: int, local_rank: int | None, rank: int | None) -> bool:
        """Whether ``rank`` is ``node_rank``'s ``local_rank``-th, as the plan has it."""
        if self._owned is None:
            return True
        ranks = self._owned.get(node_rank, range(0))
        return rank is not None and rank in ranks and local_rank == ranks.index(rank)

    def _name_rank(self, node_rank: int, local_rank: int, rank: int) -> None:
        key = (node_rank, local_rank)
        if not self._owns(node_rank, local_rank, rank):
            return
        if key in self._ranks or len(self._ranks) < MAX_STREAMS:
            self._ranks[key] = rank

    def _end_entry(self, line: LogLine, entry: Entry) -> None:
        """Record the entry just read if it is torchrun's root cause, or a worker killed by a
        signal torchrun did not send.

        torchrun's root cause is the failure with the earliest time, in whole seconds and, for
        a killed worker, when torchrun noticed: a worker SIGKILLed a moment before a second
        ticks over comes after the peer whose collective broke because of it.
        """
        signalled = entry.exitcode is not None and entry.exitcode < 0
        if not entry.root and not (
            signalled and (line.host, entry.pid) not in self._closed_by_torchrun
        ):
            return
        finding = entry_finding(entry)
        example = next((t for t in reversed(entry.traceback) if t), f"exitcode {entry.exitcode}")
        rank = entry.rank if self._owns(line.node_rank, entry.local_rank, entry.rank) else None
        self._record(finding, line.host, line.node_rank, rank, line.time, example, report=True)

    # --- recording ----------------------------------------------------------------------

    def _record(
        self,
        finding: Finding,
        host: str,
        node_rank: int,
        rank: int | None,
        time: float,
        example: str,
        *,
        report: bool = False,
    ) -> _Group | None:
        self._order += 1
        key = (finding.category, finding.message)
        group = self._groups.get(key)
        if group is None and len(self._groups) < MAX_GROUPS:
            group = self._groups[key] = _Group(
                finding.category,
                finding.message,
                finding.cause or finding.category.cause,
                example.strip()[:MAX_EXAMPLE_CHARS],
                time,
            )
        if group is None:
            self.dropped += 1
        else:
            group.add(host, rank, time)
        role = finding.category.role
        if report and role == "root" and finding.category is not Category.KILLED_BY_SIGNAL:
            # torchrun repeating a rank's own error: the rank's lines (if read) came first.
            role = "report"
        if role != "warning":
            self._observe(
                _Observation(
                    time,
                    self._order,
                    host,
                    node_rank,
                    rank,
                    finding.category,
                    role,
                    key if group is not None else None,
                )
            )
        return group

    def _observe(self, obs: _Observation) -> None:
        # Only the first of each rank's failures of a kind can be a first failure; and a flood
        # of one role (a thousand peers losing their connection) never crowds out another.
        seen = (obs.host, obs.rank, obs.category, obs.role)
        kept = self._observations.setdefault(obs.role, [])
        if seen not in self._observed and len(kept) < MAX_OBSERVATIONS:
            self._observed.add(seen)
            kept.append(obs)

    # --- output -------------------------------------------------------------------------

    def first_failure(self) -> Failure | None:
        """The earliest root cause; else torchrun's report; else the earliest consequence.

        A root cause whose line named no rank (torchrun's console) takes the rank torchrun's
        report names on the same host.
        """
        found = self._first()
        if found is None:
            return None
        obs, rank = found
        return Failure(rank, obs.host, obs.node_rank, obs.time, obs.category)

    def _first(self) -> tuple[_Observation, int | None] | None:
        observed = (obs for kept in self._observations.values() for obs in kept)
        by_time = sorted(observed, key=lambda o: (o.time, o.order))
        reports = [o for o in by_time if o.role == "report" and o.rank is not None]
        for role in ("root", "report", "consequence"):
            for obs in by_time:
                # Being told to stop is never where a run failed first: someone else did that.
                if obs.role != role or obs.category is Category.TERMINATED:
                    continue
                if obs.rank is not None:
                    return obs, obs.rank
                return obs, _named_rank(obs, by_time, reports)
        return None

    def diagnoses(self) -> list[Diagnosis]:
        """Every group: the first failure's on top, then root causes, consequences, torchrun's
        reports and warnings, each by time; the generic Python error after the specific ones."""
        found = self._first()
        top = found[0].group if found is not None else None
        order = {"root": 0, "consequence": 1, "report": 2, "warning": 3}

        def rank(group: _Group) -> tuple[int, int, int, float]:
            generic = group.category in (Category.PYTHON_ERROR, Category.CHILD_FAILED)
            first = (group.category, group.message) != top
            return (first, order[group.category.role], generic, group.first_time)

        return [_diagnosis(g) for g in sorted(self._groups.values(), key=rank)]


def _named_rank(
    obs: _Observation, by_time: list[_Observation], reports: list[_Observation]
) -> int | None:
    """The rank of a failure read from a console that does not say: the rank another line
    on that host names for the same category, else the one torchrun's report names."""
    same = (o.rank for o in by_time if o.host == obs.host and o.category is obs.category)
    named = next((rank for rank in same if rank is not None), None)
    if named is None:
        named = next((r.rank for r in reports if r.host == obs.host), None)
    return named


def _diagnosis(group: _Group) -> Diagnosis:
    return Diagnosis(
        category=group.category,
        cause=group.cause,
        fix=group.category.fix,
        message=group.message,
        example=group.example,
        ranks=tuple(sorted(group.ranks)),
        hosts=tuple(sorted(group.hosts)),
        count=group.count,
        first_time=group.first_time,
        detail=group.detail,
    )
