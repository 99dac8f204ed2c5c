"""``ProxyJump``'s hops as ``ssh`` reads them (``[user@]host[:port]``, comma-separated), and a
``ProxyJump`` that loops, said as such."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ddptui.remote.connection import RemoteCluster
from ddptui.remote.jumps import Hop, jump_hops
from ddptui.remote.status import Reach, Reachability


@pytest.mark.parametrize(
    ("spec", "hops"),
    [
        ("bastion", [Hop("bastion", "bastion", None, None)]),
        ("admin@bastion:2222", [Hop("admin@bastion:2222", "bastion", "admin", 2222)]),
        ("a, me@b:22", [Hop("a", "a", None, None), Hop("me@b:22", "b", "me", 22)]),
        ("[fe80::1]:2200", [Hop("[fe80::1]:2200", "fe80::1", None, 2200)]),
        ("fe80::1", [Hop("fe80::1", "fe80::1", None, None)]),
        ("a@b@c", [Hop("a@b@c", "c", "a@b", None)]),
        ("host:ssh", [Hop("host:ssh", "host:ssh", None, None)]),
    ],
)
def test_hops_are_read_as_ssh_reads_them(spec: str, hops: list[Hop]) -> None:
    assert jump_hops(spec) == hops


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (
            "Host jumpbox\n  ProxyJump jumpbox\n",
            "through jump host jumpbox: ProxyJump in ~/.ssh/config loops",
        ),
        (
            "Host jumpbox\n  ProxyJump other\nHost other\n  ProxyJump jumpbox\n",
            "through jump host jumpbox: through jump host other: jump host jumpbox: "
            "ProxyJump in ~/.ssh/config loops",
        ),
    ],
)
def test_a_proxyjump_that_loops_is_said_before_any_connection(
    client_home: Path, config: str, said: str
) -> None:
    (client_home / ".ssh").mkdir()
    (client_home / ".ssh" / "config").write_text(config)

    async def jump() -> tuple[Reachability, object]:
        async with RemoteCluster([], connect_timeout=1) as remote:
            return await remote.jump("jumpbox")

    reach, connection = asyncio.run(jump())
    assert (reach, connection) == (Reachability(Reach.ERROR, said), None)
