"""Node 0's port-test listener is read defensively: banners skipped, garbage never raises."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncssh
import pytest

from ddptui.check.run import _listening_port


async def lines(
    *texts: str, then_hang: bool = False, then: BaseException | None = None
) -> AsyncIterator[str]:
    for text in texts:
        yield text
    if then_hang:
        await asyncio.sleep(3600)
    if then is not None:
        raise then


@pytest.mark.parametrize(
    ("output", "port"),
    [
        (["ready 29500\n"], 29500),
        (["Welcome to node0!\n", "\x1b[1mmotd\x1b[0m\n", "ready 40001\r\n"], 40001),
        (["ready abc\n"], None),
        (["ready\n"], None),
        (["ready 1 2\n"], None),
        (["error [Errno 98] Address already in use\n", "ready 1\n"], None),
        ([], None),
    ],
)
def test_the_port_is_read_past_banners_and_garbage_gives_none(
    output: list[str], port: int | None
) -> None:
    bound, _ = asyncio.run(_listening_port(lines(*output), timeout=5))
    assert bound == port


def test_silence_ends_at_the_timeout_with_the_last_line() -> None:
    bound, last = asyncio.run(_listening_port(lines("banner\n", then_hang=True), timeout=0.2))
    assert (bound, last) == (None, "banner")


def test_endless_banners_give_up() -> None:
    bound, _ = asyncio.run(_listening_port(lines(*["banner\n"] * 1000, "ready 5\n"), timeout=5))
    assert bound is None


def test_a_connection_lost_before_ready_is_said_not_raised() -> None:
    # It used to end `ddptui check` with a traceback, however healthy the other hosts were.
    lost = lines("banner\n", then=asyncssh.ConnectionLost("Connection lost"))
    bound, last = asyncio.run(_listening_port(lost, timeout=5))
    assert (bound, last) == (None, "the connection was lost: Connection lost")
