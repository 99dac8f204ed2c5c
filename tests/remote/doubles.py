"""Transport doubles: a node that only runs commands, each test saying how."""

from __future__ import annotations

from collections.abc import Sequence

from ddptui.config.model import HostConfig
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.stream import LineStream
from ddptui.remote.transport import Transport


class CommandsOnly(Transport):
    """A transport whose nodes are always reached and run commands (the subclass's
    ``_execute``), and that streams nothing and holds nothing."""

    async def connect(self, host: HostConfig) -> Reachability:
        return Reachability(Reach.OK)

    async def open_stream(
        self, host: HostConfig, argv: Sequence[str], *, input: str, max_line: int
    ) -> LineStream:
        raise AssertionError(f"nothing streams here: {list(argv)}")

    async def close(self) -> None:
        pass
