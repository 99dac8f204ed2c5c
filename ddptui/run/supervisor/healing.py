"""What the supervisor does when recovery is on (``[recovery] mode = "resume"``) and an
attempt has failed: act on :mod:`~ddptui.run.supervisor.recovery`'s decision (set the host at
fault aside, put a spare in its place or go on with fewer nodes, resume; or give up, saying
why), each an incident of the run told to ``notify``; and, beside the jobs, end what the run
left on a host set aside while it did not answer, once it answers again.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import logging
import traceback
from collections.abc import Collection

from ddptui.run.backends import RunBackend
from ddptui.run.record import Incident, RunRecord, SetAside
from ddptui.run.stopper import StopReport
from ddptui.run.supervisor import recovery
from ddptui.run.supervisor.owning import RunOwner
from ddptui.run.supervisor.phase import Phase

LEFTOVERS = "it did not answer when the run's other processes were ended: its own may live on"
"""Why a host set aside may still hold processes of the run (``SetAside.leftovers``)."""
LEFTOVERS_EVERY_S = 15.0
"""How often the hosts set aside with leftovers are tried again."""
LEFTOVERS_PATIENCE_S = 900.0
"""How long after setting a host aside its leftovers are tried for (the supervisor outlives
the run's end for them): a host silent for longer is likely down, and its processes with it."""

log = logging.getLogger("ddptui.supervisor")


class Healing(RunOwner, abc.ABC):
    """The supervisor's recovery: what its loop (:class:`~ddptui.run.supervisor.loop.Supervisor`)
    calls once a failed attempt's end is recorded, and the sweep of leftovers it runs beside."""

    backend: RunBackend

    @abc.abstractmethod
    async def _resume(self) -> None:
        """Start the next attempt from the newest checkpoint, as ``ddptui resume`` would."""

    def open_incident(
        self,
        cause: str,
        found: recovery.Blame | None,
        last: int | None,
        times: recovery.FaultTimes,
    ) -> int:
        """Record the latest attempt's failure as an incident of the run at once, detected when
        the record last changed state (to failed, or hung): ``status`` shows it while the
        others are ended; what recovery does about it is added once decided
        (:meth:`_recover`). Its number."""
        record = self.record
        number = record.incidents[-1].number + 1 if record.incidents else 1
        incident = Incident(
            number=number,
            attempt=record.attempt.number,
            detected_at=record.states[-1].time,
            cause=cause,
            blamed=found.hosts if found is not None else (),
            why=found.why if found is not None else "",
            fault_at=times.fault_at,
            last_step=last,
            last_step_at=times.last_step_at,
            step_s=times.step_s,
        )
        self.change(lambda record: record.incidents.append(incident))
        return number

    async def _recover(
        self,
        number: int,
        cause: str,
        found: recovery.Blame | None,
        last: int | None,
        unended: Collection[str],
        raised: str | None = None,
    ) -> None:
        """Set the host at fault aside and resume on a spare, or say why not (``[recovery]``),
        as incident ``number`` of the run, ``found`` to blame (known better now than when it was
        opened: a host that did not answer as the others were ended); ``notify`` told."""
        self.phases.move(Phase.RECOVERING, "the attempt failed and [recovery] is on")
        now, record = self._wall(), self.record
        spares = await self.backend.spares() if found is not None else None
        decision = recovery.decide(
            self.config, record, found, now, last, raised, spares=spares, unreachable=unended
        )
        blamed = found.hosts if found is not None else ()
        why = found.why if found is not None else ""
        if isinstance(decision, recovery.GiveUp):
            action = f"not recovered: {decision.why}"
            self.change(lambda record: self._decided(record, number, blamed, why, action))
            self.note(action)
            self.say(action)
            self.notify_incident(number)
            await self.backend.release()
            self.phases.move(Phase.IDLE, "recovery gave up")
            self.tell_ended()
            return
        action = f"resuming on {decision.words}"
        run_dirs = {node.host: node.run_dir for node in record.nodes}

        def set_aside(record: RunRecord) -> None:
            self._decided(record, number, blamed, why, action)
            for host in (*decision.swaps, *decision.without):
                left = LEFTOVERS if host in unended and self.backend.ends_set_aside else ""
                record.set_aside.append(SetAside(host, why, now, run_dirs[host], left))

        self.change(set_aside)
        self.say(f"recovering from {cause}: {action}")
        self.notify_incident(number)
        failed = await self.backend.replace(decision.swaps, decision.without)
        if failed is None:
            await self._resume()
        resumed = self.phases.now is Phase.RUNNING
        if failed is not None:
            self.phases.move(Phase.IDLE, "the spare could not take the host's place")

        def outcome(record: RunRecord) -> None:
            entry = record.incident(number)
            if resumed:
                entry.resumed_attempt = record.attempt.number
            else:
                entry.action += f"; not resumed: {failed.message if failed else record.detail}"

        self.change(outcome)
        if not resumed:
            await self.backend.release()
            self.tell_ended()

    @staticmethod
    def _decided(
        record: RunRecord, number: int, blamed: tuple[str, ...], why: str, action: str
    ) -> None:
        entry = record.incident(number)
        entry.blamed, entry.why, entry.action = blamed, why, action

    async def sweep_leftovers(self) -> None:
        """End what is left of the run on the hosts set aside while they did not answer, once
        they answer again (a cut link mended): a run leaves nothing behind on a host it no
        longer uses. Beside the jobs: a host that does not answer costs a connect timeout."""
        while True:
            await asyncio.sleep(LEFTOVERS_EVERY_S)
            for aside in self._leftovers():
                try:
                    report = await self.backend.end_set_aside(aside.host, aside.run_dir)
                except Exception:  # a bug must not end the sweep, nor the supervisor
                    log.error(
                        "ending %s's leftovers failed: %s", aside.host, traceback.format_exc()
                    )
                    continue
                if report is not None and report.clean:
                    self._leftovers_ended(aside.host, report)

    def leftovers_pending(self) -> bool:
        """Whether a host set aside may still hold the run's processes, within
        :data:`LEFTOVERS_PATIENCE_S` of it: the supervisor sees them ended, the run's end
        notwithstanding, rather than leave them to a person."""
        return bool(self._leftovers())

    def _leftovers(self) -> list[SetAside]:
        """The hosts set aside with the run's processes maybe left on them, within
        :data:`LEFTOVERS_PATIENCE_S` of it."""
        now = self._wall()
        return [
            aside
            for aside in self.record.set_aside
            if aside.leftovers and now - aside.at < LEFTOVERS_PATIENCE_S
        ]

    def _leftovers_ended(self, host: str, report: StopReport) -> None:
        ended = sorted({*report.terminated.get(host, ()), *report.killed.get(host, ())})
        said = (
            f"ended what was left of the run there ({', '.join(ended)})"
            if ended
            else "nothing of the run was left there"
        )

        def cleared(record: RunRecord) -> None:
            record.set_aside = [
                dataclasses.replace(aside, leftovers="") if aside.host == host else aside
                for aside in record.set_aside
            ]

        self.change(cleared)
        line = f"{host}, set aside, answers again: {said}"
        self.note(line)
        self.say(line)
