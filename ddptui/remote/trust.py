"""Trust on first use, done deliberately: fetch every host's key and sort it against known_hosts.

Only keys of hosts with nothing on record are ever proposed for adding; a key that differs
from the recorded one is reported, never replaced, and a ``@revoked`` one never added.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from ddptui.config.model import MAX_PARALLEL_CONNECTS, HostConfig
from ddptui.remote import failures
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.hostkeys import HostKeyCheck, KeyState
from ddptui.remote.jumps import hop_host, jump_hops
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.target import SshTarget, check_host_key, jump_spec, resolve_target


@dataclass(frozen=True)
class HostKeyScan:
    """One host's key compared with its known_hosts files, or why it could not be fetched."""

    host: HostConfig
    check: HostKeyCheck | None
    failure: Reachability | None = None
    target: SshTarget | None = None
    """How the host was reached and where its key is kept; None if its settings are unusable."""


async def scan_host_keys(
    hosts: Sequence[HostConfig], *, timeout: float, max_parallel: int = MAX_PARALLEL_CONNECTS
) -> list[HostKeyScan]:
    """Every host's key fetched concurrently (``max_parallel`` handshakes at a time), in
    order, after those of the jump hosts they are reached through (``ProxyJump``), which must
    be trusted before the hosts behind them can be scanned."""
    handshakes = asyncio.Semaphore(max_parallel)
    # Jump hosts are logged in to (their keys checked strictly), once each.
    jumps = RemoteCluster([], connect_timeout=timeout, max_parallel_connects=max_parallel)

    async def resolved(host: HostConfig) -> SshTarget | HostKeyScan:
        # The same resolution as the connection's (~/.ssh/config, known_hosts files), so a
        # key recorded here is a key the connection then accepts.
        try:
            return await resolve_target(host, connect_timeout=timeout, client_keys=False)
        except (OSError, ValueError, asyncssh.Error) as error:
            unusable = Reachability(Reach.ERROR, f"cannot use the SSH settings: {error}")
            return HostKeyScan(host, None, unusable)

    async def scan(target: SshTarget | HostKeyScan, via: str | None = None) -> HostKeyScan:
        if isinstance(target, HostKeyScan):
            return target
        host = target.host
        spec = via if via is not None else jump_spec(target)
        tunnel = None
        if spec:
            reach, tunnel = await jumps.jump(spec)
            if tunnel is None:
                return HostKeyScan(host, None, reach, target)
        async with handshakes:
            try:
                check = await check_host_key(target, timeout=timeout, tunnel=tunnel)
            except failures.NETWORK_ERRORS as error:
                failure = failures.network_failure(host, error, timeout)
                return HostKeyScan(host, None, failure, target)
        return HostKeyScan(host, check, None, target)

    async with jumps:
        targets = await asyncio.gather(*(resolved(host) for host in hosts))
        hops = await _jump_hosts([t for t in targets if isinstance(t, SshTarget)])
        hop_targets = await asyncio.gather(*(resolved(hop) for hop, _ in hops))
        scanned = await asyncio.gather(
            *(scan(hop, via) for hop, (_, via) in zip(hop_targets, hops, strict=True)),
            *(scan(target) for target in targets),
        )
    return list(scanned)


async def _jump_hosts(targets: Sequence[SshTarget]) -> list[tuple[HostConfig, str | None]]:
    """Each jump host the targets' ``ProxyJump`` names, once, with the hops before it (None:
    the first hop, which its own settings reach). A hop whose settings cannot be read is left
    out: the scans of the hosts behind it say why."""
    found: dict[str, tuple[HostConfig, str | None]] = {}
    for target in targets:
        spec = jump_spec(target)
        chain: list[str] = []
        for hop in jump_hops(spec) if spec is not None else []:
            key = ",".join([*chain, hop.text])
            if key not in found:
                try:
                    found[key] = (await hop_host(hop), ",".join(chain) or None)
                except (OSError, ValueError, asyncssh.Error):
                    break
            chain.append(hop.text)
    return list(found.values())


def lines_to_add(scans: Sequence[HostKeyScan]) -> dict[Path, list[str]]:
    """The known_hosts lines recording every unknown key, grouped by file, without repeats."""
    additions: dict[Path, list[str]] = {}
    for scan in scans:
        if scan.check is None or scan.target is None or scan.check.state is not KeyState.UNKNOWN:
            continue
        line = scan.target.key_line(scan.check.presented)
        lines = additions.setdefault(scan.check.file, [])
        if line not in lines:
            lines.append(line)
    return additions
