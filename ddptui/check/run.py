"""The cluster health check: reach every host, probe it, test node 0's port, evaluate.

This is the I/O half of ``ddptui check``; :mod:`ddptui.health` is the pure half. Both the
command line and the console call :func:`check_cluster`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence

from ddptui.check.report import CheckReport
from ddptui.check.scripts import CONNECT, CONNECT_FAILED, LISTENER
from ddptui.config.model import AUTO, Config, HostConfig
from ddptui.health import HostCheck, evaluate
from ddptui.probe import PROBE_SOURCE, probe_args
from ddptui.probe.facts import ProbeError, clock_offset, parse_facts
from ddptui.remote.commands import CommandResult, classify_python_failure, python_argv
from ddptui.remote.connection import RemoteCluster, RemoteError
from ddptui.remote.status import Reach, Reachability

PROBE_TIMEOUT_S = 60.0
"""The probe imports torch (bounded by its own timeout) and lists packages: seconds, not minutes."""

PORT_TEST_CONNECT_TIMEOUT_S = 3.0


Progress = Callable[[str, str], None]
"""Called with a host's name and what just happened to it ("connected", "probed", …)."""


async def check_cluster(config: Config, progress: Progress | None = None) -> CheckReport:
    """Check every host of ``config`` at once; never raises for a host's problems."""
    started = time.monotonic()
    notify = progress or (lambda host, event: None)
    hosts = config.ordered_hosts
    async with RemoteCluster(
        hosts,
        connect_timeout=config.cluster.connect_timeout,
        max_parallel_connects=config.cluster.max_parallel_connects,
    ) as remote:
        checks = await asyncio.gather(
            *(_check_host(remote, config, host, notify) for host in hosts)
        )
        checks = await _test_master_port(remote, config, checks, notify)
    findings = evaluate(config, checks)
    return CheckReport(config, tuple(checks), tuple(findings), time.monotonic() - started)


async def _check_host(
    remote: RemoteCluster, config: Config, host: HostConfig, notify: Progress
) -> HostCheck:
    reach = await remote.connect(host)
    if not reach.ok:
        notify(host.name, reach.reach.value)
        return HostCheck(host, reach)
    notify(host.name, "connected")
    is_head = host is config.head
    port = config.cluster.master_port
    argv = python_argv(
        host,
        "-",
        *probe_args(
            host.workdir,
            master_port=port if is_head and port != AUTO else None,
            master_addr=config.head.address,
        ),
    )
    result = await remote.run(host, argv, input=PROBE_SOURCE, timeout=PROBE_TIMEOUT_S, env=host.env)
    received_at = time.time()
    failure = _run_failure(host, result)
    if failure is None:
        try:
            facts = parse_facts(result.stdout)
        except ProbeError as error:
            failure = Reachability(Reach.ERROR, f"the probe's output could not be read: {error}")
    if failure is not None:
        notify(host.name, failure.reach.value)
        return HostCheck(host, _with_stderr(failure, result.stderr))
    notify(host.name, "probed")
    offset = clock_offset(facts.time, received_at) if isinstance(facts.time, float) else None
    return HostCheck(host, reach, facts, clock_offset_s=offset)


def _run_failure(host: HostConfig, result: CommandResult) -> Reachability | None:
    if result.reach is not None:
        return result.reach
    if result.timed_out:
        return Reachability(Reach.ERROR, f"the probe did not finish in {PROBE_TIMEOUT_S:g} s")
    return classify_python_failure(host, result)


def _with_stderr(failure: Reachability, stderr: str) -> Reachability:
    tail = "\n".join(stderr.strip().splitlines()[-5:])
    if not tail or tail in failure.detail:
        return failure
    return dataclasses.replace(failure, detail=f"{failure.detail}\n{tail}")


async def _test_master_port(
    remote: RemoteCluster, config: Config, checks: Sequence[HostCheck], notify: Progress
) -> list[HostCheck]:
    """Listen on node 0's master port for a moment and let every worker connect to it.

    A firewall between the nodes shows up here, before torchrun hangs on it.
    """
    head, workers = checks[0], [check for check in checks[1:] if check.facts is not None]
    port = config.cluster.master_port
    head_port = head.facts.port if head.facts is not None else None
    if not workers or head.facts is None or (head_port is not None and head_port.in_use is True):
        return list(checks)
    listen_port = 0 if port == AUTO else port
    seconds = PORT_TEST_CONNECT_TIMEOUT_S + config.cluster.connect_timeout + 5.0
    try:
        listener = await remote.start_process(
            head.host,
            python_argv(
                head.host, "-c", LISTENER, str(listen_port), f"{seconds:g}", str(len(workers))
            ),
        )
    except RemoteError:
        return list(checks)
    try:
        ready = await _first_line(listener.lines(), timeout=PROBE_TIMEOUT_S)
        if not ready.startswith("ready "):
            return list(checks)
        bound = int(ready.split()[1])
        notify(head.host.name, f"listening on {bound}")
        results = await asyncio.gather(
            *(_can_connect(remote, check.host, head.host.address, bound) for check in workers)
        )
    finally:
        await listener.close()
    reachable = {check.host.name: ok for check, ok in zip(workers, results, strict=True)}
    return [
        dataclasses.replace(check, master_port_reachable=reachable[check.host.name])
        if check.host.name in reachable
        else check
        for check in checks
    ]


async def _first_line(lines: AsyncIterator[str], *, timeout: float) -> str:
    try:
        line: str = await asyncio.wait_for(anext(lines), timeout)
    except (StopAsyncIteration, asyncio.TimeoutError):
        return ""
    return line.strip()


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
