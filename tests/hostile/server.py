"""Hostile SSH servers inside the test process: asyncssh on 127.0.0.1, a free port.

Each one misbehaves in one way a broken or malicious host could: it hangs up before key
exchange with a reason full of escape sequences, answers every command with a document of
its choosing, floods stdout without end, or never answers channel-open requests while it
keeps answering keepalives. They authenticate the generated client key like a real host, so
``ddptui check`` and ``ddptui trust`` reach the misbehaviour.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
from asyncssh.constants import MSG_KEXINIT

from tests.testbed import keys

_T = TypeVar("_T")
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


class HostileSshServer:
    """An in-process SSH server on 127.0.0.1 that misbehaves as ``behaviour`` says."""

    host = "127.0.0.1"

    def __init__(
        self,
        root: Path,
        behaviour: Behaviour,
        *,
        answer: bytes = b"",
        reason: str = "",
        authority: asyncssh.SSHKey | None = None,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.behaviour = behaviour
        self.answer = answer
        self.reason = reason
        self.authority = authority
        """With a CA's private key, the server presents a host certificate it signed."""
        self.client_key = root / "id_ed25519"
        self.known_hosts = root / "known_hosts"
        """A known_hosts line for this server, for tests that start out trusting it."""
        self.flooded = 0
        """Bytes the flood wrote before the client hung up."""
        self.channel_opens = 0
        """Channel-open requests swallowed."""
        self.port = 0
        keys.write_key_pair(self.client_key, "ddptui-hostile-client")
        self._host_key = root / "ssh_host_ed25519_key"
        self._host_public = keys.write_key_pair(self._host_key, "ddptui-hostile-server")
        self.host_key = asyncssh.import_public_key(self._host_public)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()

    @classmethod
    def start(cls, root: Path, behaviour: Behaviour, **kwargs: Any) -> HostileSshServer:
        server = cls(root, behaviour, **kwargs)
        server._thread.start()
        server._call(server._listen())
        return server

    def stop(self) -> None:
        if self._thread.is_alive():
            self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def __enter__(self) -> HostileSshServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

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

    async def _close(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
        for conn in list(self._connections):
            conn.abort()

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
