"""A real SSH server inside the test process (asyncssh on 127.0.0.1, a free port).

The fast tier: exec over genuine SSH without namespaces or root. Commands run as
the current user through ``sh -c`` like sshd runs them, but with ``HOME`` and the working
directory set to a private ``home``, so remote ``~`` paths stay inside the test's tmp dir.
"""

from __future__ import annotations

import asyncio
import getpass
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from ddptui.demo.sshd import run_session
from tests.testbed import keys

_T = TypeVar("_T")


class LocalSshServer:
    """An in-process SSH server on ``host``:``port``, trusting one generated client key.

    Runs on its own event loop thread, so synchronous tests and tests with their own
    ``asyncio.run`` can both use it.
    """

    host = "127.0.0.1"

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.home = root / "home"
        self.home.mkdir(exist_ok=True)
        self.user = getpass.getuser()
        self.client_key = root / "id_ed25519"
        self.known_hosts = root / "known_hosts"
        self.commands: list[str] = []
        """Every exec request received, as the client sent it (for quoting assertions)."""
        self.port = 0
        keys.write_key_pair(self.client_key, "ddptui-test-client")
        self._host_key = root / "ssh_host_ed25519_key"
        self._host_public = keys.write_key_pair(self._host_key, "ddptui-test-server")
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._acceptor: asyncssh.SSHAcceptor | None = None

    @classmethod
    def start(cls, root: Path) -> LocalSshServer:
        """Listen on a free port of 127.0.0.1 and write a known_hosts entry for it."""
        server = cls(root)
        server._thread.start()
        server._call(server._listen())
        return server

    def stop(self) -> None:
        """Stop listening and drop every open connection, as if the host went away."""
        if self._thread.is_alive():
            self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def __enter__(self) -> LocalSshServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _listen(self) -> None:
        server = self

        class Tracking(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                self._conn = conn
                server._connections.add(conn)

            def connection_lost(self, exc: Exception | None) -> None:
                server._connections.discard(self._conn)

        self._acceptor = await asyncssh.listen(
            self.host,
            0,
            server_factory=Tracking,
            server_host_keys=[str(self._host_key)],
            authorized_client_keys=str(self.client_key) + ".pub",
            process_factory=self._run,
            encoding=None,
        )
        self.port = self._acceptor.get_port()
        self.known_hosts.write_text(
            keys.known_hosts_line(self.host, self.port, self._host_public) + "\n"
        )

    async def _close(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
        for conn in list(self._connections):
            conn.close()
            await conn.wait_closed()

    async def _run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        self.commands.append(process.command if process.command is not None else "sh")
        await run_session(process, self.home, self.user, set())
