"""Hostile SSH servers inside the test process: asyncssh on 127.0.0.1, a free port.

Each one misbehaves in one way a broken or malicious host could: it hangs up before key
exchange with a reason full of escape sequences, answers every command with a document of
its choosing (or each node-agent command with its own), floods stdout without end, never
answers channel-open requests while it keeps answering keepalives, or answers and then never
confirms the close of the channel. They authenticate the generated client key like a real
host, so ``ddptui check`` and ``ddptui trust`` reach the misbehaviour.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import asyncssh
from asyncssh.constants import MSG_CHANNEL_CLOSE, MSG_KEXINIT
from asyncssh.packet import UInt32

from tests.testbed import LocalSshServer, keys

_FLOOD_CHUNK = b"A" * 65536


class Behaviour(enum.Enum):
    DISCONNECT = "disconnect"
    """Hang up on the client's KEXINIT with :attr:`HostileSshServer.reason`."""
    ANSWER = "answer"
    """Answer every command with :attr:`HostileSshServer.answer` on stdout, exit 0."""
    FLOOD = "flood"
    """Write to stdout until the client hangs up."""
    SWALLOW = "swallow"
    """Never answer a channel-open request; everything else (keepalives) works."""
    AGENT = "agent"
    """Answer each node-agent command with what :attr:`HostileSshServer.agent` returns for its
    arguments, exit 0."""
    UNCLOSING = "unclosing"
    """Answer every command with :attr:`HostileSshServer.answer`, its exit status 0 and EOF,
    then ignore the client's channel close: the channel is never confirmed closed."""


AgentAnswers = Callable[[list[str]], bytes]
"""The node agent's arguments (``status RUN_DIR``…) → what the host prints."""

_ENCODED_COMMAND = re.compile(r"echo ([A-Za-z0-9+/=]+) \| base64 -d")


KeptAnswers = Callable[[list[str]], bytes]
"""What a kept agent (``serve``) prints for one command, its end line included."""


def command_argv(command: str) -> list[str]:
    """The argv a command line of ddptui's runs, decoded from
    :func:`ddptui.remote.commands.command_line` (``sh -c 'eval "$(echo B64 | base64 -d)"'``)."""
    found = _ENCODED_COMMAND.search(command)
    assert found is not None, command
    argv = shlex.split(base64.b64decode(found.group(1)).decode("utf-8"))
    return argv[argv.index("exec") + 1 :]


def agent_args(command: str) -> list[str]:
    """The node-agent arguments of a command ddptui sent (``python - ARGS``, or ``serve`` for
    ``python -c BOOTSTRAP serve``)."""
    argv = command_argv(command)
    if "-c" in argv:
        return argv[argv.index("-c") + 2 :]
    return argv[argv.index("-") + 1 :]


def served(answer: bytes, status: int = 0) -> bytes:
    """``answer`` as a kept agent prints it: followed by its end line."""
    return answer + json.dumps({"served": status, "failed": ""}).encode() + b"\n"


class _Mute:
    """Stands in for the channel of a swallowed open request: it never confirms."""

    def process_open(self, *args: object) -> None:
        return None


class HostileSshServer(LocalSshServer):
    """An in-process SSH server on 127.0.0.1 that misbehaves as ``behaviour`` says.

    A :class:`LocalSshServer` (keys, known_hosts, its own event loop thread) whose sessions
    misbehave.
    """

    behaviour = Behaviour.ANSWER
    answer = b""
    """What :attr:`Behaviour.ANSWER` writes to stdout."""
    reason = ""
    """The disconnect reason of :attr:`Behaviour.DISCONNECT`."""
    authority: asyncssh.SSHKey | None = None
    """With a CA's private key, the server presents a host certificate it signed."""
    flooded = 0
    """Bytes the flood wrote before the client hung up."""
    channel_opens = 0
    """Channel-open requests swallowed."""
    agent: AgentAnswers = staticmethod(lambda args: b"")
    """What :attr:`Behaviour.AGENT` answers to each node-agent command."""
    hello: bytes = b'{"serving": 4242}\n'
    """What a kept agent says first, once it has read its program."""
    serves = True
    """Whether a kept agent goes on after its hello; if not it exits 127 (no such Python)."""
    kept: KeptAnswers | None = None
    """What a kept agent prints for each command; None: :attr:`agent`'s answer, then the end
    line."""
    asked: list[list[str]]
    """The node-agent arguments of every command :attr:`Behaviour.AGENT` answered, in order."""
    ignored_closes = 0
    """Channel closes :attr:`Behaviour.UNCLOSING` left unconfirmed."""
    connections_made = 0
    """Connections accepted, over the server's life."""

    @classmethod
    def start(  # type: ignore[override]
        cls,
        root: Path,
        behaviour: Behaviour,
        *,
        answer: bytes = b"",
        reason: str = "",
        authority: asyncssh.SSHKey | None = None,
        agent: AgentAnswers | None = None,
    ) -> HostileSshServer:
        server = cls(root)
        server.behaviour, server.answer, server.reason = behaviour, answer, reason
        server.authority = authority
        server.asked = []
        if agent is not None:
            server.agent = agent
        server._thread.start()
        server._call(server._listen())
        return server

    def __enter__(self) -> HostileSshServer:
        return self

    async def _listen(self) -> None:
        server = self

        class Misbehaving(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                self._conn = conn
                server._connections.add(conn)
                server.connections_made += 1
                if server.behaviour is Behaviour.DISCONNECT:
                    handlers = dict(type(conn)._packet_handlers)
                    handlers[MSG_KEXINIT] = server._hang_up
                    conn._packet_handlers = handlers
                elif server.behaviour is Behaviour.SWALLOW:
                    conn._process_session_open = server._swallow  # type: ignore[method-assign,assignment]

            def connection_lost(self, exc: Exception | None) -> None:
                server._connections.discard(self._conn)

        self._acceptor = await asyncssh.listen(
            self.host,
            0,
            server_factory=Misbehaving,
            server_host_keys=[self._server_host_key()],
            authorized_client_keys=str(self.client_key) + ".pub",
            process_factory=self._run,
            encoding=None,
        )
        self.port = self._acceptor.get_port()
        self.known_hosts.write_text(
            keys.known_hosts_line(self.host, self.port, self._host_public) + "\n"
        )

    def _server_host_key(self) -> str | tuple[asyncssh.SSHKey, asyncssh.SSHCertificate]:
        if self.authority is None:
            return str(self._host_key)
        private = asyncssh.read_private_key(self._host_key)
        certificate = self.authority.generate_host_certificate(
            private, "ddptui-hostile-server", principals=[self.host]
        )
        return private, certificate

    def _hang_up(self, conn: asyncssh.SSHServerConnection, *packet: object) -> None:
        # Only the message: closing the socket at once, with the client's next packets
        # unread, would reset the connection before the client could read the reason.
        conn._send_disconnect(asyncssh.DISC_HOST_NOT_ALLOWED_TO_CONNECT, self.reason, "en-US")

    def _swallow(self, packet: object) -> tuple[_Mute, None]:
        self.channel_opens += 1
        return _Mute(), None

    def _ignore_close(self, *packet: object) -> None:
        self.ignored_closes += 1

    async def _run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        try:
            if self.behaviour is Behaviour.FLOOD:
                while True:
                    process.stdout.write(_FLOOD_CHUNK)
                    await process.stdout.drain()
                    self.flooded += len(_FLOOD_CHUNK)
            if self.behaviour is Behaviour.UNCLOSING:
                await self._answer_and_stay_open(process)
                return
            if self.behaviour is Behaviour.AGENT:
                args = agent_args(process.command or "")
                if args == ["serve"]:
                    await self._serve(process)
                    return
                self.asked.append(args)
                process.stdout.write(self.agent(args))
            else:
                process.stdout.write(self.answer)
            await process.stdout.drain()
            process.exit(0)
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError):
            process.close()

    async def _serve(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """A kept agent: reads its program, says :attr:`hello`, then answers each command line
        (recorded in :attr:`asked` as ``["serve", COMMAND, ARGS…]``) until stdin ends."""
        size = int(await process.stdin.readline())
        await process.stdin.readexactly(size)
        process.stdout.write(self.hello)
        if not self.serves:
            await process.stdout.drain()
            process.exit(127)
            return
        while line := await process.stdin.readline():
            args = [str(arg) for arg in json.loads(line)["args"]]
            self.asked.append(["serve", *args])
            answer = self.kept(args) if self.kept else served(self.agent(args))
            process.stdout.write(answer)
            await process.stdout.drain()
        process.exit(0)

    async def _answer_and_stay_open(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        # asyncssh wraps a session's channel in a line editor that passes attribute reads on
        # to the channel, not writes.
        channel = getattr(process.channel, "_orig_chan", process.channel)
        handlers = dict(type(channel)._packet_handlers)
        handlers[MSG_CHANNEL_CLOSE] = self._ignore_close
        channel._packet_handlers = handlers
        process.stdout.write(self.answer)
        await process.stdout.drain()
        process.stdout.write_eof()
        # What SSHServerChannel.exit sends, without the close that follows it there.
        channel._send_request(b"exit-status", UInt32(0))
