"""The cluster health check: reach every host, probe it, test node 0's port, evaluate.

This is the I/O half of ``ddptui check``; :mod:`ddptui.health` is the pure half. Both the
command line and the console call :func:`check_cluster`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence

import asyncssh

from ddptui.aio import wait_for
from ddptui.check.report import CheckReport, PortTest
from ddptui.check.scripts import CONNECT, CONNECT_FAILED, LISTENER
from ddptui.config.model import AUTO, Config, HostConfig
from ddptui.health import Finding, HostCheck, ProbeFailure, evaluate
from ddptui.probe import PROBE_SOURCE, probe_args
from ddptui.probe.facts import clock_offset
from ddptui.probe.parse import ProbeError, parse_facts
from ddptui.remote.commands import CommandResult, classify_python_failure, python_argv
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.status import Reachability
from ddptui.remote.transport import RemoteError, Transport
from ddptui.untrusted import plain

PROBE_TIMEOUT_S = 60.0
"""How long node 0's port-test listener may take to start, and the probe's bound besides its
``import torch`` (which ``cluster.torch_import_timeout`` bounds): its other sections take
seconds."""

PORT_TEST_CONNECT_TIMEOUT_S = 3.0

STDERR_TAIL_LINES = 5

_READY = re.compile(r"ready ([0-9]{1,5})")
"""What the port-test listener prints once it listens (scripts.LISTENER)."""
_MAX_LINES_BEFORE_READY = 50


Progress = Callable[[str, str], None]
"""Called with a host's name and what just happened to it ("connected", "probed", …)."""


async def check_cluster(config: Config, progress: Progress | None = None) -> CheckReport:
    """Check every host of ``config`` at once; never raises for a host's problems."""
    started, began_at = time.monotonic(), time.time()
    notify = progress or (lambda host, event: None)
    hosts = config.checked_hosts
    async with RemoteCluster.for_config(config) as remote:
        checks = await asyncio.gather(
            *(_check_host(remote, config, host, notify) for host in hosts)
        )
        checks, port_test = await _test_master_port(remote, config, checks, notify)
    checks = shared_workdirs(checks)
    findings = evaluate(config, checks)
    elapsed = time.monotonic() - started
    return CheckReport(config, tuple(checks), tuple(findings), elapsed, port_test, began_at)


async def check_nodes(
    config: Config, remote: Transport, progress: Progress | None = None
) -> tuple[list[HostCheck], list[Finding]]:
    """Probe every host of ``config`` through ``remote`` (a Slurm job's nodes, through its
    ``srun`` steps) and evaluate them as the check does, without the port and shared-workdir
    tests: the nodes' stacks, GPUs and network."""
    notify = progress or (lambda host, event: None)
    checks = await asyncio.gather(
        *(
            _check_host(remote, config, host, notify, port_test=False)
            for host in config.ordered_hosts
        )
    )
    return list(checks), evaluate(config, checks)


async def _check_host(
    remote: Transport,
    config: Config,
    host: HostConfig,
    notify: Progress,
    *,
    port_test: bool = True,
) -> HostCheck:
    reach = await remote.connect(host)
    if not reach.ok:
        notify(host.name, reach.reach.value)
        return HostCheck(host, reach)
    notify(host.name, "connected")
    connected_at = time.time()
    is_head = host is config.head
    port = config.cluster.master_port
    argv = remote.python(
        host,
        "-",
        *probe_args(
            host.workdir,
            master_port=port if is_head and port != AUTO and port_test else None,
            master_addr=config.head.address,
            torch_timeout=config.cluster.torch_import_timeout,
        ),
    )
    probe_timeout = PROBE_TIMEOUT_S + config.cluster.torch_import_timeout
    result = await remote.run(host, argv, input=PROBE_SOURCE, timeout=probe_timeout, env=host.env)
    received_at = time.time()
    failure = result.reach or classify_python_failure(host, result)
    if failure is not None:
        notify(host.name, failure.reach.value)
        return HostCheck(host, _with_stderr(failure, result.stderr))
    # SSH and the interpreter worked from here on: whatever fails is the probe's, not the link's.
    if result.timed_out:
        why = _probe_failure(result, f"it did not finish in {probe_timeout:g} s")
    elif result.overflow is not None:
        why = _probe_failure(result, f"the host {result.overflow}, so it was hung up on")
    elif result.exit_status != 0:
        why = _probe_failure(result, "it exited with an error")
    else:
        try:
            facts = parse_facts(result.stdout)
        except ProbeError as error:
            why = _probe_failure(result, str(error))
        else:
            notify(host.name, "probed")
            offset = (
                clock_offset(facts.time, received_at) if isinstance(facts.time, float) else None
            )
            return HostCheck(
                host,
                reach,
                facts,
                clock_offset_s=offset,
                connected_at=connected_at,
                probed_at=received_at,
                probe_output=result.stdout,
            )
    notify(host.name, "probe failed")
    return HostCheck(host, reach, probe_failure=why)


def _probe_failure(result: CommandResult, reason: str) -> ProbeFailure:
    return ProbeFailure(
        plain(reason, limit=300, one_line=True),
        None if result.timed_out else result.exit_status,
        plain(_tail(result.stderr), limit=STDERR_TAIL_LINES * 200),
    )


def _tail(stderr: str) -> str:
    return "\n".join(stderr.strip().splitlines()[-STDERR_TAIL_LINES:])


def _with_stderr(failure: Reachability, stderr: str) -> Reachability:
    tail = _tail(stderr)
    if not tail or tail in failure.detail:
        return failure
    return dataclasses.replace(failure, detail=f"{failure.detail}\n{tail}")


def shared_workdirs(checks: Sequence[HostCheck]) -> list[HostCheck]:
    """Each probed host's :attr:`~HostCheck.workdir_shared_with`: the other hosts whose
    workdir has the same identity (the probe's, kept in the workdir itself)."""
    names: dict[str, list[str]] = {}
    for check in checks:
        if (identity := _workdir_identity(check)) is not None:
            names.setdefault(identity, []).append(check.host.name)
    found = []
    for check in checks:
        identity = _workdir_identity(check)
        sharing = names[identity] if identity is not None else []
        others = tuple(name for name in sharing if name != check.host.name)
        found.append(dataclasses.replace(check, workdir_shared_with=others) if others else check)
    return found


def _workdir_identity(check: HostCheck) -> str | None:
    if check.facts is None or not isinstance(check.facts.workdir_identity, str):
        return None
    return check.facts.workdir_identity


async def _test_master_port(
    remote: RemoteCluster, config: Config, checks: Sequence[HostCheck], notify: Progress
) -> tuple[list[HostCheck], PortTest]:
    """Listen on node 0's master port for a moment and let every worker connect to it.

    A firewall between the nodes shows up here, before torchrun hangs on it.
    """
    head, workers = checks[0], [check for check in checks[1:] if check.facts is not None]
    port = config.cluster.master_port
    skipped = _port_test_skipped(checks, workers)
    if skipped:
        return list(checks), PortTest(ran=False, why=skipped)
    listen_port = 0 if port == AUTO else port
    seconds = PORT_TEST_CONNECT_TIMEOUT_S + config.cluster.connect_timeout + 5.0
    try:
        listener = await remote.start_process(
            head.host,
            python_argv(
                head.host, "-c", LISTENER, str(listen_port), f"{seconds:g}", str(len(workers))
            ),
        )
    except RemoteError as error:
        why = plain(f"the test listener could not start on node 0: {error}", one_line=True)
        return list(checks), PortTest(ran=False, why=why)
    try:
        bound, last = await _listening_port(listener.lines(), timeout=PROBE_TIMEOUT_S)
        if bound is None:
            why = f"the test listener on node 0 did not start listening: {last or 'no output'}"
            return list(checks), PortTest(ran=False, why=plain(why, limit=300, one_line=True))
        notify(head.host.name, f"listening on {bound}")
        results = await asyncio.gather(
            *(_can_connect(remote, check.host, head.host.address, bound) for check in workers)
        )
    finally:
        await listener.close()
    reachable = {check.host.name: ok for check, ok in zip(workers, results, strict=True)}
    tested = [
        dataclasses.replace(check, master_port_reachable=reachable[check.host.name])
        if check.host.name in reachable
        else check
        for check in checks
    ]
    return tested, PortTest(ran=True)


def _port_test_skipped(checks: Sequence[HostCheck], workers: Sequence[HostCheck]) -> str:
    """Why the port test cannot run, or "" when it can."""
    head = checks[0]
    if len(checks) == 1:
        return "a one-host cluster: no worker connects to node 0 over the network"
    if head.facts is None:
        return f"node 0 ({head.host.name}) was not probed"
    if head.facts.port is not None and head.facts.port.in_use is True:
        return f"node 0's port {head.facts.port.port} is in use"
    if not workers:
        return "no worker was probed"
    return ""


async def _listening_port(lines: AsyncIterator[str], *, timeout: float) -> tuple[int | None, str]:
    """The port node 0's listener reports, and the last line read (or how the connection
    was lost).

    Lines a login shell prints first (a banner, a motd) are skipped, up to a few; anything
    else — an error, silence for ``timeout`` seconds, a garbled line, a lost connection —
    gives None.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = ""
    for _ in range(_MAX_LINES_BEFORE_READY):
        try:
            line = await wait_for(anext(lines), max(deadline - loop.time(), 0))
        except (StopAsyncIteration, asyncio.TimeoutError):
            break
        except (asyncssh.Error, OSError) as error:
            return None, f"the connection was lost: {error}"
        last = line.strip()
        ready = _READY.fullmatch(last)
        if ready is not None:
            return int(ready[1]), last
        if last.startswith("error "):
            break
    return None, last


async def _can_connect(
    remote: RemoteCluster, worker: HostConfig, address: str, port: int
) -> bool | None:
    result = await remote.run(
        worker,
        python_argv(worker, "-c", CONNECT, address, str(port), f"{PORT_TEST_CONNECT_TIMEOUT_S:g}"),
        timeout=PORT_TEST_CONNECT_TIMEOUT_S + 30.0,
    )
    if result.exit_status == 0:
        return True
    if result.exit_status == CONNECT_FAILED:
        return False
    return None
