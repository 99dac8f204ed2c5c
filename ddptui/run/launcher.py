"""Starting a run: plan, record, stage the code, start every node detached; and resuming one.

Nothing here waits for the training: once every node's torchrun is started (in its own session,
stdio in files), the run goes on whatever happens to this process or its SSH connections.
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ddptui.check import CheckReport
from ddptui.config.model import AUTO, Config, HostConfig
from ddptui.config.render import config_to_toml
from ddptui.errors import DdptuiError
from ddptui.plan.launch import (
    AUTO_PORT_PLACEHOLDER,
    DEBUG_ENV,
    LaunchPlan,
    plan_launch,
    torchrun_flag,
    with_master_port,
)
from ddptui.probe.facts import NA, HostFacts
from ddptui.remote.commands import posix_script
from ddptui.remote.connection import RemoteCluster
from ddptui.run import nodes
from ddptui.run.nodes import NodeError
from ddptui.run.store import Attempt, NodeRecord, RunRecord, RunState, RunStore, new_run_id

Say = Callable[[str], None]
"""Progress for people: one short line per step (hosts staged, nodes started…)."""


class LaunchError(DdptuiError):
    """The run could not start; nothing of it is left running."""


def versions(facts: HostFacts | None) -> dict[str, str]:
    """What the check learnt of a host's stack, for the run record."""
    if facts is None:
        return {}
    found = {
        "python": facts.python.version,
        "torch": facts.torch.version,
        "cuda": facts.torch.cuda_build,
        "nccl": facts.torch.nccl_version,
        "driver": facts.gpus.driver_version,
    }
    return {key: str(value) for key, value in found.items() if value not in (None, NA)}


def make_plan(
    config: Config,
    report: CheckReport,
    *,
    run_id: str | None = None,
    extra_args: Sequence[str] = (),
    debug: bool = False,
) -> LaunchPlan:
    return plan_launch(
        config,
        report.checks,
        run_id=run_id or new_run_id(),
        extra_args=extra_args,
        debug=debug,
    )


def describe_plan(plan: LaunchPlan) -> str:
    """Per host, the exact directory, environment and command that run there (``--dry-run``),
    as shell lines a person can paste into a terminal on that host or a bug report."""
    lines = [
        f"run {plan.run_id}: {len(plan.nodes)} node(s), world size {plan.world_size}, "
        f"backend {plan.backend}, master {plan.master_addr}:{plan.master_port}",
    ]
    if plan.master_port == AUTO:
        lines.append(f"  ({AUTO_PORT_PLACEHOLDER} is a port found free on node 0 at launch)")
    for node in plan.nodes:
        exports, _, command = posix_script(node.argv, node.env).partition("; ")
        lines += [
            "",
            f"# node {node.node_rank}: {node.host.name} ({node.host.address}), "
            f"{node.nproc} process(es)",
            f"cd {shlex.quote(node.code_dir)}",
            exports,
            command,
        ]
    return "\n".join(lines)


async def launch(
    config: Config,
    report: CheckReport,
    plan: LaunchPlan,
    store: RunStore,
    remote: RemoteCluster,
    *,
    say: Say,
    demo: bool = False,
) -> RunRecord:
    """Record, stage and start ``plan``; the record of the running run.

    Raises :class:`LaunchError` when it cannot start, after stopping whatever had started.
    """
    hosts = [node.host for node in plan.nodes]
    port = await _master_port(remote, plan)
    plan = with_master_port(plan, port)
    facts = {check.host.name: check.facts for check in report.checks}
    record = RunRecord(
        id=plan.run_id,
        created=time.time(),
        hosts_file=str(config.path),
        entry=plan.entry,
        backend=plan.backend,
        master_addr=plan.master_addr,
        world_size=plan.world_size,
        args=list(plan.args),
        nodes=[
            NodeRecord(
                host=node.host.name,
                address=node.host.address,
                node_rank=node.node_rank,
                nproc=node.nproc,
                run_dir=node.run_dir,
                argv=list(node.argv),
                env=dict(node.env),
                versions=versions(facts.get(node.host.name)),
            )
            for node in plan.nodes
        ],
        demo=demo,
    )
    record.transition(RunState.STAGING)
    store.create(record, config_to_toml(config))
    with tempfile.TemporaryDirectory(prefix="ddptui-code-") as directory:
        tree = Path(directory)
        manifest = nodes.build_code_tree(tree, plan.entry, config.job.script)
        say(f"staging {len(manifest)} file(s) on {len(hosts)} host(s)")
        try:
            await nodes.all_of(
                [
                    _stage_node(remote, node.host, node.run_dir, tree, manifest, record)
                    for node in plan.nodes
                ]
            )
        except NodeError as error:
            _fail(store, record, f"staging failed: {error}")
            raise LaunchError(f"staging failed: {error}") from None
    await start_attempt(remote, store, record, hosts, 1, port, say=say)
    return record


async def _stage_node(
    remote: RemoteCluster,
    host: HostConfig,
    run_dir: str,
    tree: Path,
    manifest: dict[str, str],
    record: RunRecord,
) -> None:
    await nodes.stage(remote, host, run_dir, tree, manifest)
    await nodes.put_record(remote, host, run_dir, record.to_toml())


async def _master_port(remote: RemoteCluster, plan: LaunchPlan) -> int:
    head = plan.head.host
    wanted = 0 if plan.master_port == AUTO else int(plan.master_port)
    try:
        return await nodes.free_port(remote, head, wanted)
    except NodeError as error:
        raise LaunchError(
            f'{error}; choose another cluster.master_port, or set it to "auto"'
            if wanted
            else str(error)
        ) from None


async def start_attempt(
    remote: RemoteCluster,
    store: RunStore,
    record: RunRecord,
    hosts: Sequence[HostConfig],
    attempt: int,
    port: int,
    *,
    say: Say,
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> None:
    """Start attempt ``attempt`` on every node at once; on any failure stop those that started.

    ``extra_args`` follow the recorded command (a resume's ``--resume latest``); ``extra_env``
    goes over the recorded environment (``--debug``).
    """
    record.attempts.append(Attempt(number=attempt, started=time.time(), master_port=port))
    record.transition(RunState.STARTING, f"attempt {attempt}")
    store.save(record)
    by_name = {host.name: host for host in hosts}
    say(f"starting attempt {attempt} on {len(hosts)} host(s), master port {port}")
    results = await asyncio.gather(
        *(
            nodes.start(
                remote,
                by_name[node.host],
                node.run_dir,
                attempt,
                {**node.env, **(extra_env or {})},
                [*attempt_argv(node.argv, node.run_dir, attempt, port), *extra_args],
            )
            for node in record.nodes
        ),
        return_exceptions=True,
    )
    errors = [result for result in results if isinstance(result, BaseException)]
    if errors:
        detail = "; ".join(str(error) for error in errors)
        await asyncio.gather(
            *(
                nodes.send_signal(remote, by_name[node.host], node.run_dir, "KILL")
                for node, result in zip(record.nodes, results, strict=True)
                if not isinstance(result, BaseException)
            ),
            return_exceptions=True,
        )
        _fail(store, record, f"start failed: {detail}")
        raise LaunchError(f"start failed: {detail}")
    record.transition(RunState.RUNNING, f"attempt {attempt}")
    store.save(record)


def attempt_argv(argv: Sequence[str], run_dir: str, attempt: int, port: int) -> list[str]:
    """The recorded command with this attempt's log directory and master port."""
    updated = torchrun_flag(argv, "--master-port", str(port))
    return torchrun_flag(updated, "--log-dir", f"{run_dir}/logs/attempt-{attempt}")


def _fail(store: RunStore, record: RunRecord, detail: str) -> None:
    if record.attempts and record.attempt.ended is None:
        record.attempt.ended = time.time()
        record.attempt.outcome = RunState.FAILED.value
        record.attempt.detail = detail
    record.transition(RunState.FAILED, detail)
    store.save(record)


async def resume(
    config: Config,
    record: RunRecord,
    store: RunStore,
    remote: RemoteCluster,
    *,
    say: Say,
    debug: bool = False,
) -> RunRecord:
    """Start a new attempt of a stopped or failed run, from node 0's newest valid checkpoint.

    The same hosts, ranks and command as before, with ``[job] resume_args`` added (the trainer
    finds its checkpoint with ``--resume latest``); a process left by an earlier attempt (a host
    that was cut off while the others stopped) is ended first.
    """
    from ddptui.run.stopper import StopReport, live, terminate

    if not record.state.final:
        raise LaunchError(
            f"run {record.id} is {record.state.value}; stop it first (ddptui stop {record.id})"
        )
    hosts = [config.host(node.host) for node in record.nodes]
    report = StopReport()
    leftovers = await live(remote, config, record, report)
    if report.unreachable:
        hosts_down = ", ".join(sorted(report.unreachable))
        raise LaunchError(f"cannot resume while {hosts_down} cannot be reached")
    if leftovers:
        say(f"ending what earlier attempts left on {', '.join(sorted(leftovers))}")
        await terminate(remote, config, record, grace=5.0, report=report)
        if report.left:
            raise LaunchError(
                "processes of an earlier attempt would not die: " + "; ".join(report.lines())
            )
    attempt = record.attempt.number + 1 if record.attempts else 1
    wanted = 0 if config.cluster.master_port == AUTO else int(config.cluster.master_port)
    try:
        port = await nodes.free_port(remote, hosts[0], wanted)
    except NodeError as error:
        raise LaunchError(str(error)) from None
    await start_attempt(
        remote,
        store,
        record,
        hosts,
        attempt,
        port,
        say=say,
        extra_args=config.job.resume_args,
        extra_env=DEBUG_ENV if debug else None,
    )
    return record
