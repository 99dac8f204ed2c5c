"""Where a run runs: the lifecycle its supervisor needs from SSH hosts or a Slurm allocation.

The split follows torchelastic's agent (``_start_workers`` / ``_stop_workers`` /
``_monitor_workers``): the supervisor decides, a backend does. :class:`RunBackend` is what
every backend does — connect for a job, start an attempt, stop it gracefully or terminate it,
follow a node, take the ranks' stacks — and what only some need: a scheduler's backend also
watches its job (:meth:`RunBackend.watch`) and says when the scheduler ended the nodes or
started them again. :class:`~ddptui.run.backends.ssh.backend.SshBackend` reaches a hosts file's
hosts over SSH; :class:`~ddptui.run.backends.slurm.backend.SlurmBackend` submits a batch job and
reaches its nodes through ``srun``. A backend acts on the run only through its :class:`Owner`,
and reaches the run's nodes the way its kind of cluster gives it (:class:`OpenTransport`).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ddptui.config import Config
from ddptui.remote.transport import PerHost, Transport
from ddptui.run.evidence import dump
from ddptui.run.evidence.kept import StackDump
from ddptui.run.following.files import HostFollower, OpenTransport
from ddptui.run.following.state import Verdict
from ddptui.run.following.updates import Update
from ddptui.run.record import NodeRecord, RunRecord, RunState, SchedulerJob
from ddptui.run.stopper import FAILED_GRACE_S, StopReport, terminate
from ddptui.run.store import RunStore


class Owner(Protocol):
    """What a backend may do to the run it serves (its supervisor does it)."""

    @property
    def record(self) -> RunRecord: ...

    def say(self, line: str) -> None:
        """Tell whoever watches the job in progress."""

    def change(self, change: Callable[[RunRecord], None]) -> None:
        """Change the run's record (kept at once)."""

    def note(self, *lines: str) -> None:
        """Add ``lines`` to the current attempt's detail."""

    def reached(self, host: str, stage: str) -> None:
        """``host`` reached ``stage`` of the launch timeline (:mod:`ddptui.run.timeline`) now;
        kept with the record's next change."""

    def stop_asked(self) -> bool:
        """Whether a stop or kill waits behind the job in progress."""

    def starting(self) -> bool:
        """Whether an attempt is being started now."""

    def attempt_starting(
        self, number: int, master_port: int, detail: str, scheduler: SchedulerJob | None = None
    ) -> None:
        """Record attempt ``number`` as the run's newest, starting now (as the ``scheduler``'s
        job, where one runs it)."""

    def attempt_running(
        self, detail: str, placed: list[NodeRecord] | None = None, allocation: str = ""
    ) -> None:
        """The attempt runs (on ``placed``, the scheduler's ``allocation``, when the nodes were
        chosen only now): record it and follow its nodes."""

    async def verdict_within(self, seconds: float) -> Verdict | None:
        """What the ranks say of the attempt's end, waited for up to ``seconds``."""


class Follower(Protocol):
    """One node's files and heartbeats (:class:`~ddptui.run.following.files.HostFollower`)."""

    def batches(self) -> AsyncIterator[list[Update]]: ...

    async def close(self) -> None: ...

    def reached(self) -> tuple[str, Transport] | None:
        """Its host's name and what the host is followed through, while the channel is open
        and the host heard (else None): another command to the host then costs a channel on
        a live connection, not a connection."""
        ...


@dataclass(frozen=True)
class SparePool:
    """Where a run's spares come from, as recovery decides and says."""

    names: tuple[str, ...]
    """The hosts that may take a place, in order (those the run uses or set aside included:
    the record leaves them out)."""
    said: str
    """What the pool is, for a person: ``2 spare(s) in the hosts file``."""
    more: str
    """What gives the run more when none is left."""


@dataclass(frozen=True)
class StartFailed:
    """Why an attempt did not start, and what of it to record."""

    message: str
    """The answer to whoever asked for the start."""
    end: RunState | None = None
    """How the attempt ended, when it had begun (None: nothing was started, as a refused
    resume)."""
    detail: str = ""
    """The attempt's detail, when it is not :attr:`message`."""
    data: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class NodesEnded:
    """The scheduler ended the attempt's nodes while the run went on."""

    found: object
    """What the backend's watch found of its job, handed back to the backend that sent the
    event (:meth:`RunBackend.ending`, :meth:`RunBackend.ended`): that backend's own value,
    which the supervisor never reads."""


@dataclass(frozen=True)
class Restarted:
    """The scheduler started the run's job again: its next attempt."""

    found: object
    """What the backend's watch found of its job, for its :meth:`RunBackend.restart`: as
    :attr:`NodesEnded.found`, opaque to the supervisor."""


BackendEvent = NodesEnded | Restarted


class RunBackend(abc.ABC):
    """A run's lifecycle where it runs. Connections are per job: :meth:`connect` before,
    :meth:`disconnect` after (one left from before a host's link was cut would be tried, and
    time out, before a new one is opened); each opened by ``open_transport``, its kind of
    cluster's way to the run's nodes."""

    def __init__(self, config: Config, owner: Owner, open_transport: OpenTransport) -> None:
        self.config = config
        self.owner = owner
        self.open_transport = open_transport
        self._remote: Transport | None = None

    @property
    def remote(self) -> Transport:
        assert self._remote is not None, "the backend is used outside a job"
        return self._remote

    async def connect(self) -> None:
        record = self.owner.record
        hosts = [self.config.host(node.host) for node in record.nodes]
        self._remote = await self.open_transport(hosts, record.job_id)

    async def disconnect(self) -> None:
        remote, self._remote = self._remote, None
        if remote is not None:
            await remote.close()

    @abc.abstractmethod
    async def start(self, number: int, *, resume: bool, debug: bool) -> StartFailed | None:
        """Start attempt ``number`` (a resume's, from its checkpoint): recorded through the
        owner as it goes; what failed, or None once it runs."""

    async def replace(
        self, swaps: Mapping[str, str], without: Collection[str] = ()
    ) -> StartFailed | None:
        """Before a recovery's resume: put each spare (a value of ``swaps``) in the place of the
        host it replaces (its key) in the record, node ranks kept, with the run's code on it,
        and leave the hosts of ``without`` out (the nodes after them move up a node rank);
        what failed, or None. A scheduler chooses its job's nodes itself: not here."""
        return StartFailed(
            f"cannot recover on a spare: {type(self).__name__} runs on the nodes its scheduler "
            "gives, and replacing them is not done yet"
        )

    async def spares(self) -> SparePool:
        """The hosts a recovery may put in the place of one at fault: the hosts file's
        spares."""
        return SparePool(
            tuple(spare.name for spare in self.config.spares),
            f"{len(self.config.spares)} spare(s) in the hosts file",
            "add a spare, or set [recovery] min_nodes to go on with fewer",
        )

    async def lost(self) -> dict[str, str]:
        """The run's hosts its scheduler holds lost now (host → the scheduler's words): the
        attempt's failure is theirs, whichever rank said it first. None without a scheduler."""
        return {}

    async def release(self) -> None:
        """The run will not go on where it ran: give back what was held for a recovery (a
        scheduler's allocation). Hosts of a hosts file hold nothing beyond their processes."""
        return None

    @abc.abstractmethod
    async def stop(self, *, kill: bool, graceful: bool) -> StopReport:
        """Stop the run's processes (``graceful``: the trainer checkpoints first) and confirm
        nothing of it is left."""

    @abc.abstractmethod
    async def terminate(self, skip: Collection[str] = ()) -> StopReport:
        """End every process of the run now (after a failure or a hang), leaving the hosts
        in ``skip`` (silent) alone."""

    async def end_attempt_processes(self, skip: Collection[str]) -> StopReport:
        """The failed attempt's processes ended on every host but those in ``skip``: the
        bundled trainer's ranks asked for their rescue first, then SIGTERM, then SIGKILL."""
        record = self.owner.record
        return await terminate(
            self.remote,
            self.config,
            record,
            grace=FAILED_GRACE_S,
            skip=skip,
            rescue=record.entry == "trainer",
        )

    def follower(self, node: NodeRecord, offsets: Mapping[str, int] | None) -> Follower:
        """What follows ``node`` from ``offsets`` (path → where its lines were taken up to),
        its fast ranks' step events thinned on the host (:mod:`ddptui.onhost.thinning`)."""
        record = self.owner.record
        return HostFollower.of_node(
            self.config,
            record,
            node,
            offsets=offsets,
            open_transport=self.open_transport,
            thin=True,
        )

    async def take_stacks(
        self,
        skip: Collection[str] = (),
        followed: Mapping[str, Transport] | None = None,
        *,
        own_connections: bool = False,
    ) -> StackDump:
        """Every rank's stacks and flight recorders, read and bounded; the hosts in ``skip``
        (silent) not asked. A host of ``followed`` (host → what its follower reaches it
        through) is asked there: no connection to make, which at hundreds of hosts is most of a
        dump's time. The others through the job's connections, or with ``own_connections`` (a
        dump asked for outside the jobs, which a job's end would cut short by closing the
        job's) through connections opened for this dump and closed after it."""
        record, followed = self.owner.record, followed or {}
        async with contextlib.AsyncExitStack() as held:
            rest = self._remote
            if own_connections or rest is None:
                hosts = [self.config.host(n.host) for n in record.nodes if n.host not in followed]
                rest = await self.open_transport(hosts, record.job_id)
                held.push_async_callback(rest.close)
            remote = PerHost(followed, rest) if followed else rest
            return await dump.take(self.config, record, remote, skip)

    @staticmethod
    def settle(
        store: RunStore, records: Iterable[RunRecord], supervised: Callable[[str], bool]
    ) -> bool:
        """Record how the ended runs among ``records`` whose end no supervisor saw
        (``supervised``: whether one holds a run now) really ended, where this backend has a
        word on it; whether a record changed. Hosts reached over SSH keep nothing of a run
        beyond its files: nothing to settle."""
        return False

    ends_set_aside = False
    """Whether :meth:`end_set_aside` ends what a run left on a host set aside while silent
    (a scheduler ends its lost nodes' processes itself, once they answer)."""

    async def end_set_aside(self, host: str, run_dir: str) -> StopReport | None:
        """End what is left of the run on ``host``, set aside while it did not answer (its
        node's directory was ``run_dir``), on a connection of its own; None where a scheduler
        ends its job's nodes itself."""
        return None

    @property
    def holds_run(self) -> bool:
        """Whether something of the run lives although its record has ended (the supervisor
        waits for it rather than exit)."""
        return False

    async def watch(self) -> AsyncIterator[BackendEvent]:
        """What the scheduler does to the run while the supervisor lives. A backend without a
        scheduler sees everything through its followers: nothing."""
        return
        yield

    async def ending(self, event: NodesEnded) -> Verdict | None:
        """How the attempt ended, once :meth:`model` said its nodes ended; None when the record
        had ended already."""
        raise TypeError(f"{type(self).__name__} watches no scheduler: {event}")

    async def ended(self, event: NodesEnded, state: RunState) -> None:
        """Tidy up after the end of ``event`` was recorded as ``state``."""
        raise TypeError(f"{type(self).__name__} watches no scheduler: {event}")

    async def restart(self, event: Restarted) -> StartFailed | None:
        """Follow the attempt the scheduler started again."""
        raise TypeError(f"{type(self).__name__} watches no scheduler: {event}")
