"""``ddptui dump``'s I/O: every rank's Python stacks from every host at once (kept on the head
by :mod:`ddptui.run.evidence.kept`).

Each host's node agent answers for its ranks (:func:`ddptui.run.agent.client.dump`). A host is
heard for its own ranks only (any other it names is set aside, said), within a budget of flight
recorder bytes, and whatever goes wrong with one host's answer is that host's evidence lost,
never the others'. Flight-recorder dumps are read by :mod:`ddptui.run.evidence.flight` alone:
torch's analyser evaluates fields of a dump, so no dump from a host reaches it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from ddptui.config.model import Config
from ddptui.remote.transport import Transport
from ddptui.run.agent import client as nodes
from ddptui.run.agent.call import NodeError, described
from ddptui.run.evidence.flight import FlightDumpError, RankTrace, analyse, read_dump
from ddptui.run.evidence.kept import StackDump
from ddptui.run.evidence.stacks import RankStack
from ddptui.run.record import NodeRecord, RunRecord

HOST_FLIGHT_BYTES = 64 * 1024 * 1024
"""Flight-recorder bytes read from one host per dump: 8 ranks' recorders of 2,000 collectives
with their stacks are about 24 MiB."""
FLIGHT_BYTES = 512 * 1024 * 1024
"""From all hosts together, per dump."""


async def take(
    config: Config, record: RunRecord, remote: Transport, skip: Collection[str] = ()
) -> StackDump:
    """Ask every node of the run for its ranks' stacks, in parallel, through ``remote``'s
    connections (the supervisor's, or the run's kind's: :meth:`Kind.reaching
    <ddptui.run.backends.kind.Kind.reaching>`). The hosts in ``skip`` (known not to answer)
    are not asked: each would cost a connect timeout, and say nothing."""
    taken_at = time.time()
    budget = _Budget(FLIGHT_BYTES)
    heard = await asyncio.gather(
        *(
            _hear(config, record, remote, node, budget)
            if node.host not in skip
            else _not_asked(node.host)
            for node in record.nodes
        )
    )
    stacks = [stack for host in heard for stack in host.stacks]
    dumps = {rank: data for host in heard for rank, data in host.flight.items()}
    errors = [error for host in heard for error in host.errors]
    traces: list[RankTrace] = []
    for rank, data in sorted(dumps.items()):
        try:
            traces.append(await asyncio.to_thread(read_dump, rank, data))
        except FlightDumpError as error:
            errors.append(f"rank {rank}'s flight-recorder dump: {error}")
    return StackDump(
        record.id,
        taken_at,
        tuple(sorted(stacks, key=lambda stack: stack.rank)),
        tuple(sorted(host.unanswered for host in heard if host.unanswered)),
        tuple(sorted({host.attempt for host in heard if host.stacks and host.attempt})),
        flight=tuple(analyse(traces, record.world_size) if traces else ()),
        flight_dumps=dumps,
        flight_traces=tuple(traces),
        flight_errors=tuple(errors),
    )


@dataclass
class _Budget:
    left: int


@dataclass
class _Heard:
    """One host's part of a dump."""

    stacks: list[RankStack] = field(default_factory=list)
    attempt: int = 0
    flight: dict[int, bytes] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    unanswered: str = ""


async def _hear(
    config: Config, record: RunRecord, remote: Transport, node: NodeRecord, budget: _Budget
) -> _Heard:
    heard = _Heard()
    try:
        await _ask(config, record, remote, node, budget, heard)
    except Exception as error:  # one host's answer, whatever it does, costs that host's alone
        heard.unanswered = described(node.host, error)
    return heard


async def _not_asked(host: str) -> _Heard:
    return _Heard(unanswered=f"{host}: not asked, as it did not answer when the attempt ended")


async def _ask(
    config: Config,
    record: RunRecord,
    remote: Transport,
    node: NodeRecord,
    budget: _Budget,
    heard: _Heard,
) -> None:
    host = config.host(node.host)
    answer = await nodes.dump(
        remote, host, node.node_rank, node.run_dir, attempts=max(1, len(record.attempts))
    )
    own = record.ranks_of(node)
    strays = sorted(
        {stack.rank for stack in answer.stacks if stack.rank not in own}
        | {rank for rank in answer.flight if rank not in own}
    )
    if strays:
        heard.errors.append(
            f"{node.host} answered for ranks {_listed(strays)}, which are not its own "
            f"({_listed(list(own))}): set aside"
        )
    firsts = {stack.rank: stack for stack in reversed(answer.stacks) if stack.rank in own}
    heard.stacks, heard.attempt = list(firsts.values()), answer.attempt
    host_left = HOST_FLIGHT_BYTES
    for rank in sorted(rank for rank in answer.flight if rank in own):
        room = min(host_left, budget.left)
        if room <= 0:
            heard.errors.append(
                f"rank {rank}'s flight-recorder dump on {node.host}: not read, past the "
                f"{HOST_FLIGHT_BYTES // 2**20} MiB read of a host (or "
                f"{FLIGHT_BYTES // 2**20} MiB of all) for one dump"
            )
            continue
        try:
            data = await nodes.read_flight(remote, host, node.run_dir, rank, max_bytes=room)
        except NodeError as error:
            heard.errors.append(f"rank {rank}: {error}")
            continue
        host_left -= len(data)
        budget.left -= len(data)
        heard.flight[rank] = data


def _listed(ranks: list[int]) -> str:
    shown = ", ".join(str(rank) for rank in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
