"""A long-lived command's output read as bounded lines, a read's lines handed on together
(pure: the channel is a list of the pieces it delivers)."""

from __future__ import annotations

import asyncio

import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.stream import LineStream, LineTooLong


class _Pieces:
    """A channel's stdout that delivers ``pieces`` one read each, then its end."""

    def __init__(self, *pieces: bytes) -> None:
        self.pieces = list(pieces)

    async def read(self, n: int = -1, /) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def _batches(*pieces: bytes, max_line: int = 64) -> list[list[bytes]]:
    stream = LineStream(HostConfig("a", "127.0.0.1"), _Pieces(*pieces), max_line)

    async def read() -> list[list[bytes]]:
        return [batch async for batch in stream.batches()]

    return asyncio.run(read())


def test_each_read_s_whole_lines_come_together_and_a_split_line_with_the_read_that_ends_it() -> (
    None
):
    assert _batches(b"a\nb\nc", b"d\ne\n", b"\n", b"f") == [[b"a", b"b"], [b"cd", b"e"], [b""]]


def test_a_line_longer_than_the_cap_ends_the_stream() -> None:
    with pytest.raises(LineTooLong):
        _batches(b"ok\n" + b"x" * 40, b"x" * 40, max_line=64)


def test_lines_come_one_by_one_as_before() -> None:
    stream = LineStream(HostConfig("a", "127.0.0.1"), _Pieces(b"a\nb", b"\nc\n"), 64)

    async def read() -> list[bytes]:
        return [line async for line in stream.lines()]

    assert asyncio.run(read()) == [b"a", b"b", b"c"]
