"""The real supervisor with its hosts simulated (``benchmarks/sim_hosts.py``), for
``benchmarks/scale.py``.

Only starting and stopping the ranks is simulated (:class:`SimBackend`: the simulated hosts step
from their first follower on). Each node is followed, and its stacks dumped, either way:

- over SSH (:class:`SimBackend`): as :class:`~ddptui.run.backends.ssh.backend.SshBackend` does,
  through the hosts file's kind's transport, :class:`~ddptui.remote.connection.RemoteCluster`:
  each node's :class:`~ddptui.run.following.files.HostFollower` on an SSH connection of its own
  running the node agent's ``follow``, and ``dump`` asked on those connections, as the
  supervisor asks it;
- over a Unix socket (:class:`SocketBackend`): each node's follower is still ddptui's own
  :class:`~ddptui.run.following.files.HostFollower` — its inbox, its parsing of the agent's
  documents, its offsets, its silence — but it reads the socket instead of an SSH channel: no
  SSH, its connections or its encryption, in the supervisor's CPU.

Everything above the followers (following, the journal, the model, judging, the record, viewers
on the supervisor's socket) is the code users run.

``python benchmarks/sim_backend.py ROOT RUN_ID [SOCKET]``: supervise the recorded run, launching
it, until SIGTERM, over SSH to the hosts its hosts file names, or with ``SOCKET`` over that
socket; as ``python -m ddptui.run.supervisor`` does, it holds the run's lock and writes its pid,
so viewers find it as they find any supervisor.
"""

from __future__ import annotations

import asyncio
import cProfile
import fcntl
import logging
import os
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sim_hosts import host_name
from ddptui.config import Config, load_config
from ddptui.config.model import HostConfig
from ddptui.remote.commands import CommandResult
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.stream import LineStream
from ddptui.remote.transport import Command, RemoteError, Transport
from ddptui.run.backends import Follower, Owner, RunBackend, StartFailed, kind_of
from ddptui.run.following.files import MAX_DOCUMENT_BYTES, HostFollower
from ddptui.run.record import Attempt, NodeRecord, RunRecord, RunState
from ddptui.run.stopper import StopReport
from ddptui.run.store import RunStore
from ddptui.run.supervisor import Supervisor
from ddptui.run.supervisor.jobs import Launch
from ddptui.run.supervisor.process import serve


def sim_run(
    run_id: str, nodes: int, per_node: int, *, running: bool = False
) -> tuple[RunRecord, str]:
    """A run on ``nodes`` simulated hosts of ``per_node`` ranks (named as the simulated hosts
    name themselves), and its hosts file: staging, or with ``running`` its first attempt
    running."""
    names = [host_name(node) for node in range(nodes)]
    addresses = [f"10.{node // 250}.{node % 250}.1" for node in range(nodes)]
    hosts = "".join(
        f'[[hosts]]\nname = "{name}"\naddress = "{address}"\n'
        for name, address in zip(names, addresses, strict=True)
    )
    placed = [
        NodeRecord(name, address, node, per_node, "/r", [], {})
        for node, (name, address) in enumerate(zip(names, addresses, strict=True))
    ]
    record = RunRecord(
        run_id, time.time(), "hosts.toml", "trainer", "nccl", addresses[0], nodes * per_node,
        [], placed,
    )  # fmt: skip
    record.transition(RunState.STAGING, "simulated")
    if running:
        record.begin_attempt(Attempt(1, time.time(), 29500), "simulated")
        record.transition(RunState.RUNNING, "simulated")
    return record, hosts


class SimStream(LineStream):
    """A simulated node agent's output, as an SSH channel's would be read."""

    def __init__(
        self, follower: HostFollower, writer: asyncio.StreamWriter, reader: object
    ) -> None:
        super().__init__(follower.host, reader, MAX_DOCUMENT_BYTES)  # type: ignore[arg-type]
        self._writer = writer

    @property
    def exit_status(self) -> int | None:
        return None

    async def close(self) -> None:
        self._writer.close()


class SimFollower(HostFollower):
    socket = ""

    async def _open(self) -> LineStream:
        reader, writer = await asyncio.open_unix_connection(self.socket, limit=1 << 20)
        writer.write(f"{self.host.name}\n".encode())
        self._stream = SimStream(self, writer, reader)
        return self._stream


class SimTransport(Transport):
    """Agent commands to the simulated hosts: ``dump`` is answered as a node agent answers it
    (each rank's stacks); the run's files are followed by :class:`SimFollower` instead."""

    socket = ""

    async def connect(self, host: HostConfig) -> Reachability:
        return Reachability(Reach.OK)

    async def _execute(self, host: HostConfig, command: Command) -> CommandResult:
        if "dump" not in command.argv:
            return CommandResult(1, "", f"the simulated hosts run no {command.argv}")
        reader, writer = await asyncio.open_unix_connection(self.socket, limit=1 << 24)
        writer.write(f"{host.name} dump\n".encode())
        answer = await reader.read()
        writer.close()
        return CommandResult(0, answer.decode(), "")

    async def open_stream(
        self, host: HostConfig, argv: Sequence[str], *, input: str, max_line: int
    ) -> LineStream:
        raise RemoteError(f"{host.name}: the simulated hosts are followed by SimFollower")

    async def close(self) -> None:
        return None


class SimBackend(RunBackend):
    """Starts nothing (the simulated hosts step from their first follower) and stops nothing;
    it follows and dumps as the SSH backend does, which is what is measured."""

    def __init__(self, config: Config, owner: Owner) -> None:
        super().__init__(config, owner, kind_of(config).transport)

    async def start(self, number: int, *, resume: bool, debug: bool) -> StartFailed | None:
        self.owner.attempt_starting(number, 29500, f"starting attempt {number}")
        self.owner.attempt_running("every node started")
        return None

    async def stop(self, *, kill: bool, graceful: bool) -> StopReport:
        return StopReport(graceful=graceful and not kill)

    async def terminate(self, skip: Collection[str] = ()) -> StopReport:
        return StopReport()


class SocketBackend(SimBackend):
    """Follows and dumps the simulated hosts through their Unix socket: no SSH is opened."""

    def __init__(self, config: Config, owner: Owner) -> None:
        RunBackend.__init__(self, config, owner, _socket_transport)

    def follower(self, node: NodeRecord, offsets: Mapping[str, int] | None) -> Follower:
        return SimFollower.of_node(self.config, self.owner.record, node, offsets=offsets)


async def _socket_transport(hosts: Sequence[HostConfig], job_id: str | None) -> Transport:
    return SimTransport()


def main(root: str, run_id: str, socket: str | None = None) -> None:
    store = RunStore(Path(root))
    files = store.files(run_id)
    lock = files.supervisor_lock.open("ab")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    files.supervisor_pid.write_text(f"{os.getpid()}\n")
    logging.basicConfig(filename=files.supervisor_log, level=logging.INFO)
    backend = SimBackend
    if socket is not None:
        SimFollower.socket = SimTransport.socket = socket
        backend = SocketBackend
    record = store.load(run_id)
    supervisor = Supervisor(store, record, load_config(files.hosts), backend=backend)
    profile = os.environ.get("SCALE_PROFILE")
    if profile:
        # Where the supervisor's time goes (scale.py --profile), written as it exits.
        cProfile.runctx("asyncio.run(serve(supervisor, Launch()))", globals(), locals(), profile)
    else:
        asyncio.run(serve(supervisor, Launch()))


if __name__ == "__main__":
    main(*sys.argv[1:4])
