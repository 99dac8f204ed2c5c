"""The cluster health check: reach every host, probe it, test node 0's port, evaluate.

This is the I/O half of ``ddptui check``; :mod:`ddptui.health` is the pure half. Both the
command line and the console call :func:`check_cluster`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.config.model import AUTO, Config, HostConfig
from ddptui.facts import ProbeError, clock_offset, parse_facts
from ddptui.health import Finding, HostCheck, Severity, evaluate
from ddptui.probe import PROBE_SOURCE, probe_args
from ddptui.remote.commands import CommandResult, classify_python_failure, python_argv
from ddptui.remote.connection import RemoteCluster, RemoteError
from ddptui.remote.status import Reach, Reachability

PROBE_TIMEOUT_S = 60.0
"""The probe imports torch (bounded by its own timeout) and lists packages: seconds, not minutes."""

PORT_TEST_CONNECT_TIMEOUT_S = 3.0

# Both scripts run on the host's Python with the standard library only, like the probe.
_LISTENER = """\
import socket, sys, time
port, seconds, expected = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    server.bind(("", port))
except OSError as error:
    print("error", error, flush=True)
    sys.exit(1)
server.listen(64)
server.settimeout(0.2)
print("ready", server.getsockname()[1], flush=True)
deadline, accepted = time.time() + seconds, 0
while accepted < expected and time.time() < deadline:
    try:
        peer = server.accept()[0]
    except socket.timeout:
        continue
    # The worker hangs up first, so its side keeps TIME_WAIT and the master port stays free.
    peer.settimeout(2)
    try:
        peer.recv(1)
    except OSError:
        pass
    peer.close()
    accepted += 1
"""

_CONNECT = """\
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as error:
    print(error)
    sys.exit(3)
"""
_CONNECT_FAILED = 3

Progress = Callable[[str, str], None]
"""Called with a host's name and what just happened to it ("connected", "probed", …)."""


@dataclass(frozen=True)
class CheckReport:
    """Every host's check and the findings over all of them."""

    config: Config
    checks: tuple[HostCheck, ...]
    """In node-rank order: node 0 first."""
    findings: tuple[Finding, ...]
    elapsed_s: float

    @property
    def healthy(self) -> bool:
        """No finding of severity error."""
        return not any(finding.severity is Severity.ERROR for finding in self.findings)

    def to_json(self) -> dict[str, Any]:
        """The ``ddptui check --json`` document (DESIGN.md)."""
        return {
            "healthy": self.healthy,
            "hosts": [
                {
                    "name": check.host.name,
                    "address": check.host.address,
                    "node_rank": rank,
                    "reachable": check.reach.ok,
                    "reach": check.reach.reach.value,
                    "detail": check.reach.detail,
                    "clock_offset_s": check.clock_offset_s,
                    "master_port_reachable": check.master_port_reachable,
                    "facts": None if check.facts is None else check.facts.to_json(),
                }
                for rank, check in enumerate(self.checks)
            ],
            "findings": [finding.to_json() for finding in self.findings],
            "elapsed_s": round(self.elapsed_s, 3),
        }


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
                head.host, "-c", _LISTENER, str(listen_port), f"{seconds:g}", str(len(workers))
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
        python_argv(worker, "-c", _CONNECT, address, str(port), f"{PORT_TEST_CONNECT_TIMEOUT_S:g}"),
        timeout=PORT_TEST_CONNECT_TIMEOUT_S + 30.0,
    )
    if result.exit_status == 0:
        return True
    if result.exit_status == _CONNECT_FAILED:
        return False
    return None
