"""Hostile SSH servers inside the test process: asyncssh on 127.0.0.1, a free port.

Each one misbehaves in one way a broken or malicious host could: it hangs up before key
exchange with a reason full of escape sequences, answers every command with a document of
its choosing, floods stdout without end, or never answers channel-open requests while it
keeps answering keepalives. They authenticate the generated client key like a real host, so
``ddptui check`` and ``ddptui trust`` reach the misbehaviour.
"""

from __future__ import annotations

import enum
from pathlib import Path

import asyncssh
from asyncssh.constants import MSG_KEXINIT

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

    @classmethod
    def start(  # type: ignore[override]
        cls,
        root: Path,
        behaviour: Behaviour,
        *,
        answer: bytes = b"",
        reason: str = "",
        authority: asyncssh.SSHKey | None = None,
    ) -> HostileSshServer:
        server = cls(root)
        server.behaviour, server.answer, server.reason = behaviour, answer, reason
        server.authority = authority
        server._thread.start()
        server._call(server._listen())
        return server

    async def _listen(self) -> None:
        server = self

        class Misbehaving(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                self._conn = conn
                server._connections.add(conn)
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

    async def _run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        try:
            if self.behaviour is Behaviour.FLOOD:
                while True:
                    process.stdout.write(_FLOOD_CHUNK)
                    await process.stdout.drain()
                    self.flooded += len(_FLOOD_CHUNK)
            process.stdout.write(self.answer)
            await process.stdout.drain()
            process.exit(0)
        except (asyncssh.Error, OSError):
            process.close()
