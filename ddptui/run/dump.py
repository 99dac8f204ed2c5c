"""``ddptui dump``'s I/O: every rank's Python stacks from every host at once, kept on the head.

Each host's node agent answers for its ranks (:func:`ddptui.run.agent_client.dump`); what they
sent is saved as it came, one file per rank.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from ddptui.config.model import Config
from ddptui.remote.connection import RemoteCluster
from ddptui.run import agent_client as nodes
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

    @property
    def groups(self) -> list[StackGroup]:
        return group(self.stacks)

    @property
    def stackless(self) -> list[RankStack]:
        return sorted((stack for stack in self.stacks if not stack.threads), key=_by_rank)


def _by_rank(stack: RankStack) -> int:
    return stack.rank


async def take(config: Config, record: RunRecord) -> StackDump:
    """Ask every node of the run for its ranks' stacks, in parallel."""
    taken_at = time.time()
    hosts = {node.host: config.host(node.host) for node in record.nodes}
    attempts = max(1, len(record.attempts))
    stacks: list[RankStack] = []
    unanswered: list[str] = []
    seen: set[int] = set()
    async with RemoteCluster.for_config(config, list(hosts.values())) as remote:

        async def one(name: str, node_rank: int, run_dir: str) -> None:
            try:
                attempt, found = await nodes.dump(
                    remote, hosts[name], node_rank, run_dir, attempts=attempts
                )
            except nodes.NodeError as error:
                unanswered.append(nodes.described(name, error))
                return
            if found:
                seen.add(attempt)
            stacks.extend(found)

        await asyncio.gather(
            *(one(node.host, node.node_rank, node.run_dir) for node in record.nodes)
        )
    return StackDump(
        record.id,
        taken_at,
        tuple(sorted(stacks, key=_by_rank)),
        tuple(sorted(unanswered)),
        tuple(sorted(seen)),
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
    return StackDump(
        dump.run_id, dump.taken_at, dump.stacks, dump.unanswered, dump.attempts, target
    )
