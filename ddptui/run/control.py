"""RunControl: the one way the command line and the console reach runs.

Front ends check, plan, and then ask: launch, resume, stop, attach, view. Every run has one
supervisor (:mod:`ddptui.run.supervisor`) that owns it; what changes a run is a request to it,
and following a run is attaching to it (an :class:`~ddptui.run.attachment.Attachment`), so any
number of viewers cost the hosts one channel each. A command that finds a live run without a
supervisor (the head rebooted, the supervisor killed) starts one and says so
(:mod:`ddptui.run.supervising`). A finished run is read from its hosts directly
(:meth:`RunControl.read_back`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddptui.check.reuse import CheckCache
from ddptui.check.reuse import RecentCheck as RecentCheck
from ddptui.config import Config, load_config
from ddptui.errors import DdptuiError, UsageError
from ddptui.health import ClusterCheck as ClusterCheck
from ddptui.health.bandwidth import BandwidthError as BandwidthError
from ddptui.health.bandwidth import BandwidthReport as BandwidthReport
from ddptui.plan.launch import PlanError as PlanError
from ddptui.plan.run_plan import RunPlan as RunPlan
from ddptui.run.attachment import Attachment
from ddptui.run.code.contents import CodeError as CodeError
from ddptui.run.code.contents import CodeTree, job_code
from ddptui.run.following.direct import StoppedWaiting as StoppedWaiting
from ddptui.run.following.direct import read_directly
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Steps
from ddptui.run.following.updates import SILENCE_S, Update
from ddptui.run.following.updates import FileLine as FileLine
from ddptui.run.following.updates import HostSilent as HostSilent
from ddptui.run.protocol import BUSY, Reply
from ddptui.run.record import RunRecord
from ddptui.run.standby import Standby
from ddptui.run.store import Catalogue, RunStore, new_run_id
from ddptui.run.supervising import ANSWER_S, ControlError, Say, Supervisors, quiet
from ddptui.run.view import RunView
from ddptui.untrusted import plain

if TYPE_CHECKING:
    # Imported where used: they bring SSH with them, and a command that only asks a run's
    # supervisor (status, logs, stop) would pay for importing it (0.1 s of status's 0.23).
    from ddptui.check.run import Progress
    from ddptui.remote.trust import HostKeyScan as HostKeyScan
    from ddptui.run.backends.cluster import Cluster
    from ddptui.run.backends.kind import Kind
    from ddptui.run.evidence.kept import StackDump as StackDump

READ_BACK_S = 30.0


class RunControl:
    """The runs in one store, and the operations both front ends call.

    The front ends reach the layers below only through it: the values its methods return and
    the errors they raise are named here too (``ClusterCheck``, ``RunPlan``,
    ``BandwidthReport``, ``HostKeyScan``, ``BandwidthError``…, imported from their own
    modules), and what those values hold is read out by :mod:`ddptui.present`.

    A hosts file's SSH hosts and a ``[slurm]`` cluster are asked alike: what differs is
    their kind's (:func:`ddptui.run.backends.kind_of`): its cluster before a run, the
    supervisor's backend once it runs, and the way to the run's nodes."""

    def __init__(self, store: RunStore | None = None) -> None:
        self._store = store or RunStore()
        self.supervisors = Supervisors(self._store)
        self.checks = CheckCache(self._store.root.parent / "checks")
        self._standby: Standby | None = None

    # --- before a run ----------------------------------------------------------------------

    def has_fixed_hosts(self, config: Config) -> bool:
        """Whether ``config``'s cluster is hosts ddptui reaches itself (each checked, its key
        trusted, its links measured), or a scheduler's nodes, known from its check: what a
        front end shows and offers, without asking which kind of cluster it is."""
        return _cluster(config).fixed_hosts

    def checked_hosts(self, config: Config) -> int | None:
        """How many hosts a check of ``config``'s cluster reaches one by one (its progress
        counts them); None for a scheduler's nodes, which it asks about at once."""
        return len(config.hosts) if self.has_fixed_hosts(config) else None

    def require_measurable(self, config: Config, asked: str, shown: str | None = None) -> None:
        """Refuse ``asked`` (the option that asks for :meth:`measure`) with a
        :class:`UsageError` that says what does work, when ``config``'s cluster cannot measure
        its interconnect: before a check is spent on it, since :meth:`measure` would refuse
        after. ``shown``: how to name the hosts file (default: its path)."""
        _cluster(config).require_hosts(asked, shown)

    async def check(self, config: Config, progress: Progress | None = None) -> ClusterCheck:
        """What stands in a run's way on ``config``'s cluster: every host checked over SSH
        (``progress``: each host's steps as they come), or Slurm asked about its nodes."""
        return await _cluster(config).check(self.checks, progress)

    def recent_check(self, config: Config) -> RecentCheck | None:
        """A healthy check of ``config``'s hosts from the last few minutes that may stand for a
        new one (:mod:`ddptui.check.reuse`): none of this store's runs has started an attempt
        since that is still going (its GPUs and ports would be taken now)."""
        recent = _cluster(config).recent(self.checks)
        if recent is None:
            return None
        for record in self._store.changed_since(recent.checked_at):
            started = record.attempts[-1].started if record.attempts else record.created
            if started >= recent.checked_at and not record.state.final:
                return None
        return recent

    def plan_needs_check(self, config: Config) -> bool:
        """Whether :meth:`plan` needs the check's report (SSH hosts are planned from what they
        offer), so that even a dry run checks first; a batch job's nodes are Slurm's to pick."""
        return _cluster(config).plans_from_check

    def plan(
        self,
        config: Config,
        report: ClusterCheck | None = None,
        *,
        extra_args: Sequence[str] = (),
        debug: bool = False,
    ) -> RunPlan:
        """A new run's plan: every host's torchrun from ``report`` (SSH hosts), or the batch
        script (a ``[slurm]`` cluster: its workdir as the head sees it, which the nodes
        share). :class:`PlanError`, or a :class:`UsageError` saying what to change."""
        return _cluster(config).plan(
            report, run_id=new_run_id(), extra_args=extra_args, debug=debug
        )

    async def measure(self, config: Config, report: ClusterCheck) -> BandwidthReport:
        """The interconnect of ``config``'s hosts as ``report`` found them, measured with a
        launch's backend, interface and environment (``check --bandwidth``, the console's
        ``b``); :class:`BandwidthError` when the benchmark did not run to its end, a
        :class:`UsageError` for a cluster without fixed hosts."""
        return await _cluster(config).measure(report)

    async def scan_host_keys(self, config: Config, shown: str | None = None) -> list[HostKeyScan]:
        """Every host's key, fetched and compared with its known_hosts files (``ddptui
        trust``, the console's ``t``); nothing is written. A :class:`UsageError` that says what
        does work, before anything is asked, for a cluster without fixed hosts (``shown``: how
        to name its hosts file)."""
        from ddptui.remote import trust

        _cluster(config).require_hosts("trusting host keys", shown)
        return await trust.scan_host_keys(
            config.hosts,
            timeout=config.cluster.connect_timeout,
            max_parallel=config.cluster.max_parallel_connects,
        )

    def keys_to_add(self, scans: Sequence[HostKeyScan]) -> dict[Path, list[str]]:
        """The known_hosts lines that would record every unknown key of ``scans``, by file: a
        changed or revoked key is never among them."""
        from ddptui.remote.trust import lines_to_add

        return lines_to_add(scans)

    def add_host_keys(self, known_hosts: Path, lines: Sequence[str]) -> None:
        """Record ``lines`` (from :meth:`keys_to_add`, once the user said yes) in
        ``known_hosts``."""
        from ddptui.remote.hostkeys import append_lines

        append_lines(known_hosts, lines)

    def code(self, config: Config) -> CodeTree:
        """What a launch of ``config`` uploads; :class:`~ddptui.run.code.contents.CodeError` saying
        what to change when it cannot (too large, no such directory)."""
        return job_code(config.job)

    # --- runs ------------------------------------------------------------------------------

    def record(self, run_id: str | None) -> RunRecord:
        """The run ``run_id`` names (a unique prefix will do; default: the latest), as its
        record stands now."""
        return self._store.resolve(run_id)

    def open(self, run_id: str | None) -> tuple[RunRecord, Config]:
        """The run ``run_id`` names (default: the latest), with the hosts file it was launched
        with."""
        record = self._store.resolve(run_id)
        return record, load_config(self._store.hosts_file(record.id))

    def catalogue(self) -> Catalogue:
        """Every run, with how those whose end no supervisor saw really ended, where their
        backend can tell (:func:`ddptui.run.backends.settle`: Slurm's accounting)."""
        from ddptui.run import backends

        catalogue = self._store.catalogue()
        if backends.settle(self._store, catalogue.records, self.supervised):
            catalogue = self._store.catalogue()
        return catalogue

    async def launch(
        self,
        config: Config,
        report: ClusterCheck,
        plan: RunPlan,
        *,
        demo: bool = False,
        say: Say = quiet,
        steps: Steps = Steps.EVERY,
        queued: bool = False,
        began: float | None = None,
    ) -> Attachment:
        """Record ``plan`` as a new run, start its supervisor (which stages and starts it: on
        SSH hosts, or as a Slurm job, saying its queue state) and attach from the first line;
        returns once every node runs, or with ``queued``, once the run waits in its cluster's
        queue where it has one (a batch job submitted). :class:`ControlError` with the reason
        when staging, the start or the submission failed. ``steps``: see
        :class:`Attachment`. ``began``: when the launch was asked for, where its timeline
        starts (default: when its check began)."""
        from ddptui.config.render import config_to_toml

        new = _cluster(config).new_run(report, plan, demo=demo, began=began)
        # The run's own hosts file: every later command reaches the same hosts.
        self._store.create(new.record, config_to_toml(config))
        self._start_supervisor(new.record.id, "--launch", *new.options)
        attachment = await Attachment(
            self.supervisors, new.record, position=0, say=say, steps=steps
        ).open()
        try:
            await attachment.wait_started(queued=queued and new.queues)
        except BaseException:
            # What the check found may be what failed it (a host gone since): check again.
            self.checks.forget(config)
            await attachment.close()
            raise
        return attachment

    async def resume(
        self,
        run_id: str | None,
        *,
        debug: bool = False,
        say: Say = quiet,
        steps: Steps = Steps.EVERY,
        began: float | None = None,
        bring_back: tuple[str, ...] = (),
    ) -> Attachment:
        """A new attempt of a stopped or failed run, from its newest checkpoint; returns once it
        runs, attached from the first line. ``bring_back``: hosts recovery set aside that the run
        may use again (as spares). :class:`ControlError` with the reason when the
        supervisor refuses (the run still runs, another resume is starting it). ``began``: when
        the resume was asked for, where its launch timeline starts (default: now)."""
        began = time.time() if began is None else began
        record = self._store.resolve(run_id)
        attachment = await Attachment(
            self.supervisors, record, position=0, say=say, steps=steps
        ).open()
        try:
            reply = await attachment.ask("resume", debug=debug, began=began, bring_back=bring_back)
            if not reply.ok:
                # 2 when the hosts file needs a change (checkpoint_files naming nothing there).
                usage = reply.data.get("exit_code") == UsageError.exit_code
                code = UsageError.exit_code if usage else DdptuiError.exit_code
                raise ControlError(plain(reply.message), code)
        except BaseException:
            await attachment.close()
            raise
        return attachment

    async def stop(self, run_id: str | None, *, kill: bool = False, say: Say = quiet) -> Reply:
        """Ask the run's supervisor to stop it (checkpoint first unless ``kill``) and confirm
        nothing is left; its answer (``data``: ``lines``, ``clean``, ``was``…)."""
        record = self._store.resolve(run_id)
        async with await Attachment(
            self.supervisors, record, position=None, say=say
        ).open() as attachment:
            return await attachment.ask("kill" if kill else "stop")

    async def attach(
        self, run_id: str | None, *, say: Say = quiet, steps: Steps = Steps.EVERY
    ) -> Attachment:
        """Follow a run from its first line (starting its supervisor if it has none)."""
        record = self._store.resolve(run_id)
        return await Attachment(self.supervisors, record, position=0, say=say, steps=steps).open()

    async def dump(self, run_id: str | None) -> StackDump:
        """Every rank's Python stacks, from every host at once, and the ranks' flight-recorder
        dumps (of a finished run, the flight recorders alone), saved in the run's store: taken
        by the run's supervisor while it has one, through the connections it follows the
        hosts on, else from the hosts directly."""
        from ddptui.run.evidence.kept import load, save

        record, config = self.open(run_id)
        dumps = self._store.files(record.id).dumps
        if self.supervisors.supervised(record.id):
            asking = Attachment(self.supervisors, record, position=None, say=quiet)
            async with await asking.open() as live:
                folder = await live.kept_dump()
            if folder is not None:
                return load(dumps / folder)
        # Imported here alone: taking a dump from the hosts brings SSH, which a kept one lacks.
        from ddptui.run.evidence.dump import take

        async with _kind(config).reaching(record) as remote:
            taken = await take(config, record, remote)
        return save(taken, dumps)

    async def view(self, run_id: str | None, *, say: Say = quiet) -> RunView:
        """The run as it stands: from its supervisor while it lives (started if it has none),
        else from its hosts directly.

        An ended run's supervisor is asked too while it is still there: it knows how the run
        ended without asking the hosts, and what it does about it (ending the other nodes after
        a failure), while a host that no longer answers would hold a read of them up."""
        record, config = self.open(run_id)
        if not record.state.final or self.supervisors.supervised(record.id):
            try:
                async with await Attachment(
                    self.supervisors, record, position=None, say=say
                ).open() as live:
                    reply = await live.request("snapshot", timeout=ANSWER_S)
                    record = self._store.load(record.id)
                    if reply.ok:
                        return RunView.from_live_document(record, reply.data)
            except (ControlError, ValueError) as error:
                if not record.state.final:
                    say(f"run {record.id}: asking its hosts directly ({error})")
        # A live run's processes are judged by their CPU use, which takes two samples.
        model = await self.read_back(record, config, heartbeats=1 if record.state.final else 2)
        return RunView.of(record, model, model.judgement(record))

    async def read_back(
        self,
        record: RunRecord,
        config: Config,
        *,
        heartbeats: int = 2,
        timeout: float = READ_BACK_S,
    ) -> RunModel:
        """The run as its files on the hosts stand now, read directly (no supervisor): every
        host followed until it has caught up (:meth:`lines`), or ``timeout``."""
        model = RunModel(record)
        async for update in self.lines(
            record,
            config,
            heartbeats=heartbeats,
            silence_s=min(SILENCE_S, timeout),
            deadline_s=timeout,
        ):
            if not isinstance(update, StoppedWaiting):
                model.apply(update)
        model.read_steps()
        model.conclude(record.state)
        return model

    def lines(
        self,
        record: RunRecord,
        config: Config,
        *,
        deadline_s: float,
        heartbeats: int = 2,
        silence_s: float = SILENCE_S,
    ) -> AsyncIterator[Update | StoppedWaiting]:
        """Every line of the run's files as they stand, read from its hosts directly
        (:func:`~ddptui.run.following.direct.read_directly`, through the run's kind's way to
        its nodes)."""
        return read_directly(
            record,
            config,
            _kind(config).transport,
            deadline_s=deadline_s,
            heartbeats=heartbeats,
            silence_s=silence_s,
        )

    # --- supervisors -----------------------------------------------------------------------

    def warm_up(self, standby: Standby | None = None) -> None:
        """A launch is coming: its supervisor, started now (or ``standby``, started earlier),
        imports while the check runs."""
        if self._standby is None:
            self._standby = standby or Standby.start()

    def _start_supervisor(self, run_id: str, *args: str) -> None:
        standby, self._standby = self._standby, None
        if standby is None or not standby.go(self._store.root, run_id, *args):
            self.supervisors.spawn(run_id, *args)

    def supervised(self, run_id: str) -> bool:
        """Whether a supervisor holds ``run_id`` now."""
        return self.supervisors.supervised(run_id)

    def adopt(self, records: Iterable[RunRecord], *, say: Say = quiet) -> list[str]:
        """Start a supervisor for each run in ``records`` that is not over and has none (the
        head node restarted, or it was killed), saying so; the ids of those adopted."""
        return self.supervisors.adopt(records, say=say)

    async def release(self, run_id: str) -> None:
        """End ``run_id``'s supervisor now (SIGTERM) rather than after its idle time, and wait
        for it to go: for a run that ended, when what served its hosts goes too (a demo)."""
        await self.supervisors.release(run_id)


def _cluster(config: Config) -> Cluster:
    """``config``'s cluster, before a run, as its kind has it."""
    return _kind(config).cluster()


def _kind(config: Config) -> Kind:
    from ddptui.run import backends

    return backends.kind_of(config)


__all__ = ["BUSY", "Attachment", "ControlError", "RunControl", "Say"]
