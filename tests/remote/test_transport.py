"""What every transport shares: :meth:`Transport.run`'s arguments reach the transport as one
:class:`Command`, and a file is read whole through the node's own ``base64``; and
:class:`PerHost`, which reaches each host through the transport it is given for it."""

from __future__ import annotations

import asyncio
import base64

import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.commands import CommandResult
from ddptui.remote.files import UnreadableFile
from ddptui.remote.transport import MAX_STDERR_BYTES, MAX_STDOUT_BYTES, Command, PerHost
from tests.remote.doubles import CommandsOnly

NODE = HostConfig("node1", "10.0.0.1")


class Recording(CommandsOnly):
    """Keeps every command it is given and answers each with ``answer``."""

    def __init__(self, answer: CommandResult) -> None:
        self.answer = answer
        self.commands: list[Command] = []

    async def _execute(self, host: HostConfig, command: Command) -> CommandResult:
        self.commands.append(command)
        return self.answer


def test_run_hands_the_transport_its_arguments_as_one_command_with_the_default_caps() -> None:
    transport = Recording(CommandResult(0, "", ""))
    argv = ["python3", "-", "status"]

    async def both() -> None:
        await transport.run(NODE, argv, timeout=5)
        await transport.run(
            NODE, argv, input="in", timeout=7, env={"A": "1"}, max_stdout=10, max_stderr=20
        )

    asyncio.run(both())
    argv.append("changed after the call")
    assert transport.commands == [
        Command(("python3", "-", "status"), None, 5, None, MAX_STDOUT_BYTES, MAX_STDERR_BYTES),
        Command(("python3", "-", "status"), "in", 7, {"A": "1"}, 10, 20),
    ]


def test_a_file_is_read_through_the_node_s_base64_capped_by_its_size() -> None:
    data = bytes(range(256)) * 3
    transport = Recording(CommandResult(0, base64.encodebytes(data).decode(), ""))
    read = asyncio.run(transport.read_file(NODE, "/w/flight_0", max_bytes=1000, timeout=9))
    assert read == data
    (command,) = transport.commands
    assert (command.argv, command.timeout) == (("base64", "/w/flight_0"), 9)
    assert command.max_stdout == 1000 * 4 // 3 + 4096


def test_a_file_larger_than_asked_is_refused() -> None:
    transport = Recording(CommandResult(0, base64.b64encode(b"x" * 101).decode(), ""))
    with pytest.raises(UnreadableFile, match="larger than ddptui reads"):
        asyncio.run(transport.read_file(NODE, "/w/flight_0", max_bytes=100, timeout=9))


class Closing(Recording):
    """Runs its node's Python elsewhere (as ``srun`` does), and says when it is closed."""

    closed = False

    def python(self, host: HostConfig, *args: str) -> list[str]:
        return ["elsewhere", host.name, *args]

    async def close(self) -> None:
        self.closed = True


def test_per_host_sends_each_host_through_its_own_transport_and_the_rest_through_one() -> None:
    followed = Closing(CommandResult(0, base64.b64encode(b"followed").decode(), ""))
    rest = Recording(CommandResult(0, base64.b64encode(b"rest").decode(), ""))
    other = HostConfig("node2", "10.0.0.2")
    both = PerHost({NODE.name: followed}, rest)

    async def use() -> tuple[bytes, bytes]:
        await both.run(NODE, ["status"], timeout=5)
        await both.run(other, ["status"], timeout=6)
        read = await both.read_file(NODE, "/w/a", max_bytes=100, timeout=9)
        await both.close()
        return read, await both.read_file(other, "/w/b", max_bytes=100, timeout=9)

    assert asyncio.run(use()) == (b"followed", b"rest")
    assert [c.argv for c in followed.commands] == [("status",), ("base64", "/w/a")]
    assert [c.argv for c in rest.commands] == [("status",), ("base64", "/w/b")]
    assert both.python(NODE, "-", "dump") == ["elsewhere", "node1", "-", "dump"]
    assert both.python(other, "-", "dump")[-2:] == ["-", "dump"]
    # Each transport is its holder's to close: a follower's goes on following.
    assert not followed.closed
