"""Trust on first use, done deliberately: fetch every host's key and sort it against known_hosts.

Only keys of hosts with nothing on record are ever proposed for adding; a key that differs
from the recorded one is reported, never replaced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ddptui.config.model import HostConfig
from ddptui.remote import failures
from ddptui.remote.hostkeys import HostKeyCheck, KeyState, check_host_key, key_line
from ddptui.remote.status import Reachability


@dataclass(frozen=True)
class HostKeyScan:
    """One host's key compared with its known_hosts file, or why it could not be fetched."""

    host: HostConfig
    check: HostKeyCheck | None
    failure: Reachability | None = None


async def scan_host_keys(
    hosts: Sequence[HostConfig], *, timeout: float, max_parallel: int = 32
) -> list[HostKeyScan]:
    """Fetch every host's key concurrently (``max_parallel`` handshakes at a time), in order."""
    handshakes = asyncio.Semaphore(max_parallel)

    async def scan(host: HostConfig) -> HostKeyScan:
        async with handshakes:
            try:
                return HostKeyScan(host, await check_host_key(host, timeout=timeout))
            except failures.NETWORK_ERRORS as error:
                return HostKeyScan(host, None, failures.network_failure(host, error, timeout))

    return list(await asyncio.gather(*(scan(host) for host in hosts)))


def lines_to_add(scans: Sequence[HostKeyScan]) -> dict[Path, list[str]]:
    """The known_hosts lines recording every unknown key, grouped by file, without repeats."""
    additions: dict[Path, list[str]] = {}
    for scan in scans:
        if scan.check is None or scan.check.state is not KeyState.UNKNOWN:
            continue
        line = key_line(scan.host.address, scan.host.port, scan.check.presented)
        lines = additions.setdefault(scan.check.file, [])
        if line not in lines:
            lines.append(line)
    return additions
