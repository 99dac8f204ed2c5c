"""Stopping a run: checkpoint first, then SIGTERM, then SIGKILL; then make sure nothing is left.

The graceful path asks the trainer to stop (``control/stop`` on node 0): every rank stops at the
same step, checkpoints and exits 0. Whatever still runs after the grace period gets SIGTERM to
its process group, and after another grace SIGKILL. Finally every host is asked whether any
process of the run remains, and the report says what had to be killed. The supervisor
(:mod:`ddptui.run.supervisor`) runs these and records the outcome; nothing here writes it.

Every host is asked on its own: one that cannot be reached, or whose answer is garbage, is
named in the report (its processes may still run) and the others are stopped all the same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import TypeVar

from ddptui.config.model import Config, HostConfig
from ddptui.remote.transport import Transport
from ddptui.run.agent import client as nodes
from ddptui.run.agent.answers import AttemptStatus
from ddptui.run.agent.call import GarbledAnswer, NodeError, described
from ddptui.run.following.state import RANKS_GONE_LINGER_S
from ddptui.run.record import RunRecord

_T = TypeVar("_T")

KILL_WAIT_S = 10.0
FAILED_GRACE_S = 5.0
"""How long a failed attempt's ranks get to end after SIGTERM: the other nodes' ranks wait in
collectives, and cannot checkpoint."""


@dataclass
class StopReport:
    """What a stop did, host by host."""

    graceful: bool = False
    """Every node exited on its own after the stop request."""
    outlived: list[str] = field(default_factory=list)
    """Hosts whose launchers outlived every rank of the run after the stop request."""
    terminated: dict[str, list[str]] = field(default_factory=dict)
    """Host → processes that got SIGTERM."""
    killed: dict[str, list[str]] = field(default_factory=dict)
    """Host → processes that needed SIGKILL."""
    left: dict[str, list[str]] = field(default_factory=dict)
    """Host → processes still there at the end (should be empty)."""
    unreachable: dict[str, str] = field(default_factory=dict)
    """Host → why it could not be asked: its processes may still run."""
    garbled: dict[str, str] = field(default_factory=dict)
    """Host → what was wrong with its answer (the message names the host): its processes may
    still run."""
    seconds: float = 0.0

    @property
    def may_live_on(self) -> set[str]:
        """Hosts where the run's processes may still run: left, not reached, or not known."""
        return {*self.left, *self.unreachable, *self.garbled}

    @property
    def clean(self) -> bool:
        return not self.may_live_on

    def lines(self) -> list[str]:
        said = []
        if self.graceful:
            said.append("every node stopped on its own after checkpointing")
        elif self.outlived:
            said.append(
                "every rank stopped on its own after checkpointing; torchrun outlived them on "
                f"{', '.join(self.outlived)} (its exit barrier waits for a node that failed)"
            )
        for label, table in (("SIGTERM to", self.terminated), ("SIGKILL to", self.killed)):
            for host, processes in table.items():
                if processes:
                    said.append(f"{host}: {label} {', '.join(sorted(set(processes)))}")
        for host, processes in self.left.items():
            said.append(f"{host}: still running: {', '.join(processes)}")
        for host, why in self.unreachable.items():
            said.append(f"{host}: could not be reached ({why}); its processes may still run")
        for why in self.garbled.values():
            said.append(f"{why}; its processes may still run")
        return said

    async def ask(self, host: str, question: Awaitable[_T]) -> _T | None:
        """``host``'s answer to ``question``, or None with why kept here: an unreachable host,
        garbage or an answer that could not be read is that host's finding alone."""
        self.unreachable.pop(host, None)
        self.garbled.pop(host, None)
        try:
            return await question
        except GarbledAnswer as error:
            self.garbled[host] = str(error)
        except NodeError as error:
            self.unreachable[host] = str(error)
        except Exception as error:
            self.garbled[host] = described(host, error)
        return None


def _hosts(config: Config, record: RunRecord) -> dict[str, HostConfig]:
    return {node.host: config.host(node.host) for node in record.nodes}


def _run_dirs(record: RunRecord) -> dict[str, str]:
    return {node.host: node.run_dir for node in record.nodes}


def _attempts(record: RunRecord) -> int:
    """How many attempts the record knows: a host that reports more answered garbage."""
    return record.attempt.number if record.attempts else 0


async def live(
    remote: Transport,
    config: Config,
    record: RunRecord,
    report: StopReport,
    skip: Collection[str] = (),
    wait: float = 0.0,
    linger: float | None = None,
) -> dict[str, list[AttemptStatus]]:
    """Host → the run's attempts that still have processes there (``skip``: hosts not asked).

    With ``wait``, each host answers once nothing of the run is left there (or, with
    ``linger``, nothing that is a rank's for that long), or after ``wait``. Hosts that could
    not say are in ``report`` (``unreachable``, ``garbled``) instead.
    """
    hosts = _hosts(config, record)
    known = _attempts(record)
    found: dict[str, list[AttemptStatus]] = {}

    async def one(name: str, run_dir: str) -> None:
        attempts = await report.ask(
            name,
            nodes.status(remote, hosts[name], run_dir, wait=wait, linger=linger, attempts=known),
        )
        if attempts is None:
            return
        running = [item for item in attempts if item.alive and item.processes]
        if running:
            found[name] = running
        else:
            found.pop(name, None)

    await asyncio.gather(
        *(one(node.host, node.run_dir) for node in record.nodes if node.host not in skip)
    )
    return found


def _launchers_only(running: dict[str, list[AttemptStatus]]) -> bool:
    """Whether no rank is left of what still runs (every host said how many are ranks')."""
    return all(item.ranks == 0 for attempts in running.values() for item in attempts)


async def _wait_gone(
    remote: Transport,
    config: Config,
    record: RunRecord,
    report: StopReport,
    seconds: float,
    skip: Collection[str] = (),
    linger: float | None = None,
) -> dict[str, list[AttemptStatus]]:
    return await live(remote, config, record, report, skip, wait=seconds, linger=linger)


async def _signal(
    remote: Transport,
    config: Config,
    record: RunRecord,
    report: StopReport,
    hosts: Collection[str],
    name: str,
    into: dict[str, list[str]],
) -> None:
    by_name = _hosts(config, record)
    run_dirs = _run_dirs(record)
    known = _attempts(record)

    async def one(host: str) -> None:
        reached = await report.ask(
            host,
            nodes.send_signal(remote, by_name[host], run_dirs[host], name, attempts=known),
        )
        if reached is not None:
            into[host] = reached

    await asyncio.gather(*(one(host) for host in hosts))


async def terminate(
    remote: Transport,
    config: Config,
    record: RunRecord,
    *,
    grace: float,
    skip: Collection[str] = (),
    report: StopReport | None = None,
    rescue: bool = False,
) -> StopReport:
    """SIGTERM every live process group of the run, SIGKILL what is left after ``grace``.

    With ``rescue`` (the bundled trainer's failed attempt), the ranks are first asked for a
    rescue checkpoint (``control/rescue`` on each host: see ``trainer/rescue.py``): the ranks
    that outlived the failure write the last step they finished and end themselves.

    Hosts in ``skip`` (not answering) are left alone: the report says nothing about them.
    Hosts whose answer was garbage get the signals too: what runs there is not known, and a
    signal that reaches nothing costs nothing.
    """
    report = report or StopReport()
    running = await live(remote, config, record, report, skip)
    if running and rescue:
        hosts, run_dirs = _hosts(config, record), _run_dirs(record)
        await asyncio.gather(
            *(
                report.ask(host, nodes.request(remote, hosts[host], run_dirs[host], "rescue"))
                for host in running
            )
        )
    if running or report.garbled:
        targets = [*running, *report.garbled]
        await _signal(remote, config, record, report, targets, "TERM", report.terminated)
        running = await _wait_gone(remote, config, record, report, grace, skip)
    if running or report.garbled:
        targets = [*running, *report.garbled]
        await _signal(remote, config, record, report, targets, "KILL", report.killed)
        running = await _wait_gone(remote, config, record, report, KILL_WAIT_S, skip)
    report.left = {
        host: [name for item in attempts for _, name in item.processes]
        for host, attempts in running.items()
    }
    return report


async def stop_nodes(
    remote: Transport,
    config: Config,
    record: RunRecord,
    *,
    kill: bool = False,
    graceful: bool = True,
    say: Callable[[str], None] = lambda line: None,
) -> StopReport:
    """Stop ``record``'s processes on every host and confirm nothing of the run is left.

    ``graceful`` (the bundled trainer, still running) asks the trainer to checkpoint and stop
    first and waits up to ``[job] stop_grace_s``; ``kill`` sends SIGTERM and SIGKILL at once.
    """
    began = time.monotonic()
    grace = config.job.stop_grace_s
    report = StopReport()
    if graceful and not kill:
        head = record.head
        await report.ask(
            head.host, nodes.request(remote, config.host(head.host), head.run_dir, "stop")
        )
        why = report.unreachable.get(head.host) or report.garbled.get(head.host)
        if why:
            say(f"could not ask the trainer to stop: {why}")
        else:
            say(f"asked the trainer to checkpoint and stop (waiting up to {grace:g} s)")
            running = await _wait_gone(
                remote, config, record, report, grace, linger=RANKS_GONE_LINGER_S
            )
            if running and _launchers_only(running):
                # A host whose ranks ended last may have released the others' barrier just now.
                running = await _wait_gone(remote, config, record, report, RANKS_GONE_LINGER_S)
            answered = not report.unreachable and not report.garbled
            report.graceful = not running and answered
            if running and answered and _launchers_only(running):
                report.outlived = sorted(running)
                grace = KILL_WAIT_S
                say(f"torchrun outlives every rank on {', '.join(report.outlived)}: ending it")
    if not report.graceful:
        if not kill and not report.outlived:
            say("sending SIGTERM to the run's processes")
        await terminate(remote, config, record, grace=0.0 if kill else grace, report=report)
    report.seconds = time.monotonic() - began
    return report
