"""A failed run's hosts replaced by spares before the recovery's resume: the run's hosts,
each spare in the place of the host it replaces, checked again; the spare's part planned as
a launch would plan it (its own GPUs, interface and workdir), node ranks kept; the others'
parts as they were. A host with no spare left is left out: the nodes after it move up a node
rank, and every node's torchrun is told the new count (its directory stays where it was)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from ddptui.check.run import check_cluster
from ddptui.config.model import Config
from ddptui.health import Severity
from ddptui.plan.launch import (
    DEBUG_ENV,
    SOCKET_IFNAME_ENV,
    PlanError,
    plan_launch,
    torchrun_flag,
)
from ddptui.run.backends.ssh.launcher import LaunchError, node_record
from ddptui.run.record import NodeRecord, RunRecord
from ddptui.untrusted import plain

ERRORS_SAID = 3
"""Errors of the spare's check said in the attempt's detail; the rest are counted."""


def with_spares(
    config: Config, record: RunRecord, swaps: Mapping[str, str], without: Collection[str] = ()
) -> Config:
    """``config`` holding the run's hosts alone, in node-rank order, each spare of ``swaps`` (a
    host → its spare) in the place of the host it replaces and those of ``without`` left out:
    what the check and the plan of the run's nodes after the recovery take."""
    names = [swaps.get(node.host, node.host) for node in record.nodes if node.host not in without]
    hosts = tuple(
        dataclasses.replace(config.host(name), rank0=index == 0, spare=False)
        for index, name in enumerate(names)
    )
    return dataclasses.replace(config, hosts=hosts)


async def replaced_nodes(
    config: Config, record: RunRecord, swaps: Mapping[str, str], without: Collection[str] = ()
) -> tuple[list[NodeRecord], str]:
    """The run's nodes with each host of ``swaps`` replaced by its spare and those of
    ``without`` left out, and node 0's address (another where node 0 was replaced: every node
    told it); :class:`LaunchError` when the check of the new set finds errors or the spare's
    part cannot be planned as the host's was (another number of ranks would change the world
    size)."""
    checked = with_spares(config, record, swaps, without)
    report = await check_cluster(checked)
    errors = [finding for finding in report.findings if finding.severity is Severity.ERROR]
    if errors:
        said = "; ".join(
            plain(error.message, limit=200, one_line=True) for error in errors[:ERRORS_SAID]
        )
        more = f" and {len(errors) - ERRORS_SAID} more" if len(errors) > ERRORS_SAID else ""
        raise LaunchError(f"the check of the hosts with the spare in found: {said}{more}")
    extra = record.args[len(config.job.args) :]
    debug = any(key in node.env for node in record.nodes for key in DEBUG_ENV)
    try:
        plan = plan_launch(checked, report.checks, run_id=record.id, extra_args=extra, debug=debug)
    except PlanError as error:
        raise LaunchError(f"cannot plan the spare's part: {error}") from None
    kept = [node for node in record.nodes if node.host not in without]
    nodes = []
    for node_rank, node in enumerate(kept):
        spare = swaps.get(node.host)
        if spare is None:
            if without:
                node = renumbered(node, node_rank, len(kept))
            if plan.master_addr != record.master_addr:
                node = rendezvous_moved(node, plan.master_addr, plan.node(node.host).env)
            nodes.append(node)
            continue
        planned = node_record(plan.node(spare), report)
        if planned.nproc != node.nproc:
            raise LaunchError(
                f"{spare} would run {planned.nproc} rank(s) where {node.host} ran {node.nproc}: "
                "the world size would change"
            )
        nodes.append(planned)
    return nodes, plan.master_addr


def rendezvous_moved(
    node: NodeRecord, master_addr: str, planned_env: Mapping[str, str]
) -> NodeRecord:
    """``node`` told node 0's new address (node 0 was replaced): its torchrun's flag, and the
    socket interface that reaches it, as the plan chose it for the host."""
    env = {key: value for key, value in node.env.items() if key not in SOCKET_IFNAME_ENV}
    env |= {key: planned_env[key] for key in SOCKET_IFNAME_ENV if key in planned_env}
    argv = torchrun_flag(node.argv, "--master-addr", master_addr)
    return dataclasses.replace(node, argv=argv, env=env)


def renumbered(node: NodeRecord, node_rank: int, nnodes: int) -> NodeRecord:
    """``node`` as node ``node_rank`` of ``nnodes``: its torchrun told so."""
    argv = torchrun_flag(node.argv, "--nnodes", str(nnodes))
    argv = torchrun_flag(argv, "--node-rank", str(node_rank))
    return dataclasses.replace(node, node_rank=node_rank, argv=argv)
