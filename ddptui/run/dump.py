"""``ddptui dump``'s I/O: every rank's Python stacks from every host at once, kept on the head.

Each host's node agent answers for its ranks (:func:`ddptui.run.agent_client.dump`); what they
sent is saved as it came, one file per rank.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddptui.config.model import Config
from ddptui.remote.connection import RemoteCluster
from ddptui.run import agent_client as nodes
from ddptui.run.flight import FlightDumpError, FlightFinding, analyse, read_dump
from ddptui.run.stacks import RankStack, StackGroup, group
from ddptui.run.store import RunRecord


@dataclass(frozen=True)
class StackDump:
    run_id: str
    taken_at: float
    stacks: tuple[RankStack, ...]
    """Every rank a host reported, with its stack or why there is none."""
    unanswered: tuple[str, ...] = ()
    """``host: why`` for each host that gave no answer."""
    attempts: tuple[int, ...] = ()
    """The attempts the hosts' ranks belong to (one, unless a host lags behind a restart)."""
    saved_in: Path | None = None
    flight: tuple[FlightFinding, ...] = ()
    """What the ranks' flight recorders say, where any was dumped."""
    flight_dumps: Mapping[int, bytes] = field(default_factory=dict)
    """Global rank → its flight-recorder dump as the host holds it (saved beside the stacks)."""
    flight_errors: tuple[str, ...] = ()

    @property
    def groups(self) -> list[StackGroup]:
        return group(self.stacks)

    @property
    def stackless(self) -> list[RankStack]:
        return sorted((stack for stack in self.stacks if not stack.threads), key=_by_rank)

    def document(self) -> dict[str, Any]:
        """``ddptui dump --json``, and the stacks in a hang's evidence."""
        return {
            "run": self.run_id,
            "time": self.taken_at,
            "saved_in": None if self.saved_in is None else str(self.saved_in),
            "groups": [
                {
                    "ranks": [stack.rank for stack in group.ranks],
                    "hosts": sorted({stack.host for stack in group.ranks}),
                    "frames": [
                        {"function": frame.function, "file": frame.file, "line": frame.line}
                        for frame in group.frames
                    ],
                }
                for group in self.groups
            ],
            "without_stack": [
                {"rank": stack.rank, "host": stack.host, "pid": stack.pid, "why": stack.error}
                for stack in self.stackless
            ],
            "unanswered": list(self.unanswered),
            "flight_recorder": [
                {"group": finding.group, "ranks": list(finding.odd_ranks), "text": finding.text}
                for finding in self.flight
            ],
            "flight_recorder_errors": list(self.flight_errors),
        }


def _by_rank(stack: RankStack) -> int:
    return stack.rank


async def take(config: Config, record: RunRecord, remote: RemoteCluster | None = None) -> StackDump:
    """Ask every node of the run for its ranks' stacks, in parallel (through ``remote``'s
    connections where given: the supervisor's)."""
    if remote is None:
        hosts = [config.host(node.host) for node in record.nodes]
        async with RemoteCluster.for_config(config, hosts) as own:
            return await take(config, record, own)
    taken_at = time.time()
    attempts = max(1, len(record.attempts))
    stacks: list[RankStack] = []
    unanswered: list[str] = []
    seen: set[int] = set()
    dumps: dict[int, bytes] = {}
    errors: list[str] = []

    async def one(name: str, node_rank: int, run_dir: str) -> None:
        host = config.host(name)
        try:
            answer = await nodes.dump(remote, host, node_rank, run_dir, attempts=attempts)
        except nodes.NodeError as error:
            unanswered.append(nodes.described(name, error))
            return
        if answer.stacks:
            seen.add(answer.attempt)
        stacks.extend(answer.stacks)
        for rank in answer.flight:
            try:
                dumps[rank] = await nodes.read_flight(remote, host, run_dir, rank)
            except nodes.NodeError as error:
                errors.append(f"rank {rank}: {error}")

    await asyncio.gather(*(one(node.host, node.node_rank, node.run_dir) for node in record.nodes))
    findings, traces = [], []
    for rank, data in sorted(dumps.items()):
        try:
            traces.append(read_dump(rank, data))
        except FlightDumpError as error:
            errors.append(f"rank {rank}'s flight-recorder dump: {error}")
    if traces:
        findings = analyse(traces, record.world_size)
    return StackDump(
        record.id,
        taken_at,
        tuple(sorted(stacks, key=_by_rank)),
        tuple(sorted(unanswered)),
        tuple(sorted(seen)),
        flight=tuple(findings),
        flight_dumps=dumps,
        flight_errors=tuple(errors),
    )


def save(dump: StackDump, directory: Path) -> StackDump:
    """Each rank's text as its host sent it, under ``directory``/<time>/."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(dump.taken_at))
    target = directory / stamp
    suffix = 1
    while target.exists():
        suffix += 1
        target = directory / f"{stamp}-{suffix}"
    target.mkdir(parents=True)
    for stack in dump.stacks:
        name = f"node{stack.node_rank}-rank{stack.rank}.txt"
        (target / name).write_text(stack.text or f"(no stack: {stack.error})\n")
    for rank, data in dump.flight_dumps.items():
        (target / f"flight_{rank}").write_bytes(data)
    return replace(dump, saved_in=target)
