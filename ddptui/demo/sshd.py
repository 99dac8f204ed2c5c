"""The demo's hosts: in-process SSH servers on 127.0.0.1, one per host, on one event-loop thread.

Each host is a real asyncssh server (sessions only: ddptui needs no SFTP) on a free loopback
port with its own host key, accepting only the demo's generated client key. Commands run as the
current user through ``/bin/sh -c``, as sshd runs them, with ``HOME`` and the working directory
set to the host's own directory, so every host's ``~`` (its workdir, its runs) is separate
although all share one machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import signal
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import asyncssh

LOOPBACK = "127.0.0.1"
_T = TypeVar("_T")
_CHUNK = 65536
_CALL_TIMEOUT_S = 30.0
_NO_ENV: Mapping[str, str] = MappingProxyType({})


def write_key_pair(path: Path, comment: str) -> str:
    """Write a new ed25519 private key (mode 0600) and its ``.pub``; return the public line."""
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
    # OpenSSH and asyncssh refuse private keys others can read: the mode is set at creation.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.export_private_key())
    public: str = key.export_public_key().decode().strip()
    path.with_name(path.name + ".pub").write_text(public + "\n")
    return public


@dataclass(frozen=True)
class LoopbackHost:
    """One served host: where it listens and the directory that is its home."""

    name: str
    home: Path
    port: int
    host_key: str
    """The server's public key line, for known_hosts."""

    def known_hosts_line(self) -> str:
        kind, blob, *_ = self.host_key.split()
        return f"[{LOOPBACK}]:{self.port} {kind} {blob}"


class LoopbackSshd:
    """SSH servers for ``names``, each listening on a free port of 127.0.0.1.

    They run on a thread of their own, so whatever the caller's event loop does (a console,
    a blocking call) never stalls a host. :meth:`close` stops them and ends every session's
    command still running (not what those commands started in sessions of their own, such as
    a run's torchrun: stopping a run is the run layer's job).
    """

    def __init__(self, root: Path, client_public_key: str) -> None:
        self.root = root
        self.user = getpass.getuser()
        self._client_keys = asyncssh.import_authorized_keys(client_public_key + "\n")
        self.hosts: list[LoopbackHost] = []
        self._acceptors: list[asyncssh.SSHAcceptor] = []
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._children: set[asyncio.subprocess.Process] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ddptui-demo-sshd", daemon=True
        )
        self._thread.start()

    def add_host(self, name: str) -> LoopbackHost:
        """Start serving a host named ``name`` from ``root/name``."""
        home = self.root / name
        home.mkdir(mode=0o700)
        host_key = home / ".ssh_host_ed25519_key"
        public = write_key_pair(host_key, f"ddptui-demo-{name}")
        acceptor = self._call(self._listen(home, host_key))
        self._acceptors.append(acceptor)
        host = LoopbackHost(name, home, acceptor.get_port(), public)
        self.hosts.append(host)
        return host

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self._call(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=_CALL_TIMEOUT_S)
            if not self._thread.is_alive():
                self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_CALL_TIMEOUT_S)

    async def _listen(self, home: Path, host_key: Path) -> asyncssh.SSHAcceptor:
        connections = self._connections

        class Tracking(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                self._conn = conn
                connections.add(conn)

            def connection_lost(self, exc: Exception | None) -> None:
                connections.discard(self._conn)

        async def run(process: asyncssh.SSHServerProcess[bytes]) -> None:
            await self._run(process, home)

        return await asyncssh.listen(
            LOOPBACK,
            0,
            server_factory=Tracking,
            server_host_keys=[str(host_key)],
            authorized_client_keys=self._client_keys,
            password_auth=False,
            kbdint_auth=False,
            process_factory=run,
            encoding=None,
        )

    async def _close(self) -> None:
        for acceptor in self._acceptors:
            acceptor.close()
            await acceptor.wait_closed()
        for conn in list(self._connections):
            conn.close()
            await conn.wait_closed()
        for child in list(self._children):
            # Each session's command leads a process group of its own (start_new_session).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            await child.wait()

    async def _run(self, process: asyncssh.SSHServerProcess[bytes], home: Path) -> None:
        # A temporary directory per host, inside it: what torch caches there (inductor's
        # directory) goes when the demo does, and no host sees another's.
        tmp = home / ".tmp"
        tmp.mkdir(exist_ok=True)
        await run_session(process, home, self.user, self._children, {"TMPDIR": str(tmp)})


async def run_session(
    process: asyncssh.SSHServerProcess[bytes],
    home: Path,
    user: str,
    children: set[asyncio.subprocess.Process],
    env: Mapping[str, str] = _NO_ENV,
) -> None:
    """Run a session's command as sshd would for ``user`` logged in with ``home``, with ``env``
    over this process's environment; while it runs, its process is in ``children``."""
    # A shell request (no command) gets a non-interactive sh reading stdin, like sshd's
    # login shell without a terminal.
    command = process.command if process.command is not None else "sh"
    # The same user on the same machine: this process's environment, as a login would give
    # it (PATH, a PYTHONPATH that finds torch), with the host's own home.
    environment = {
        **os.environ,
        **env,
        **process.env,
        "HOME": str(home),
        "PWD": str(home),
        "USER": user,
        "LOGNAME": user,
    }
    child = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=home,
        env=environment,
        start_new_session=True,
    )
    children.add(child)
    try:
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        feed = asyncio.ensure_future(_feed(process.stdin, child.stdin))
        await asyncio.gather(
            _drain(child.stdout, process.stdout), _drain(child.stderr, process.stderr)
        )
        status = await child.wait()
        feed.cancel()
    finally:
        children.discard(child)
    if status < 0:
        process.exit_with_signal(signal.Signals(-status).name.removeprefix("SIG"))
    else:
        process.exit(status)


async def _feed(source: asyncssh.SSHReader[bytes], sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(_CHUNK):
            sink.write(chunk)
            await sink.drain()
    except (BrokenPipeError, ConnectionResetError, asyncssh.Error):
        return
    finally:
        if not sink.is_closing():
            sink.close()


async def _drain(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
    try:
        while chunk := await source.read(_CHUNK):
            sink.write(chunk)
            await sink.drain()
    except (BrokenPipeError, ConnectionResetError, asyncssh.Error):
        # The client went away: the command runs on unheard, as under sshd.
        await source.read()
