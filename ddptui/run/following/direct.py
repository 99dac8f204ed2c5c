"""A run's files read from its hosts directly, without a supervisor (a run that has none: its
logs, a status read back): each host followed until it has caught up.

Its module imports no SSH: the follower is imported where a run is read, so that the commands
that ask a supervisor (and name :class:`StoppedWaiting`) do not pay for it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddptui.aio import wait_for
from ddptui.config import Config
from ddptui.run.following.updates import SILENCE_S, FileLine, Heartbeat, HostSilent, Update
from ddptui.run.record import RunRecord

if TYPE_CHECKING:
    from ddptui.run.following.files import HostFollower, OpenTransport

BEHIND_BEATS = 15
"""Heartbeats in a row (30 s) in which a host says it has lines unsent and sends none: it is
not waited for any longer. The agent sends a megabyte of each file a poll, eight polls a
heartbeat, so an honest one is that long without a line only inside a line of over 100 MiB."""


@dataclass(frozen=True)
class StoppedWaiting:
    """:func:`read_directly` no longer waits for ``host`` to catch up: what was read from it
    may lack lines."""

    host: str
    seconds: float
    """Since the read began."""
    why: str
    """What the host had said, in words that follow its name: ``still says it is behind``."""


async def read_directly(
    record: RunRecord,
    config: Config,
    open_transport: OpenTransport,
    *,
    deadline_s: float,
    heartbeats: int = 2,
    silence_s: float = SILENCE_S,
) -> AsyncIterator[Update | StoppedWaiting]:
    """Every line of the run's files as they stand, read from its hosts directly (no
    supervisor); it ends once each host has caught up: sent ``heartbeats`` heartbeats, the
    last with every line written before it sent (the agent reads a file a piece at a time,
    so a large one takes several), or stopped answering.

    A host is not waited for past ``deadline_s`` from the start, nor once it has said it is
    behind for :data:`BEHIND_BEATS` heartbeats without a line: a :class:`StoppedWaiting`
    says so, after the lines read from it until then."""
    from ddptui.run.following.files import HostFollower

    queue: asyncio.Queue[Update | StoppedWaiting | None] = asyncio.Queue(maxsize=10000)
    began = time.monotonic()
    followers = [
        HostFollower.of_node(
            config, record, node, silence_s=silence_s, open_transport=open_transport
        )
        for node in record.nodes
    ]
    waiting = {follower.host.name: "has not said it has sent every line" for follower in followers}

    async def pump(follower: HostFollower) -> None:
        host = follower.host.name
        beats = behind = 0
        # Closed as it is left, so its channel is ended now, not when the loop ends.
        updates = follower.updates()
        try:
            async for update in updates:
                await queue.put(update)
                if isinstance(update, FileLine):
                    behind = 0
                elif isinstance(update, Heartbeat):
                    beats += 1
                    if not update.behind and beats >= heartbeats:
                        break
                    behind = behind + 1 if update.behind else 0
                    waiting[host] = (
                        "still says it is behind"
                        if update.behind
                        else "has not said it has sent every line"
                    )
                    if behind >= BEHIND_BEATS:
                        why = f"still says it is behind, with no line in {behind} heartbeats"
                        await queue.put(StoppedWaiting(host, time.monotonic() - began, why))
                        break
                elif isinstance(update, HostSilent):
                    break
            del waiting[host]
        finally:
            await updates.aclose()

    async def pump_all() -> None:
        await asyncio.gather(*(pump(follower) for follower in followers))
        await queue.put(None)

    task = asyncio.create_task(pump_all())
    try:
        while (left := began + deadline_s - time.monotonic()) > 0:
            if not queue.empty():
                # A timeout armed for each line cost a sixth of reading a large log.
                item = queue.get_nowait()
            else:
                try:
                    item = await wait_for(queue.get(), left)
                except asyncio.TimeoutError:
                    break
            if item is None:
                return
            yield item
        # What was read before the deadline is given still: it is here already.
        for _ in range(queue.qsize()):
            item = queue.get_nowait()
            if item is None:
                return
            yield item
        for host, why in list(waiting.items()):
            yield StoppedWaiting(host, deadline_s, why)
    finally:
        task.cancel()
        await asyncio.wait([task], timeout=5.0)
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(asyncio.gather(*(f.close() for f in followers)), 10.0)
