"""A Slurm run: each attempt a batch job, its nodes reached through ``srun`` steps in it.

Beyond what every backend does, this one watches the job while the supervisor lives
(:meth:`SlurmBackend.watch`): Slurm may end the nodes under a running attempt (a node fails,
the time limit), and may start a requeued job again, which is the run's next attempt. The
allocation's nodes are checked as each attempt's job starts (:meth:`_check_allocation`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping

from ddptui.health.slurm import allocation_errors
from ddptui.plan.slurm import master_port
from ddptui.run.backends.base import (
    BackendEvent,
    NodesEnded,
    Restarted,
    RunBackend,
    SparePool,
    StartFailed,
)
from ddptui.run.backends.slurm import accounting, commands
from ddptui.run.backends.slurm import attempt as slurm_attempt
from ddptui.run.backends.slurm.attempt import SlurmRunError
from ddptui.run.backends.slurm.commands import SlurmError
from ddptui.run.backends.slurm.job import SlurmJob
from ddptui.run.following.state import Verdict
from ddptui.run.record import NodeRecord, RunRecord, RunState, SchedulerJob, node_versions
from ddptui.run.stopper import StopReport
from ddptui.run.store import RunStore

REQUEUED = "Slurm requeued job"
"""How an attempt's detail says its job was requeued (said once)."""
SETTLE_S = 6.0
"""How long the ranks' own words on the attempt's end are waited for once its job ended."""


class SlurmBackend(RunBackend):
    job_alive = False
    """The run's job is queued or runs although the run's record has ended (Slurm requeued
    it: it comes back as the next attempt)."""
    _ending = False
    """An event of the job's end was sent and is not dealt with yet."""

    _placed: list[NodeRecord] | None = None
    """The nodes recovery placed for the next attempt in the job's allocation (a spare in the
    place of each node at fault), until that attempt starts."""

    @property
    def holds_run(self) -> bool:
        return self.job_alive

    @staticmethod
    def settle(
        store: RunStore, records: Iterable[RunRecord], supervised: Callable[[str], bool]
    ) -> bool:
        """Slurm's accounting on the jobs that ended while no supervisor watched them."""
        return accounting.settle(store, records, supervised)

    async def start(self, number: int, *, resume: bool, debug: bool) -> StartFailed | None:
        """Attempt ``number``'s job submitted, waited for (its queue state said) and followed
        once it runs; or, after a recovery placed spares, started in the failed attempt's job,
        whose allocation waits for it. A stop asked meanwhile cancels the job."""
        owner = self.owner
        placed, self._placed = self._placed, None
        if resume and placed is not None:
            return await self._start_in_allocation(number, placed)
        try:
            job_id, script = await slurm_attempt.submit(
                self.config, owner.record, number, debug=debug
            )
        except SlurmRunError as error:
            return StartFailed(str(error), end=RunState.FAILED if number == 1 else None)
        root = slurm_attempt.run_root(self.config, owner.record)
        owner.say(f"attempt {number}: Slurm job {job_id} ({script}); its files are in {root}")
        owner.attempt_starting(
            number,
            master_port(job_id),
            f"attempt {number}: Slurm job {job_id}",
            SchedulerJob(job_id),
        )
        try:
            running = await slurm_attempt.until_running(job_id, owner.say, owner.stop_asked)
            placed = await slurm_attempt.allocation(self.config, owner.record, running)
        except (SlurmRunError, SlurmError) as error:
            await slurm_attempt.cancel(job_id)
            stopped = owner.stop_asked()
            return StartFailed(
                str(error),
                end=RunState.STOPPED if stopped else RunState.FAILED,
                detail=f"job {job_id} cancelled while it waited to run" if stopped else "",
            )
        owner.attempt_running(
            f"Slurm job {running.id} runs on {running.nodes}", placed, running.nodes or ""
        )
        return await self._check_allocation()

    async def _start_in_allocation(
        self, number: int, placed: list[NodeRecord]
    ) -> StartFailed | None:
        """Attempt ``number`` on ``placed``, in the job whose failed attempt's script waits for
        its nodes (:func:`~ddptui.plan.slurm.plan_batch`): naming them starts it."""
        owner, record = self.owner, self.owner.record
        job_id = record.job_id
        assert job_id is not None
        names = " ".join(node.host for node in placed)
        try:
            await asyncio.to_thread(
                slurm_attempt.name_nodes, self.config, record, number, [n.host for n in placed]
            )
        except OSError as error:
            return StartFailed(f"cannot start attempt {number} in Slurm job {job_id}: {error}")
        owner.attempt_starting(
            number,
            master_port(job_id),
            f"attempt {number}: in Slurm job {job_id}'s allocation, on {names}",
            SchedulerJob(job_id, in_allocation=True),
        )
        owner.attempt_running(
            f"Slurm job {job_id} runs attempt {number} on {names}",
            placed,
            record.attempt.allocation,
        )
        # The transport reaches the nodes the record names: the spare's now.
        await self.disconnect()
        await self.connect()
        return None

    async def replace(
        self, swaps: Mapping[str, str], without: Collection[str] = ()
    ) -> StartFailed | None:
        """Each spare node of the job's allocation in the place of the node it replaces, node
        ranks kept, once the check finds it can run the job; the nodes set aside written where
        a requeued start of the job finds them."""
        if without:
            return StartFailed("a Slurm run does not go on with fewer nodes")
        record = self.owner.record
        try:
            found = await asyncio.to_thread(commands.addresses, list(swaps.values()))
            await asyncio.to_thread(
                slurm_attempt.name_set_aside,
                self.config,
                record,
                [aside.host for aside in record.set_aside],
            )
        except (SlurmError, OSError) as error:
            return StartFailed(f"cannot recover on a spare node: {error}")
        placed = [
            dataclasses.replace(node, host=spare, address=found.get(spare, spare), versions={})
            if (spare := swaps.get(node.host)) is not None
            else node
            for node in record.nodes
        ]
        failed = await self._check_allocation(placed)
        if failed is not None:
            return StartFailed(f"cannot recover on a spare node: {failed.message}")
        self._placed = placed
        return None

    async def spares(self) -> SparePool:
        """The job's nodes beyond those the run ran on (``[slurm] spare_nodes``), while its
        allocation lasts: Slurm takes a failed node out of it."""
        assert self.config.slurm is not None
        pool = SparePool(
            (),
            f"{self.config.slurm.spare_nodes} spare node(s) in the job's allocation "
            "([slurm] spare_nodes)",
            "raise [slurm] spare_nodes for the next job",
        )
        job_id = self.owner.record.job_id
        if job_id is None:
            return pool
        try:
            found = await slurm_attempt.job(job_id)
            if found is None or found.state != "RUNNING" or not found.nodes:
                return pool
            names = await asyncio.to_thread(commands.hostnames, found.nodes)
        except SlurmError:
            return pool
        return dataclasses.replace(pool, names=tuple(names))

    async def lost(self) -> dict[str, str]:
        lost = await slurm_attempt.lost_nodes([node.host for node in self.owner.record.nodes])
        return {node.name: slurm_attempt.lost_words(node) for node in lost}

    async def release(self) -> None:
        """The job cancelled, its spares and its waiting script with it."""
        job_id = self.owner.record.job_id
        if job_id is not None:
            await slurm_attempt.cancel(job_id)

    async def _check_allocation(self, placed: list[NodeRecord] | None = None) -> StartFailed | None:
        """The check inside the allocation, as its job starts (or of the nodes ``placed`` for
        the next attempt): each node's stack in its record, warnings said; an error fails the
        run, naming the nodes with the ``exclude`` line that avoids them."""
        owner, slurm = self.owner, self.config.slurm
        assert slurm is not None
        nodes = owner.record.nodes if placed is None else placed
        owner.say(
            f"checking the allocation's {len(nodes)} node(s) (the probe on each, through srun)"
        )
        checked = dataclasses.replace(owner.record, nodes=nodes)
        checks, findings = await slurm_attempt.check_allocation(self.config, checked)
        stacks = {check.host.name: node_versions(check.facts) for check in checks}
        if placed is not None:
            for node in placed:
                node.versions = stacks.get(node.host, {})
        else:

            def versions(record: RunRecord) -> None:
                for node in record.nodes:
                    node.versions = stacks.get(node.host, {})

            owner.change(versions)
        for finding in findings:
            where = f"{finding.host}: " if finding.host else ""
            owner.say(f"{finding.severity.value}: {where}{finding.message}")
        failed = allocation_errors(slurm, findings)
        if failed is None:
            owner.say(
                f"the allocation's nodes can run it ({len(findings)} finding(s) above)"
                if findings
                else "the allocation's nodes: nothing to report"
            )
            return None
        job_id = owner.record.job_id
        assert job_id is not None
        with contextlib.suppress(SlurmError):
            found = await slurm_attempt.job(job_id)
            if found is None or found.state != "RUNNING":
                # What the check could not ask of a job that ended meanwhile is no finding:
                # the run's own end (the ranks' words) says how it went.
                owner.say(f"job {job_id} ended before every node could be checked")
                return None
        return StartFailed(failed, end=RunState.FAILED)

    async def stop(self, *, kill: bool, graceful: bool) -> StopReport:
        record = self.owner.record
        report = StopReport()
        if record.job_id is not None:
            report = await slurm_attempt.stop(
                self.remote, self.config, record, kill=kill, graceful=graceful, say=self.owner.say
            )
        self.job_alive = False
        return report

    async def terminate(self, skip: Collection[str] = ()) -> StopReport:
        """The job cancelled, and waited for: Slurm ends every node's processes. With
        ``[recovery]`` on, the attempt's processes alone, on every node but those in ``skip``
        (silent): the job's allocation and its spares wait for recovery's decision."""
        if self.config.recovery.on:
            return await self.end_attempt_processes(skip)
        job_id = self.owner.record.job_id
        report = StopReport()
        if job_id is not None:
            failed = await slurm_attempt.cancel(job_id)
            if failed is None and not await slurm_attempt.wait_ended(
                job_id, slurm_attempt.END_WAIT_S
            ):
                failed = f"job {job_id} still runs after scancel"
            if failed is not None:
                report.left[f"Slurm job {job_id}"] = [failed]
        return report

    def _restarts(self) -> int:
        """How often the latest attempt's job was requeued, as the record knows it (the
        attempts recovery started in its allocation are not Slurm's restarts)."""
        record = self.owner.record
        job_id = record.job_id
        started = [
            attempt
            for attempt in record.attempts
            if attempt.scheduler is not None
            and attempt.scheduler.id == job_id
            and not attempt.scheduler.in_allocation
        ]
        return len(started) - 1

    async def watch(self) -> AsyncIterator[BackendEvent]:
        """The job's end while the run goes on, and its requeued start as the next attempt."""
        owner = self.owner
        while True:
            await asyncio.sleep(slurm_attempt.POLL_S)
            job_id = owner.record.job_id
            if job_id is None or owner.starting() or self._ending:
                continue
            try:
                found = await slurm_attempt.job(job_id)
            except SlurmError:
                continue
            state = owner.record.state
            requeued = found is not None and found.restarts > self._restarts()
            if state in (RunState.RUNNING, RunState.HUNG):
                if found is None or found.state != "RUNNING" or requeued:
                    self._ending = True
                    yield NodesEnded(found)
            elif state.final:
                self.job_alive = found is not None and not found.ended
                if found is not None and found.ended and not _state_known(owner.record):
                    self._record_state(found)
                if requeued and REQUEUED not in owner.record.attempt.detail:
                    owner.note(f"{REQUEUED} {job_id}: it resumes as the next attempt")
                if found is not None and found.state == "RUNNING" and requeued:
                    self._ending = True
                    yield Restarted(found)

    def _record_state(self, found: SlurmJob | None) -> None:
        if found is None or not found.ended:
            return

        def record_state(record: RunRecord) -> None:
            record.attempt.scheduler = found.scheduler_job

        self.owner.change(record_state)

    async def ending(self, event: NodesEnded) -> Verdict | None:
        """Why the job stopped running while the run went on: in the ranks' words if they
        said, else in Slurm's (the nodes it lost, by name)."""
        self._ending = False
        owner, found = self.owner, _found(event)
        record = owner.record
        job_id = record.job_id
        assert job_id is not None
        if record.state.final:
            self._record_state(found)
            return None
        lost = await slurm_attempt.lost_nodes([node.host for node in record.nodes])
        # What the ranks said last (a stop on Slurm's warning, a rank's error) comes with the
        # followers' next round; Slurm's state says less.
        verdict = None if lost else await owner.verdict_within(SETTLE_S)
        if verdict is None:
            verdict = Verdict(RunState.FAILED, slurm_attempt.ended_words(job_id, found, lost))
        if verdict.state is RunState.STOPPED and self._requeued(found):
            verdict = Verdict(
                verdict.state,
                f"{verdict.detail}; {REQUEUED} {job_id}: it resumes as the next attempt",
                verdict.host,
            )
        return verdict

    def _requeued(self, found: SlurmJob | None) -> bool:
        return found is not None and found.pending and found.restarts > self._restarts()

    async def ended(self, event: NodesEnded, state: RunState) -> None:
        found = _found(event)
        self._record_state(found)
        job_id = self.owner.record.job_id
        if state is RunState.FAILED and job_id is not None and (found is None or not found.ended):
            # A failed run's job must not start again behind its back (Slurm requeues a job
            # whose node failed).
            await slurm_attempt.cancel(job_id)
        self.job_alive = state is RunState.STOPPED and self._requeued(found)

    async def restart(self, event: Restarted) -> StartFailed | None:
        """Slurm started the run's requeued job again: the run's next attempt, from its newest
        checkpoint (the batch script resumes a requeued start)."""
        self._ending = False
        owner, running = self.owner, _found(event)
        assert running is not None, f"{event} names no job"
        number = owner.record.attempt.number + 1
        owner.attempt_starting(
            number,
            master_port(running.id),
            f"attempt {number}: Slurm requeued job {running.id}",
            running.scheduler_job,
        )
        placed = await slurm_attempt.allocation(self.config, owner.record, running)
        owner.attempt_running(
            f"Slurm job {running.id} runs on {running.nodes}", placed, running.nodes or ""
        )
        return await self._check_allocation()


def _found(event: NodesEnded | Restarted) -> SlurmJob | None:
    """The job as :meth:`SlurmBackend.watch` found it when it sent ``event``."""
    found = event.found
    assert found is None or isinstance(found, SlurmJob), f"not a Slurm job's event: {event}"
    return found


def _state_known(record: RunRecord) -> bool:
    """Whether the record says how Slurm ended its latest attempt's job."""
    job = record.attempt.scheduler
    return job is not None and bool(job.state)
