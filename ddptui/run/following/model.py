"""The run's model: a run's state as the followed lines tell it, for viewers and the supervisor.

:class:`RunModel` is pure (no I/O; both clocks injected): it folds the follower's updates
(:mod:`ddptui.run.following.updates`) into per-node and per-rank state
(:mod:`ddptui.run.following.state`), the diagnosis of error lines and bounded log tails, and says
what a silent host means (:meth:`RunModel.silence`). It judges nothing: how an attempt ended,
whether it hangs and which ranks straggle are the supervisor's to say
(:mod:`ddptui.run.supervisor.judging`); viewers keep one to render what they are sent, and show
the supervisor's :class:`~ddptui.run.following.state.Judgement`.

Every line comes from a host, and a host speaks only for what the plan gave it: its own ranks
(``node_rank``, local ranks below its ``nproc``, global ranks from its ``base_rank``) and its
own node's files. An event of another rank (or one that says it runs elsewhere, or in another
world), a line of a rank or file the host does not have, and a heartbeat's word on another
host's ranks are not taken: they are counted (:attr:`RunModel.refused`). An event's times
are no later than its host's clock can say as it arrives (:mod:`ddptui.run.following.host_clocks`).
So what a model keeps is bounded by the plan, whatever a host sends:

- log tails: :data:`~ddptui.run.following.state.LOG_TAIL_LINES` lines of at most
  :data:`~ddptui.run.following.state.LOG_LINE_CHARS` characters for each of the host's ranks and its
  torchrun: ``(nproc + 1) × 2,000 × 1,024`` characters and about 250 bytes of objects a line,
  21 MiB for a host of 8 ranks (measured), 1.3 GiB for 64 such hosts; up to four times the
  characters' part where a host's text is outside the Basic Multilingual Plane (Python then
  keeps four bytes a character): 75 MiB a host, 4.7 GiB;
- each rank's progress: a loss curve of :data:`~ddptui.run.following.progress.LOSS_POINTS` points
  (about 120 KiB; 60 MiB for 512 ranks) and, reading ``Steps.LATEST``, one step event not read
  yet (at most 16 K characters);
- the diagnosis (:mod:`ddptui.run.diagnose.limits`): the streams a host's lines can open are its
  ranks' stdout and stderr and its torchrun's console (per rank it names, its own only), each
  holding at most one entry of torchrun's report (about 66 KiB): 1.6 MiB for 8 ranks, 105 MiB
  for 64 such hosts; the groups, whatever the hosts, at most 52 MiB (measured).
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ddptui.run.diagnose import Category, Diagnoser, Diagnosis, LogLine
from ddptui.run.diagnose.lines import RANK_PREFIX
from ddptui.run.following.bands import LossBands
from ddptui.run.following.events import (
    DoneEvent,
    EventReader,
    PhaseEvent,
    RankEvent,
    StartEvent,
    StepEvent,
    parse_event,
)
from ddptui.run.following.host_clocks import HostClocks
from ddptui.run.following.logloss import LossReader
from ddptui.run.following.progress import RankProgress, RankState, RunProgress
from ddptui.run.following.rank_launches import RankLaunches
from ddptui.run.following.state import (
    LOG_LINE_CHARS,
    LOG_TAIL_LINES,
    Hang,
    Judgement,
    NodeState,
    RankLog,
    Silence,
    Steps,
    Straggler,
)
from ddptui.run.following.updates import FileLine, Heartbeat, HostBack, HostSilent, Update
from ddptui.run.record import RunRecord, RunState
from ddptui.run.timeline import Timeline
from ddptui.untrusted import plain, plain_error, whole

PEERS_IDLE_MIN_S = 10.0
PEERS_IDLE_STEP_TIMES = 3.0
"""While a host is silent, the hosts that answer count as stepping until this many of the
slowest rank's step-event intervals (and at least ``PEERS_IDLE_MIN_S``) pass without a step."""
HEARD_LATELY_S = 5.0
"""More than two of the agent's 2 s heartbeats: a host heard from within this still answers."""
STOP_CLOCK_SLACK_S = 1.0
"""How far a host's clock may be behind the head's for what the stop caused there to be its."""
MAX_FAULTS = 64
"""Faults kept between two :meth:`RunModel.take_faults`; past them only counted."""
_STEP = re.compile(r'"type"\s*:\s*"step"')
"""A step event's type, as JSON writers put it: a line without it is read, whatever it is."""


@dataclass(frozen=True)
class Fault:
    """An update the model set aside, since taking it raised."""

    line: FileLine | None
    """The line, when it was one: what a replay of the journal skips."""
    words: str

    @classmethod
    def of(cls, update: Update, error: Exception) -> Fault:
        if isinstance(update, FileLine):
            where = f"a line from {update.host} ({update.path} to byte {update.offset})"
        else:
            where = f"a {type(update).__name__.lower()} from {update.host}"
        line = update if isinstance(update, FileLine) else None
        return cls(line, f"{plain(where, one_line=True)}: {plain_error(error)}")


class RunModel:
    """The state of one attempt of a run, built from followed lines."""

    def __init__(
        self,
        record: RunRecord,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        *,
        steps: Steps = Steps.EVERY,
    ) -> None:
        """``clock`` times what arrives (monotonic); ``wall`` dates it (the ranks' clock);
        ``steps``: how much of the step events to read (see :class:`Steps`)."""
        self.steps = steps
        self._latest: dict[int, FileLine] = {}
        """Rank → the line of its latest step event not read yet (``LATEST``)."""
        self._faults: list[Fault] = []
        self.faulted = 0
        """Updates set aside, because taking them raised."""
        self._clock = clock
        self._wall = wall
        self.heard_at: dict[str, float] = {}
        """Host → when its latest line or heartbeat arrived."""
        self.progress = RunProgress()
        self.progress.world_size = record.world_size
        self.bands = LossBands()
        """The loss across ranks step by step (read only with ``Steps.EVERY``: a chart's)."""
        self.events = EventReader()
        self._starts: dict[int, int] = {}
        """Rank → start events seen: the attempt its latest events belong to."""
        self._losses = LossReader(record.loss_pattern)
        self.lines = 0
        self.refused = 0
        """Lines, events and heartbeat ranks a host sent of ranks or files not its own."""
        self.next_attempt(record)

    def next_attempt(self, record: RunRecord) -> None:
        """Watch ``record``'s latest attempt from now on: what belongs to one attempt starts
        afresh; the ranks' progress (their events span attempts) carries on."""
        self.record = record
        self.attempt = record.attempt.number if record.attempts else 1
        self._clocks = HostClocks(record.nodes, self._wall)
        self._began = self._clock()
        for rank in self.progress.ranks:
            self._not_started(rank)
        self._stepped_at: dict[str, float] = {}
        """Host → when its latest step event of this attempt arrived."""
        self._phased_at: dict[str, float] = {}
        """Host → when its latest phase event of this attempt arrived."""
        self._said_at: dict[str, float] = {}
        """Host → when its ranks' latest output line of this attempt arrived."""
        self.diagnoser = Diagnoser(
            attempt=self.attempt,
            owned={node.node_rank: record.ranks_of(node) for node in record.nodes},
        )
        self.nodes: dict[str, NodeState] = {}
        self.progress.world_size = record.world_size
        self.progress.keep_only(range(record.world_size))
        for node in record.nodes:
            ranks = record.ranks_of(node)
            self.nodes[node.host] = NodeState.planned(record, node)
            for local, global_rank in enumerate(ranks):
                self.progress.expect(node.host, node.node_rank, local, global_rank)
        self.logs: dict[int, deque[RankLog]] = {}
        self.attempt_steps = 0
        """Step events of this attempt (from ranks whose start events say they are in it)."""
        self.stopped_ranks: set[int] = set()
        """Ranks that said, in this attempt, that they stopped on request."""
        self.completed_ranks: set[int] = set()
        """Ranks that said, in this attempt, that they completed their training."""
        self.launches = RankLaunches()
        """What this attempt's ranks told of their launch: the timeline's stamps of theirs."""

    def apply(self, update: Update) -> None:
        """Take ``update``. Never raises: an update whose taking raises (a bug that a host's
        value met) is set aside, and kept for :meth:`take_faults`; the model goes on with the
        next, since the same update would raise again wherever it was replayed."""
        try:
            self._apply(update)
        except Exception as error:
            self._fault(update, error)

    def take_faults(self) -> list[Fault]:
        """The updates set aside since the last call (at most :data:`MAX_FAULTS` of them)."""
        faults, self._faults = self._faults, []
        return faults

    def _fault(self, update: Update, error: Exception) -> None:
        self.faulted += 1
        if len(self._faults) < MAX_FAULTS:
            self._faults.append(Fault.of(update, error))

    def _apply(self, update: Update) -> None:
        if isinstance(update, (FileLine, Heartbeat)):
            self.heard_at[update.host] = self._clock()
        if isinstance(update, FileLine):
            self.lines += 1
            self._line(update)
        elif isinstance(update, Heartbeat):
            node = self.nodes.get(update.host)
            if node is not None:
                alive = update.groups.get(self.attempt)
                self.refused += node.beat(alive, update.sample, update.time, self._clock())
                if node.alive:
                    for rank in node.sample.get("ranks") or ():
                        self.progress.process_running(rank)
        elif isinstance(update, HostSilent):
            node = self.nodes.get(update.host)
            if node is not None:
                node.silent = f"no answer for {update.seconds:.0f} s ({update.reason})"
        elif isinstance(update, HostBack):
            node = self.nodes.get(update.host)
            if node is not None:
                node.silent = None

    def _line(self, line: FileLine) -> None:
        node = self.nodes.get(line.host)
        if node is None:
            return
        named = node.files.of(line.path)
        if named is None:
            self.refused += 1
            return
        if named.kind == "events":
            rank = named.number
            if self.steps is not Steps.EVERY and _STEP.search(line.text):
                if self._starts.get(rank) == self.attempt and self.launches.awaits_first_step(rank):
                    event = parse_event(line.text)
                    if event is not None:
                        self.launches.told(rank, self._clocks.dated(line.host, event))
                if self.steps is Steps.LATEST:
                    self._latest[rank] = line
                    self._stepped(line.host, rank)
                return
            pending = self._latest.pop(rank, None)
            if pending is not None:
                self._pending_event(node, rank, pending)
            self._event(node, rank, line.text)
        elif named.number != self.attempt:
            return
        elif named.local is not None:
            self._said_at[line.host] = self._clock()
            rank = node.base_rank + named.local
            stream = named.stream or "error.json"
            self.logs.setdefault(rank, deque(maxlen=LOG_TAIL_LINES)).append(
                RankLog(rank, stream, line.text[:LOG_LINE_CHARS], self._wall())
            )
            if rank not in self._starts:
                # A rank that writes no events: its loss as its output says it, if it does.
                logged = self._losses.read(line.text)
                if logged is not None:
                    self.progress.logged(rank, logged)
            self.diagnoser.feed(
                LogLine(line.host, node.node_rank, rank, stream, self._wall(), line.text)
            )
            self.launches.nccl_line(rank, line.text)
        elif named.kind == "out":
            self._torchrun_line(node, line)
        else:
            # The wrapper's shell writes its command's status, 0 to 255.
            status = whole(line.text.strip(), digits=3)
            if status is not None:
                node.exit, node.exited_at = status, self._clock()

    def _torchrun_line(self, node: NodeState, line: FileLine) -> None:
        # torchrun prefixes its workers' lines with their rank: only its own node's.
        prefixed = RANK_PREFIX.match(line.text)
        named = whole(prefixed.group(1)) if prefixed is not None else None
        if prefixed is not None and (named is None or not node.holds(named)):
            self.refused += 1
            return
        node.torchrun_tail.append(line.text[:LOG_LINE_CHARS])
        self.diagnoser.feed(
            LogLine(line.host, node.node_rank, None, "torchrun", self._wall(), line.text)
        )

    def _event(self, node: NodeState, rank: int, text: str) -> None:
        """Take an event from rank ``rank``'s file on ``node``: only an event of that rank
        there, in this run's world, counts."""
        event = self.events.feed(text)
        if event is None:
            return
        if not (
            event.rank == rank
            and event.node_rank == node.node_rank
            and event.local_rank == rank - node.base_rank
            and event.world_size == self.record.world_size
        ):
            self.refused += 1
            return
        host = node.host
        event = self._clocks.dated(host, event)
        self.progress.apply(host, event)
        if isinstance(event, StartEvent) and event.start_step is not None:
            self.bands.rewind(event.start_step)
        self.diagnoser.feed_event(host, event)
        self._note_attempt(event)
        progress = self.progress.rank(event.rank)
        if progress is not None and self._starts.get(event.rank, 0) < self.attempt:
            # An earlier attempt's event: its step and loss stand, its state does not.
            self._not_started(progress)
        if self._starts.get(event.rank) == self.attempt:
            self.launches.told(event.rank, event)
        if isinstance(event, StepEvent) and self.steps is Steps.EVERY:
            self._stepped(host, event.rank)
            if event.loss is not None:
                self.bands.add(event.step, event.loss, self.record.world_size)
        elif isinstance(event, PhaseEvent) and self._starts.get(event.rank) == self.attempt:
            self._phased_at[host] = self._clock()

    def _stepped(self, host: str, rank: int) -> None:
        # Only this attempt's steps: a resumed run's earlier steps say nothing of whether it
        # trains now.
        if self._starts.get(rank) == self.attempt:
            self.attempt_steps += 1
            self._stepped_at[host] = self._clock()

    def timeline(self) -> Timeline | None:
        """This attempt's launch timeline (:meth:`RankLaunches.timeline`)."""
        return self.launches.timeline(self.record, self.attempt)

    def read_steps(self) -> None:
        """Read the step events kept unread (``LATEST``): the ranks' progress is then up to
        date."""
        latest, self._latest = self._latest, {}
        for rank, line in latest.items():
            node = self.nodes.get(line.host)
            if node is not None:
                self._pending_event(node, rank, line)

    def _pending_event(self, node: NodeState, rank: int, line: FileLine) -> None:
        """Take a step event kept unread: a fault is the kept line's, not the one at hand's."""
        try:
            self._event(node, rank, line.text)
        except Exception as error:
            self._fault(line, error)

    @staticmethod
    def _not_started(rank: RankProgress) -> None:
        rank.state = RankState.STARTING
        rank.started_at = rank.last_step_at = None
        rank.forget_pace()
        rank.phase = rank.phase_expect_s = None

    def _note_attempt(self, event: RankEvent) -> None:
        # Each attempt of a rank begins with its start event, and the file keeps every
        # attempt's events: counting starts tells this attempt's "stopped" from an earlier one.
        if isinstance(event, StartEvent):
            self._starts[event.rank] = self._starts.get(event.rank, 0) + 1
        elif isinstance(event, DoneEvent) and self._starts.get(event.rank) == self.attempt:
            if event.reason == "stopped":
                self.stopped_ranks.add(event.rank)
            elif event.reason == "completed":
                self.completed_ranks.add(event.rank)

    def silence_note(self, node: NodeState) -> str | None:
        """Why ``node`` is not answering and what that means for the run, or None."""
        if node.silent is None:
            return None
        silence = self.silence()
        if silence is Silence.TRAINS:
            return f"{node.silent}; its peers keep stepping, so it still trains"
        if silence is Silence.UNKNOWN:
            if all(other.silent is not None for other in self.nodes.values()):
                return f"{node.silent}; no host answers (the head node's own network?)"
            return f"{node.silent}; nothing shows yet whether it still trains"
        return node.silent

    def silence(self) -> Silence:
        """What the hosts that still answer say of the silent ones (see :class:`Silence`)."""
        now = self._clock()
        stepped = self.stepped_witnesses()
        if stepped:
            paces = self.progress.own_paces()
            window = max(PEERS_IDLE_MIN_S, PEERS_IDLE_STEP_TIMES * max(paces, default=0.0))
            if any(now - self._stepped_at[host] <= window for host in stepped):
                return Silence.TRAINS
            # Heard from after a whole window without a step: its link works, its ranks wait.
            if any(self.heard_at[host] - self._stepped_at[host] > window for host in stepped):
                return Silence.FAILS
            return Silence.UNKNOWN
        # No step events (a script that writes none, or before the first step) cannot show
        # whether the silent host takes part; a host that answers shows the network works.
        witnesses = self.witnesses()
        if any(now - self.heard_at.get(host, -math.inf) <= HEARD_LATELY_S for host in witnesses):
            return Silence.FAILS
        return Silence.UNKNOWN

    def witnesses(self) -> list[str]:
        """The hosts that answer and have not finished: what they see tells of a silent one."""
        return [node.host for node in self.nodes.values() if node.silent is None and node.exit != 0]

    def stepped_witnesses(self) -> list[str]:
        """The witnesses whose ranks have stepped: whether they still do tells of a silent one."""
        return [host for host in self.witnesses() if host in self._stepped_at]

    def clock(self) -> float:
        """Now, on the clock that times what arrives (monotonic)."""
        return self._clock()

    def wall(self) -> float:
        """Now, on the clock that dates what arrives (the ranks' clock)."""
        return self._wall()

    @property
    def began(self) -> float:
        """When this attempt began to be watched (:meth:`clock`)."""
        return self._began

    @property
    def starts(self) -> Mapping[int, int]:
        """Rank → the start events seen of it: the attempt its latest events belong to."""
        return self._starts

    @property
    def stepped_at(self) -> Mapping[str, float]:
        """Host → when its latest step event of this attempt arrived (:meth:`clock`)."""
        return self._stepped_at

    @property
    def said_at(self) -> Mapping[str, float]:
        """Host → when its ranks' latest output line of this attempt arrived (:meth:`clock`)."""
        return self._said_at

    @property
    def phased_at(self) -> Mapping[str, float]:
        """Host → when its latest phase event of this attempt arrived (:meth:`clock`)."""
        return self._phased_at

    def reads_stop(self) -> bool:
        """Rank 0 said it reads ``control/stop`` (the events ddptui adds to a framework a
        script trains with): a stop asks it to checkpoint and end before any signal."""
        head = self.progress.rank(0)
        return head is not None and head.start is not None and "stop" in head.start.control

    def diagnoses(self) -> list[Diagnosis]:
        """What the lines say went wrong (:meth:`Diagnoser.diagnoses`). Once a stop was asked
        for, what it caused is the stop, not an error, and is left out: torchrun's word that it
        was told to stop (its ``SignalException``, signal 15), and whatever was first written
        after the stop began (a rank whose peer the stop ended first loses its connection)."""
        found = self.diagnoser.diagnoses()
        if self.record.state not in (RunState.STOPPING, RunState.STOPPED):
            return found
        asked = next(
            (c.time for c in reversed(self.record.states) if c.state is RunState.STOPPING), None
        )
        return [
            each
            for each in found
            if each.category is not Category.TERMINATED
            and (asked is None or each.first_time < asked - STOP_CLOCK_SLACK_S)
        ]

    def judgement(
        self, record: RunRecord, hang: Hang | None = None, stragglers: tuple[Straggler, ...] = ()
    ) -> Judgement:
        """What the supervisor tells viewers of the run: its state and why, what each silent
        host means, the hang when there is one, and the ranks its judging named stragglers
        (slowest first; none where no supervisor judges)."""
        notes = {}
        for node in self.nodes.values():
            note = self.silence_note(node)
            if note is not None:
                notes[node.host] = note
        attempt = record.attempt.number if record.attempts else 0
        line, stepped = self.progress.format_line(stragglers), self.progress.stepped
        return Judgement(
            record.state, attempt, record.detail, notes, hang, line, stepped, stragglers=stragglers
        )

    def conclude(self, state: RunState) -> None:
        """The attempt ended as ``state``: each rank that did not say how it ended ends with
        it — the rank of the first failure ``killed`` (by a signal) or ``failed``, the others
        as the run did — so no rank reads ``running`` beside a verdict that the run is over."""
        if not state.final:
            return
        failure = self.diagnoser.first_failure() if state is RunState.FAILED else None
        ended = {
            RunState.FAILED: RankState.FAILED,
            RunState.STOPPED: RankState.STOPPED,
            RunState.COMPLETED: RankState.DONE,
        }[state]
        for rank in self.progress.ranks:
            if rank.state.finished:
                continue
            if failure is not None and failure.rank == rank.rank:
                killed = failure.category is Category.KILLED_BY_SIGNAL
                rank.state = RankState.KILLED if killed else RankState.FAILED
            else:
                rank.state = ended
