"""Watching a run: every host's followed lines turned into progress, diagnoses and a verdict.

:class:`RunWatch` is pure: it takes the follower's updates (:mod:`ddptui.run.follow`) and keeps
per-node and per-rank state, the diagnosis of error lines, bounded log tails, and decides when
the run has ended and how (:meth:`RunWatch.verdict`). :func:`supervise` drives it over SSH and
acts on a failure: it stops every other node and records the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import math
import re
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptui.aio import QueueReader, wait_for
from ddptui.config.model import Config
from ddptui.remote.connection import RemoteCluster
from ddptui.run.diagnose import Diagnoser, LogLine
from ddptui.run.events import DoneEvent, EventReader, RankEvent, StartEvent, StepEvent
from ddptui.run.follow import (
    SILENCE_S,
    FileLine,
    Heartbeat,
    HostBack,
    HostFollower,
    HostSilent,
    Update,
)
from ddptui.run.progress import RunProgress
from ddptui.run.store import RunNotFound, RunRecord, RunState, RunStore

LOG_TAIL_LINES = 2000
"""Per rank (and per node for torchrun's own output): enough to read back, bounded."""
PEERS_IDLE_MIN_S = 10.0
PEERS_IDLE_STEP_TIMES = 3.0
"""While a host is silent, the hosts that answer count as stepping until this many of the
slowest rank's step-event intervals (and at least ``PEERS_IDLE_MIN_S``) pass without a step."""
EXIT_SETTLE_S = 3.0
"""After a node's torchrun exits non-zero, how long the verdict may wait for the root cause and
its own node's exit: torchrun ends a failed rank's peers too, and their node can report first."""
HEARD_LATELY_S = 5.0
"""More than two of the agent's 2 s heartbeats: a host heard from within this still answers."""


class Silence(enum.Enum):
    """What a silent host means for the run, judged by the hosts that still answer."""

    TRAINS = "trains"
    """Their ranks keep stepping: their collectives need the silent host's ranks, so those take
    part too, and only the head node's link to it is down."""
    FAILS = "fails"
    """Their ranks stopped stepping while they still answered (or, with no step events to
    judge by, they answer and the silent host does not)."""
    UNKNOWN = "unknown"
    """Nothing tells yet: no host answers (the head node's own network?), every one that does
    has finished, or none has been heard from since a whole window without a step (their links
    may be going too)."""


_EVENTS = re.compile(r"^events/rank(\d+)\.jsonl$")
_RANK_LOG = re.compile(r"^logs/attempt-(\d+)/.+/(\d+)/(stdout|stderr)\.log$")
_ERROR_FILE = re.compile(r"^logs/attempt-(\d+)/.+/(\d+)/error\.json$")
_NODE_OUT = re.compile(r"^node/attempt-(\d+)\.out$")
_NODE_EXIT = re.compile(r"^node/attempt-(\d+)\.exit$")


@dataclass
class NodeState:
    """One host's part of the current attempt."""

    host: str
    node_rank: int
    nproc: int
    base_rank: int
    exit: int | None = None
    exited_at: float | None = None
    """When the exit status arrived (the watch's clock)."""
    vanished: bool = False
    """The node's processes are gone without an exit status (the whole group was killed)."""
    gone_beats: int = 0
    silent: str | None = None
    """Why the host stopped answering, while it does not answer."""
    alive: bool | None = None
    sample: Mapping[str, Any] = field(default_factory=dict)
    torchrun_tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))


@dataclass(frozen=True)
class Verdict:
    state: RunState
    detail: str
    host: str | None = None


@dataclass(frozen=True)
class RankLog:
    """A line from one rank's stdout or stderr (text raw: sanitise to show)."""

    rank: int
    stream: str
    text: str


class RunWatch:
    """The state of one attempt of a run, built from followed lines."""

    def __init__(self, record: RunRecord, clock: Callable[[], float] = time.monotonic) -> None:
        self.record = record
        self._clock = clock
        self._stepped_at: dict[str, float] = {}
        """Host → when its latest step event arrived."""
        self._heard_at: dict[str, float] = {}
        """Host → when its latest line or heartbeat arrived."""
        self.attempt = record.attempt.number if record.attempts else 1
        self.progress = RunProgress()
        self.progress.world_size = record.world_size
        self.diagnoser = Diagnoser(attempt=self.attempt)
        self.events = EventReader()
        self.nodes: dict[str, NodeState] = {}
        base = 0
        for node in record.nodes:
            self.nodes[node.host] = NodeState(node.host, node.node_rank, node.nproc, base)
            for local in range(node.nproc):
                self.progress.expect(node.host, node.node_rank, local, base + local)
            base += node.nproc
        self.logs: dict[int, deque[RankLog]] = {}
        self._starts: dict[int, int] = {}
        self.stopped_ranks: set[int] = set()
        """Ranks that said, in this attempt, that they stopped on request."""
        self.lines = 0

    def apply(self, update: Update) -> None:
        if isinstance(update, (FileLine, Heartbeat)):
            self._heard_at[update.host] = self._clock()
        if isinstance(update, FileLine):
            self.lines += 1
            self._line(update)
        elif isinstance(update, Heartbeat):
            node = self.nodes.get(update.host)
            if node is not None:
                node.alive = update.groups.get(self.attempt)
                node.sample = update.sample
                # The wrapper records torchrun's exit status as it ends; a group gone for two
                # heartbeats with none was killed whole (kill -9 -PGID, the OOM killer).
                node.gone_beats = node.gone_beats + 1 if node.alive is False else 0
                if node.exit is None and node.gone_beats >= 2:
                    node.vanished = True
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
        if _EVENTS.match(line.path):
            event = self.events.feed(line.text)
            if event is not None:
                if isinstance(event, StepEvent):
                    self._stepped_at[line.host] = self._clock()
                self.progress.apply(line.host, event)
                self.diagnoser.feed_event(line.host, event)
                self._note_attempt(event)
            return
        match = _RANK_LOG.match(line.path) or _ERROR_FILE.match(line.path)
        if match is not None:
            if int(match.group(1)) != self.attempt:
                return
            rank = node.base_rank + int(match.group(2))
            stream = match.group(3) if match.re is _RANK_LOG else "error.json"
            self.logs.setdefault(rank, deque(maxlen=LOG_TAIL_LINES)).append(
                RankLog(rank, stream, line.text)
            )
            self.diagnoser.feed(
                LogLine(line.host, node.node_rank, rank, stream, time.time(), line.text)
            )
            return
        match = _NODE_OUT.match(line.path)
        if match is not None and int(match.group(1)) == self.attempt:
            node.torchrun_tail.append(line.text)
            self.diagnoser.feed(
                LogLine(line.host, node.node_rank, None, "torchrun", time.time(), line.text)
            )
            return
        match = _NODE_EXIT.match(line.path)
        if match is not None and int(match.group(1)) == self.attempt:
            with contextlib.suppress(ValueError):
                node.exit = int(line.text.strip())
                node.exited_at = self._clock()

    def _note_attempt(self, event: RankEvent) -> None:
        # Each attempt of a rank begins with its start event, and the file keeps every
        # attempt's events: counting starts tells this attempt's "stopped" from an earlier one.
        if isinstance(event, StartEvent):
            self._starts[event.rank] = self._starts.get(event.rank, 0) + 1
        elif (
            isinstance(event, DoneEvent)
            and event.reason == "stopped"
            and self._starts.get(event.rank) == self.attempt
        ):
            self.stopped_ranks.add(event.rank)

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
        stepped = self._stepped_witnesses()
        if stepped:
            paces = [rank.pace_s for rank in self.progress.ranks if rank.pace_s is not None]
            window = max(PEERS_IDLE_MIN_S, PEERS_IDLE_STEP_TIMES * max(paces, default=0.0))
            if any(now - self._stepped_at[host] <= window for host in stepped):
                return Silence.TRAINS
            # Heard from after a whole window without a step: its link works, its ranks wait.
            if any(self._heard_at[host] - self._stepped_at[host] > window for host in stepped):
                return Silence.FAILS
            return Silence.UNKNOWN
        # No step events (a script that writes none, or before the first step) cannot show
        # whether the silent host takes part; a host that answers shows the network works.
        witnesses = self._witnesses()
        if any(now - self._heard_at.get(host, -math.inf) <= HEARD_LATELY_S for host in witnesses):
            return Silence.FAILS
        return Silence.UNKNOWN

    def _witnesses(self) -> list[str]:
        """The hosts that answer and have not finished: what they see tells of a silent one."""
        return [node.host for node in self.nodes.values() if node.silent is None and node.exit != 0]

    def _stepped_witnesses(self) -> list[str]:
        """The witnesses whose ranks have stepped: whether they still do tells of a silent one."""
        return [host for host in self._witnesses() if host in self._stepped_at]

    def _failed_exit(self, stopping: bool) -> Verdict | None:
        """The failure that non-zero exits say, naming the node of the first failure's root
        cause; None while there is none, or while that node's exit may be a moment behind."""
        if stopping:
            return None
        failed = sorted(
            (node for node in self.nodes.values() if node.exit not in (None, 0)),
            key=lambda node: node.exited_at or 0.0,
        )
        if not failed:
            return None
        failure = self.diagnoser.first_failure()
        culprit = next((node for node in failed if failure and node.host == failure.host), None)
        root = failure is not None and failure.category.role == "root"
        settling = self._clock() - (failed[0].exited_at or 0.0) < EXIT_SETTLE_S
        if settling and (culprit is None or not root):
            return None
        node = culprit or failed[0]
        why = f"torchrun on {node.host} (node {node.node_rank}) {_exit_text(node.exit or 0)}"
        if failure is not None:
            rank = "torchrun" if failure.rank is None else f"rank {failure.rank}"
            why += f"; first failure: {rank} on {failure.host} ({failure.category.value})"
        return Verdict(RunState.FAILED, why, node.host)

    def verdict(self, *, stopping: bool = False) -> Verdict | None:
        """How the attempt ended, or None while it goes on.

        A node whose torchrun exits non-zero fails the run, unless a stop was asked for (then
        a non-zero exit is the stop's doing); the verdict names the node of the first failure's
        root cause, waiting up to ``EXIT_SETTLE_S`` for it. So does a node that stops answering
        while the ranks on the hosts that answer stop stepping too; while they keep stepping the
        silent host takes part in their collectives, and when no host answers (or every one
        that does has finished) nothing can be judged until one does. All nodes exiting 0 is
        completion, or a stop when the ranks said they stopped on request.
        """
        # Ranks that stopped on request in this attempt (a `touch control/stop` on node 0, say).
        stopping = stopping or bool(self.stopped_ranks)
        failed = self._failed_exit(stopping)
        if failed is not None:
            return failed
        for node in sorted(self.nodes.values(), key=lambda item: item.node_rank):
            if node.vanished and node.exit is None and not stopping:
                return Verdict(
                    RunState.FAILED,
                    f"the processes on {node.host} (node {node.node_rank}) are gone without an "
                    "exit status: killed as a group (kill -9, the OOM killer?)",
                    node.host,
                )
            # A host whose torchrun already exited 0 has done its part, silent or not.
            if (
                node.silent is not None
                and node.exit is None
                and not stopping
                and self.silence() is Silence.FAILS
            ):
                # Only ranks that stepped before can be said to have stopped stepping.
                stepped = self._stepped_witnesses()
                peers = "; the other hosts' ranks stopped stepping too" if stepped else ""
                return Verdict(
                    RunState.FAILED,
                    f"{node.host} (node {node.node_rank}) stopped answering: {node.silent}{peers}",
                    node.host,
                )
        if all(node.exit is not None or node.vanished for node in self.nodes.values()):
            if not stopping and any(node.exit for node in self.nodes.values()):
                return None  # a failure whose root cause may be a moment behind
            if stopping:
                return Verdict(RunState.STOPPED, "stopped on request")
            return Verdict(RunState.COMPLETED, "every node exited 0")
        return None


def _exit_text(status: int) -> str:
    # The wrapper's shell reports a command killed by signal N as 128 + N.
    if status > 128:
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        return f"was killed by {name} (exit {status})"
    return f"exited {status}"


async def supervise(
    record: RunRecord,
    config: Config,
    store: RunStore,
    *,
    on_change: Callable[[RunWatch], None] = lambda watch: None,
    act: bool = True,
    watch: RunWatch | None = None,
) -> Verdict:
    """Follow ``record``'s current attempt on every host until it ends; record how.

    With ``act``, a failure stops every other node (SIGTERM, then SIGKILL) and the outcome is
    written to the run store. Cancel the task to detach: the run goes on.
    """
    watch = watch or RunWatch(record)
    queue: asyncio.Queue[Update] = asyncio.Queue(maxsize=10000)
    followers = [
        HostFollower(
            config.host(node.host),
            node.run_dir,
            connect_timeout=config.cluster.connect_timeout,
        )
        for node in record.nodes
    ]

    async def pump(follower: HostFollower) -> None:
        async for update in follower.updates():
            await queue.put(update)

    tasks = [asyncio.create_task(pump(follower)) for follower in followers]
    stopping, next_look = False, 0.0
    updates = QueueReader(queue)
    try:
        while True:
            try:
                update = await updates.get(1.0)
            except asyncio.TimeoutError:
                update = None
            if update is not None:
                watch.apply(update)
            now = time.monotonic()
            if now >= next_look:
                # Another process (ddptui stop) may be stopping the run: its exits are no failure.
                stopping = _stopping(store, record.id)
                watch.progress.update_health(time.time())
                next_look = now + 1.0
            on_change(watch)
            verdict = watch.verdict(stopping=stopping)
            if verdict is not None:
                break
    finally:
        await stop_following(followers, tasks)
    if act:
        # Recorded first: `ddptui status` says failed at once, while the others are stopped.
        finish(store, record.id, verdict)
        if verdict.state is RunState.FAILED:
            from ddptui.run.stopper import terminate

            silent = {name for name, node in watch.nodes.items() if node.silent}
            async with RemoteCluster(
                [config.host(node.host) for node in record.nodes if node.host not in silent],
                connect_timeout=config.cluster.connect_timeout,
            ) as remote:
                # Short: the ranks of a failed run wait in collectives and cannot checkpoint.
                report = await terminate(remote, config, record, grace=5.0, skip=silent)
            _note_cleanup(store, record.id, report.lines())
    return verdict


async def snapshot(
    record: RunRecord, config: Config, *, heartbeats: int = 2, timeout: float = 30.0
) -> RunWatch:
    """The run as its files stand now: follow every host until it has sent ``heartbeats``
    heartbeats (the agent reads what is there before each) or stopped answering."""
    watch = RunWatch(record)
    followers = [
        HostFollower(
            config.host(node.host),
            node.run_dir,
            connect_timeout=config.cluster.connect_timeout,
            silence_s=min(SILENCE_S, timeout),
        )
        for node in record.nodes
    ]
    beats: dict[str, int] = {node.host: 0 for node in record.nodes}

    async def one(follower: HostFollower) -> None:
        async for update in follower.updates():
            watch.apply(update)
            if isinstance(update, Heartbeat):
                beats[update.host] += 1
            if beats[follower.host.name] >= heartbeats or isinstance(update, HostSilent):
                return

    try:
        await wait_for(asyncio.gather(*(one(follower) for follower in followers)), timeout)
    except asyncio.TimeoutError:
        pass
    finally:
        await asyncio.gather(*(follower.close() for follower in followers))
    watch.progress.update_health(time.time())
    return watch


async def stop_following(followers: list[HostFollower], tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.gather(*(follower.close() for follower in followers))
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=5.0)


def _stopping(store: RunStore, run_id: str) -> bool:
    try:
        return store.load(run_id).state is RunState.STOPPING
    except RunNotFound:
        return False


def _note_cleanup(store: RunStore, run_id: str, lines: list[str]) -> None:
    if not lines:
        return

    def change(record: RunRecord) -> None:
        record.attempt.detail = "; ".join([record.attempt.detail, *lines]).strip("; ")

    store.update(run_id, change)


def finish(store: RunStore, run_id: str, verdict: Verdict) -> None:
    """Write the attempt's outcome, unless another process already did."""

    def change(record: RunRecord) -> None:
        if record.state.final:
            return
        attempt = record.attempt
        attempt.ended = time.time()
        attempt.outcome = verdict.state.value
        attempt.detail = verdict.detail
        record.transition(verdict.state, verdict.detail)

    store.update(run_id, change)
