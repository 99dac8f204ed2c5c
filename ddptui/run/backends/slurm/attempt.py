"""A Slurm run's part of the supervisor's work: submit an attempt's job and wait for its
allocation, learn its nodes, stop it the scheduler's way, and say why Slurm ended it.

Slurm's commands are blocking programs; each runs in a thread, so the supervisor's loop (its
followers, its viewers) goes on meanwhile. What changes the record stays the supervisor's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from ddptui import layout
from ddptui.atomic import WORKDIR_FILE, write_atomic
from ddptui.check.run import check_nodes
from ddptui.config.model import Config
from ddptui.errors import DdptuiError
from ddptui.health import Finding, HostCheck
from ddptui.health.slurm import SlurmNode, in_allocation
from ddptui.plan.launch import job_entry
from ddptui.plan.slurm import BatchPlan, plan_batch
from ddptui.remote.srun import SrunCluster
from ddptui.remote.transport import Transport
from ddptui.run.agent import client as nodes
from ddptui.run.backends.slurm import commands
from ddptui.run.backends.slurm.job import SlurmJob
from ddptui.run.code.contents import CodeTree, job_code
from ddptui.run.record import NodeRecord, RunRecord, RunState
from ddptui.run.stopper import StopReport

POLL_S = 2.0
"""How often the supervisor asks after a job: squeue's users poll no faster."""
END_WAIT_S = 30.0
"""How long a cancelled job gets to end: Slurm's ``KillWait`` (30 s by default) and a poll."""

Say = Callable[[str], None]


class SlurmRunError(DdptuiError):
    """A job could not be submitted, or ended before it ran; the message says what Slurm said."""


def workdir(config: Config) -> str:
    """The shared workdir as an absolute path (``~`` is the login node's home, which the nodes
    share)."""
    assert config.node is not None
    return str(Path(config.node.workdir).expanduser())


def run_root(config: Config, record: RunRecord) -> str:
    return layout.run_root(workdir(config), record.id)


def extra_args(config: Config, record: RunRecord) -> list[str]:
    """The arguments given at launch beyond ``[job] args``."""
    return record.args[len(config.job.args) :]


def new_record(config: Config, plan: BatchPlan, extra: Sequence[str]) -> RunRecord:
    """The record of a Slurm run about to be staged; its nodes are the allocation's, known
    once its job runs."""
    record = RunRecord(
        id=plan.run_id,
        created=time.time(),
        hosts_file=str(config.path),
        entry=job_entry(config),
        backend=plan.backend,
        master_addr="",
        world_size=plan.world_size,
        args=[*config.job.args, *extra],
        nodes=[],
        loss_pattern=config.job.loss_pattern,
    )
    record.transition(RunState.STAGING, f"staging the code in {plan.run_root}")
    return record


async def submit(
    config: Config, record: RunRecord, attempt: int, *, debug: bool = False
) -> tuple[str, str]:
    """Submit ``attempt``'s job (the first stages the code; a later one resumes from the
    newest checkpoint); its id and the script's path."""
    plan = plan_batch(
        config,
        run_id=record.id,
        workdir=workdir(config),
        attempt=attempt,
        extra_args=extra_args(config, record),
        debug=debug,
        set_aside=[aside.host for aside in record.set_aside],
    )
    code: CodeTree | None = job_code(config.job) if attempt == 1 else None
    try:
        job_id = await asyncio.to_thread(commands.submit, plan, code)
    except DdptuiError as error:
        raise SlurmRunError(str(error)) from None
    return job_id, plan.script_path


def name_nodes(config: Config, record: RunRecord, attempt: int, names: Sequence[str]) -> None:
    """Name the nodes of ``attempt``, node 0 first, where the job's script waits for them
    after a failed attempt (:func:`~ddptui.plan.slurm.plan_batch`): the attempt starts."""
    path = Path(layout.slurm_nodes(run_root(config, record), attempt))
    write_atomic(path, " ".join(names) + "\n", WORKDIR_FILE)


def name_set_aside(config: Config, record: RunRecord, names: Sequence[str]) -> None:
    """The nodes recovery set aside, where a requeued start of the job leaves them out."""
    path = Path(layout.slurm_set_aside(run_root(config, record)))
    write_atomic(path, "".join(f"{name}\n" for name in names), WORKDIR_FILE)


async def job(job_id: str) -> SlurmJob | None:
    """The job as Slurm has it (None: forgotten);
    :class:`~ddptui.run.backends.slurm.commands.SlurmError` when the controller does not
    answer."""
    return await asyncio.to_thread(commands.job, job_id)


async def until_running(job_id: str, say: Say, cancelled: Callable[[], bool]) -> SlurmJob:
    """Wait for the job to run, saying its queue state whenever it changes; the running job.
    :class:`SlurmRunError` when it ended (or was forgotten) before it ran, or ``cancelled()``."""
    said = None
    while True:
        if cancelled():
            raise SlurmRunError(f"job {job_id} was cancelled before it ran")
        try:
            found = await job(job_id)
        except commands.SlurmError as error:
            # A controller restarting or busy: the job is queued all the same.
            found, line = None, f"{error}; asking again in {POLL_S:g} s"
        else:
            if found is None:
                raise SlurmRunError(f"Slurm no longer knows job {job_id}: it ended before it ran")
            line = found.describe()
        if line != said:
            say(line)
            said = line
        if found is not None and found.state == "RUNNING" and found.nodes:
            return found
        if found is not None and found.ended:
            raise SlurmRunError(f"{line} before it ran")
        await asyncio.sleep(POLL_S)


async def allocation(config: Config, record: RunRecord, running: SlurmJob) -> list[NodeRecord]:
    """The run's nodes in the job's allocation, node 0 first, as its batch script picks them:
    the first of Slurm's node list but for those recovery set aside (the rest are spares)."""
    assert running.nodes is not None and config.slurm is not None
    aside = {entry.host for entry in record.set_aside}
    listed = await asyncio.to_thread(commands.hostnames, running.nodes)
    names = [name for name in listed if name not in aside][: config.slurm.nodes]
    found = await asyncio.to_thread(commands.addresses, names)
    nproc = record.world_size // max(len(names), 1)
    root = run_root(config, record)
    return [
        NodeRecord(
            host=name,
            address=found.get(name, name),
            node_rank=rank,
            nproc=nproc,
            run_dir=layout.node_dir(root, rank),
            argv=[],
            env={},
        )
        for rank, name in enumerate(names)
    ]


async def check_allocation(
    config: Config, record: RunRecord
) -> tuple[list[HostCheck], list[Finding]]:
    """The check inside the job's allocation: the probe on every node of ``record`` through
    ``srun`` steps, evaluated as ``ddptui check`` evaluates hosts (node 0 at its ``NodeAddr``)."""
    hosts = tuple(replace(config.host(node.host), address=node.address) for node in record.nodes)
    # Never this machine in a node's stead: a job that ends meanwhile fails its probes.
    nodes = SrunCluster(record.job_id)
    checks, findings = await check_nodes(replace(config, hosts=hosts), nodes)
    return checks, in_allocation(findings)


async def lost_nodes(names: Sequence[str]) -> list[SlurmNode]:
    """Those of ``names`` Slurm has lost (down, not responding, failing) now."""
    try:
        states = await asyncio.to_thread(commands.node_states, names)
    except commands.SlurmError:
        return []
    return [node for node in states if node.state.endswith("*") or node.state.startswith("down")]


async def cancel(job_id: str, signal: str | None = None) -> str | None:
    """``scancel`` (with ``signal``: to the job's steps); what went wrong, or None."""
    try:
        await asyncio.to_thread(commands.cancel, job_id, signal)
    except commands.SlurmError as error:
        return str(error)
    return None


async def wait_ended(job_id: str, seconds: float) -> bool:
    """Whether the job has ended (or waits in the queue again) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(commands.SlurmError):
            found = await job(job_id)
            if found is None or found.ended or found.pending:
                return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(1.0)


async def stop(
    remote: Transport,
    config: Config,
    record: RunRecord,
    *,
    kill: bool,
    graceful: bool,
    say: Say,
) -> StopReport:
    """Stop a Slurm run the scheduler's way: ask the trainer to checkpoint and stop (node 0's
    ``control/stop``, through the node agent), then ``scancel --signal=TERM`` (torchrun passes
    it on to its ranks), then ``scancel``; the report names the job if it is not over."""
    began = time.monotonic()
    report = StopReport()
    job_id = record.job_id
    assert job_id is not None
    where = f"Slurm job {job_id}"
    grace = config.job.stop_grace_s
    if graceful and not kill and record.nodes:
        head = record.head
        await report.ask(
            head.host, nodes.request(remote, config.host(head.host), head.run_dir, "stop")
        )
        why = report.unreachable.pop(head.host, None) or report.garbled.pop(head.host, None)
        if why:
            say(f"could not ask the trainer to stop: {why}")
        else:
            say(f"asked the trainer to checkpoint and stop (waiting up to {grace:g} s)")
            report.graceful = await wait_ended(job_id, grace)
    if not report.graceful:
        gone = False
        if not kill:
            say(f"sending SIGTERM to the job's steps (scancel --signal=TERM {job_id})")
            failed = await cancel(job_id, "TERM")
            report.terminated[where] = [failed or "every node's torchrun and its ranks"]
            gone = failed is None and await wait_ended(job_id, grace)
        if not gone:
            say(f"cancelling the job (scancel {job_id})")
            failed = await cancel(job_id)
            report.killed[where] = [failed or "the whole job"]
            gone = await wait_ended(job_id, END_WAIT_S)
        if not gone:
            report.left[where] = [f"job {job_id} still runs after scancel"]
    report.seconds = time.monotonic() - began
    return report


def lost_words(node: SlurmNode) -> str:
    """A lost node's state as Slurm gives it: ``down*: Not responding``."""
    return f"{node.state}{': ' + node.reason if node.reason else ''}"


def ended_words(job_id: str, found: SlurmJob | None, lost: Sequence[SlurmNode]) -> str:
    """Why the run ended, as Slurm tells it: the nodes it lost first (by name), else the job's
    state."""
    if lost:
        named = ", ".join(f"{node.name} ({lost_words(node)})" for node in lost)
        return f"Slurm lost {named}; it ended job {job_id} on the other nodes"
    if found is None:
        return f"Slurm ended job {job_id} (it no longer knows the job)"
    return f"Slurm ended {found.describe()}"
