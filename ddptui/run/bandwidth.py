"""``ddptui check --bandwidth``'s I/O: the interconnect benchmark (:mod:`ddptui.onhost.bench`)
started on every host at once with a launch's backend, interface and environment, one process
per host meeting at node 0's address and a free port as torchrun's ranks do; node 0's result
read into a
:class:`~ddptui.health.bandwidth.BandwidthReport`."""

from __future__ import annotations

import asyncio

from ddptui.check import CheckReport
from ddptui.config import Config
from ddptui.health.bandwidth import BandwidthError, BandwidthReport, BenchError, read_result
from ddptui.layout import RUN_DIR_ENV, bench_path, workdir_of
from ddptui.plan.launch import LaunchPlan, plan_launch
from ddptui.remote.commands import python_argv
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.programs import source
from ddptui.run.agent import client as nodes
from ddptui.run.agent.call import NodeError, agent
from ddptui.run.store import new_run_id
from ddptui.untrusted import plain

BENCH_SOURCE: str = source("bench")
KIB, MIB = 1 << 10, 1 << 20
SIZES = {
    "gloo": tuple(64 * KIB * 4**step for step in range(6)),
    "nccl": tuple(MIB * 4**step for step in range(6)),
}
"""64 KiB to 64 MiB on gloo, 1 MiB to 1 GiB on NCCL."""
PAIR_BYTES = {"gloo": 4 * MIB, "nccl": 64 * MIB}
ITERATIONS = 3
BENCH_TIMEOUT_S = 120.0


async def measure(config: Config, report: CheckReport) -> BandwidthReport:
    """Run the benchmark on every host of ``config`` as ``report`` found them."""
    hosts = config.ordered_hosts
    if len(hosts) < 2:
        raise BandwidthError("one host: there is no interconnect to measure")
    async with RemoteCluster.for_config(config) as remote:
        try:
            port = await nodes.free_port(remote, hosts[0])
        except NodeError as error:
            raise BandwidthError(f"no free port on node 0: {error}") from None
        plan = plan_launch(config, report.checks, run_id=new_run_id(), master_port=port)
        await _place_script(remote, plan)
        results = await asyncio.gather(
            *(
                remote.run(
                    node.host,
                    _argv(plan, node.node_rank),
                    env=_environment(plan, node.node_rank, port),
                    timeout=BENCH_TIMEOUT_S,
                )
                for node in plan.nodes
            )
        )
    failed = [
        f"{node.host.name}: "
        f"{_why(result.stdout + result.stderr, result.exit_status, result.timed_out)}"
        for node, result in zip(plan.nodes, results, strict=True)
        if result.exit_status != 0
    ]
    if failed:
        raise BandwidthError("the benchmark failed on " + "; ".join(failed))
    names = [node.host.name for node in plan.nodes]
    interfaces = [f"{node.host.name}={node.socket_ifname or 'any'}" for node in plan.nodes]
    try:
        return read_result(results[0].stdout, names, PAIR_BYTES[plan.backend], interfaces)
    except BenchError as error:
        raise BandwidthError(str(error)) from None


async def _place_script(remote: RemoteCluster, plan: LaunchPlan) -> None:
    async def one(node_rank: int) -> None:
        node = plan.nodes[node_rank]
        path = bench_path(workdir_of(node.run_dir))
        await agent(remote, node.host, "write", path, sent=BENCH_SOURCE)

    try:
        await asyncio.gather(*(one(node.node_rank) for node in plan.nodes))
    except NodeError as error:
        raise BandwidthError(f"cannot place the benchmark: {error}") from None


def _argv(plan: LaunchPlan, node_rank: int) -> list[str]:
    node = plan.nodes[node_rank]
    backend = plan.backend
    return python_argv(
        node.host,
        bench_path(workdir_of(node.run_dir)),
        "--sizes",
        ",".join(str(size) for size in SIZES[backend]),
        "--pair-bytes",
        str(PAIR_BYTES[backend]),
        "--iters",
        str(ITERATIONS),
        "--backend",
        backend,
    )


def _environment(plan: LaunchPlan, node_rank: int, port: int) -> dict[str, str]:
    """A launch's environment (interface, devices, the host's own settings), less the run
    directory (there is no run), with torch's rendezvous variables: one process per host needs
    no torchrun, whose own torch import cost every host seconds of CPU."""
    node = plan.nodes[node_rank]
    env = {name: value for name, value in node.env.items() if name != RUN_DIR_ENV}
    return env | {
        "MASTER_ADDR": plan.master_addr,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(len(plan.nodes)),
        "RANK": str(node_rank),
        "LOCAL_RANK": "0",
        "PYTHONUNBUFFERED": "1",
    }


def _why(output: str, status: int | None, timed_out: bool) -> str:
    if timed_out:
        return f"it did not finish in {BENCH_TIMEOUT_S:g} s"
    lines = [line for line in output.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit status {status}"
    return plain(last, limit=300, one_line=True)
