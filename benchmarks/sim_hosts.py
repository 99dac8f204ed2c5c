"""Simulated hosts for ``benchmarks/scale.py``: many nodes' node agents as one process.

``python benchmarks/sim_hosts.py TRANSPORT WHERE NODES PER_NODE STEPS_PER_S`` serves the hosts
``sim0000``, ``sim0001``… either way the benchmark follows them:

- ``socket WHERE``: a Unix socket at ``WHERE``. A connection says a host's name on its first
  line (and ``dump`` after it, to ask for the stacks) and then reads what that host's node agent
  ``follow`` would send over its SSH channel;
- ``ssh WHERE``: a real SSH server for each host on its own port of 127.0.0.1
  (``benchmarks/loopback.py``), and ``WHERE/hosts.toml``, the hosts file that reaches them with
  the client key and known_hosts it names. Each answers the node agent's commands as ddptui
  sends them (``python - follow RUN_DIR thin``, the agent's program on stdin, and ``python - dump
  RUN_DIR``): their encryption is then the hosts' CPU, as an sshd's is.

What a followed host sends: every new line of the run's files as the agent's JSON documents,
its ranks' step events thinned as the agent thins them (``ddptui.onhost.follow.Thinned``)
(each rank's ``start`` then ``step`` events, shaped as the bundled trainer's on an H200 —
tests/fixtures/events —, a progress line in local rank 0's stdout every 10 steps) and a
heartbeat every 2 s (each rank's process state and CPU, 8 GPUs as the agent samples them: the
recorded H200 row of tests/fixtures/gpu). Steps are spread over the second, each rank at its
own phase, as ranks that step together but print a little apart. A host writes what it has
once a round, as the agent does (every ``POLL_S``), each host in its own rhythm.

Commands on stdin, each answered on stdout with a wall time: ``freeze`` (no rank steps any
more, one rank's process is stopped: a hang; answered with the time of the last step a rank
made, where a hang's window starts), ``thaw``, ``fail NODE`` (the node's local rank 0 raises and
its torchrun exits 1), each answered with the time it took effect, and ``quit``.

Cheap per line (lines are formatted, not built as dicts): its CPU is the hosts', not the
head's, and it runs beside what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import Any, Protocol

import asyncssh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.loopback import loopback_hosts
from ddptui.demo.sshd import LoopbackSshd
from ddptui.onhost.common import POLL_S
from ddptui.onhost.follow import smi_value
from ddptui.onhost.thinning import Thinned
from ddptui.run.following.sample import GPU_FIELDS
from tests.helpers.hostile_server import command_argv

TICK_S = 0.02
BEAT_S = 2.0
PRINT_EVERY = 10
RUN_ID = "sim"
RECORDED_GPU = "0, 35, 79.39, 700.00, 345, 1980, 0, 0, 0, 143771, P0, 0"
"""One H200 as the agent's ``nvidia-smi --query-gpu`` read it (recordings/h200)."""
STEP = (
    '{{"v":1,"type":"step","rank":{rank},"local_rank":{local},"node_rank":{node},'
    '"world_size":{world},"time":{now:.6f},"epoch":0,"step":{step},"loss":{loss:.6f},'
    '"lr":0.0003,"samples_per_s":{speed:.1f},"step_time_s":{took:.6f},'
    '"cuda_allocated_mib":883.1,"cuda_reserved_mib":3728.0,"cuda_peak_mib":3346.1}}'
)
START = (
    '{{"v":1,"type":"start","rank":{rank},"local_rank":{local},"node_rank":{node},'
    '"world_size":{world},"time":{now:.6f},"device":"cuda:{local}","backend":"nccl",'
    '"task":"synthetic","global_batch":{batch},"start_step":0,"start_epoch":0,'
    '"total_steps":1000000,"hostname":"{host}","pid":{pid}}}'
)
ERROR = (
    '{{"v":1,"type":"error","rank":{rank},"local_rank":0,"node_rank":{node},"world_size":{world},'
    '"time":{now:.6f},"message":"DistBackendError: NCCL error: unhandled system error (run with '
    'NCCL_DEBUG=INFO for details), NCCL version 2.28.9","traceback":"Traceback (most recent call '
    'last):\\n  File \\"/home/alice/ddptui/trainer/loop.py\\", line 212, in step\\n"}}'
)

TORCH = "/opt/venv/lib/python3.12/site-packages/torch"
WAITING_FRAMES = (
    ("wait", f"{TORCH}/distributed/distributed_c10d.py", 2806),
    ("all_reduce", f"{TORCH}/distributed/distributed_c10d.py", 2781),
    ("_sync_params", f"{TORCH}/nn/parallel/distributed.py", 1690),
    ("step", "/home/alice/ddptui/trainer/loop.py", 212),
    ("main", "/home/alice/ddptui/trainer/main.py", 40),
)
ODD_FRAMES = (
    ("save", f"{TORCH}/serialization.py", 967),
    ("checkpoint", "/home/alice/ddptui/trainer/checkpoint.py", 88),
    ("step", "/home/alice/ddptui/trainer/loop.py", 230),
    ("main", "/home/alice/ddptui/trainer/main.py", 40),
)


def host_name(node: int) -> str:
    return f"sim{node:04d}"


class Channel(Protocol):
    """Where a followed host's documents go: a Unix socket's writer or an SSH session's
    stdout."""

    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...


def gpu_row(index: int, busy: bool) -> dict[str, Any]:
    """A GPU's row as the agent sends it: the recorded H200's sample typed as the agent types
    nvidia-smi's cells, then its health counters as NVML gives them (at its power limit while
    busy, idle otherwise)."""
    cells = RECORDED_GPU.split(",")
    names = GPU_FIELDS[: len(cells)]
    row: dict[str, Any] = {
        name: smi_value(name, cell) for name, cell in zip(names, cells, strict=True)
    }
    row["index"] = index
    if busy:
        row.update({"utilization.gpu": 97, "memory.used": 61440, "power.draw": 612.4})
    health = dict.fromkeys(GPU_FIELDS[len(cells) :], 0)
    row.update(health, throttle_reasons=0x4 if busy else 0x1)
    return row


class Host:
    def __init__(self, name: str, node: int, per_node: int, world: int, rate: float) -> None:
        self.name, self.node, self.world = name, node, world
        self.ranks = range(node * per_node, (node + 1) * per_node)
        self.per_node = per_node
        self.period = 1.0 / rate
        self.offsets: dict[str, int] = {}
        self.steps = dict.fromkeys(self.ranks, 0)
        self.due: dict[int, float] = {}
        self.unread: list[tuple[str, int, str]] = []
        """The lines written since the agent's last round: path, offset after, text."""
        self.thinned = {f"events/rank{rank}.jsonl": Thinned() for rank in self.ranks}
        self.pending: list[str] = []
        """Documents to send at the end of the round (heartbeats)."""
        self.writer: Channel | None = None
        self.last_step = 0.0
        self.exit: int | None = None
        self.stopped_rank: int | None = None
        self.log = f"logs/attempt-1/{RUN_ID}_{node}/attempt_0/0/stdout.log"
        self.next_round = (node * 0.618) % 1.0 * POLL_S

    def line(self, path: str, text: str) -> None:
        offset = self.offsets.get(path, 0) + len(text.encode()) + 1
        self.offsets[path] = offset
        self.unread.append((path, offset, text))

    def read(self, clock: float) -> list[str]:
        """What the agent sends in a round of what was written since the last: step events
        thinned as its ``follow`` thins them."""
        sent: list[tuple[str, int, str]] = []

        def held(path: str, lines: list[tuple[int, bytes]]) -> None:
            sent.extend((path, offset, line.decode()) for offset, line in lines)

        for path, offset, text in self.unread:
            thinned = self.thinned.get(path)
            if path.endswith(".exit"):
                for each, other in self.thinned.items():
                    held(each, other.release())
            if thinned is None:
                sent.append((path, offset, text))
            else:
                held(path, thinned.take(offset, text.encode(), clock))
        self.unread.clear()
        for path, thinned in self.thinned.items():
            held(path, thinned.end_round(clock))
        return [
            f'{{"k":"line","f":"{path}","o":{offset},"t":{json.dumps(text)}}}'
            for path, offset, text in sent
        ]

    def start(self, now: float, clock: float) -> None:
        # Stepping from its first follower on: a host followed late (many SSH handshakes
        # before it) would otherwise catch up at a step a tick, ten times its rate. Each rank
        # at its own phase of the step: all ranks do not print in the same tick.
        self.due = {rank: clock + (rank * 0.618) % 1.0 * self.period for rank in self.ranks}
        for rank in self.ranks:
            local = rank - self.ranks.start
            self.line(
                f"events/rank{rank}.jsonl",
                START.format(
                    rank=rank, local=local, node=self.node, world=self.world, now=now,
                    batch=32 * self.world, host=self.name, pid=1000 + local,
                ),
            )  # fmt: skip

    def tick(self, clock: float, now: float, frozen: bool) -> None:
        if frozen or self.exit is not None:
            return
        for rank in self.ranks:
            if self.due[rank] > clock:
                continue
            self.due[rank] += self.period
            self.last_step = now
            step = self.steps[rank] = self.steps[rank] + 1
            loss = 4.0 / (1 + 0.01 * step) + rank * 1e-4
            self.line(
                f"events/rank{rank}.jsonl",
                STEP.format(
                    rank=rank, local=rank - self.ranks.start, node=self.node, world=self.world,
                    now=now, step=step, loss=loss, speed=32 / self.period, took=self.period,
                ),
            )  # fmt: skip
            if rank == self.ranks.start and step % PRINT_EVERY == 0:
                self.line(self.log, f"epoch 0 step {step} loss {loss:.4f} lr 3.0e-04")

    def beat(self, now: float, frozen: bool) -> None:
        ranks = {
            str(rank): {
                "state": "T" if rank == self.stopped_rank else ("S" if frozen else "R"),
                "cpu_pct": 0.0 if rank == self.stopped_rank else (99.0 if frozen else 97.5),
            }
            for rank in self.ranks
        }
        sample = {
            "procs": self.per_node + 1,
            "cpu_pct": 97.5 * self.per_node,
            "rss_mib": 2900.0 * self.per_node,
            "ranks": ranks,
            "gpus": [gpu_row(index, not frozen) for index in range(self.per_node)],
        }
        groups = {"1": self.exit is None}
        self.pending.append(
            json.dumps({"k": "hb", "time": now, "groups": groups, "sample": sample})
        )

    def fail(self, now: float) -> None:
        rank = self.ranks.start
        self.line(
            f"events/rank{rank}.jsonl",
            ERROR.format(rank=rank, node=self.node, world=self.world, now=now),
        )
        self.exit = 1
        self.line("node/attempt-1.exit", "1")

    def dump(self, frozen: bool) -> dict[str, object]:
        """The agent's answer to ``dump``: each rank's stacks as py-spy prints them, the ranks
        in a collective (frozen: but the stopped one, in its step)."""
        ranks = []
        for rank in self.ranks:
            odd = frozen and rank == self.stopped_rank
            frames = ODD_FRAMES if odd else WAITING_FRAMES
            text = f'Thread {2000 + rank} (idle): "MainThread"\n' + "".join(
                f"    {function} ({path}:{line})\n" for function, path, line in frames
            )
            pid = 1000 + rank - self.ranks.start
            ranks.append(
                {"rank": rank, "pid": pid, "via": "py-spy", "text": text, "error": "", "note": ""}
            )
        return {"attempt": 1, "ranks": ranks, "flight": []}

    def flush(self, clock: float) -> None:
        documents = self.read(clock) + self.pending
        if self.writer is not None and documents and not self.writer.is_closing():
            self.writer.write(("\n".join(documents) + "\n").encode())
        self.pending.clear()


class Simulation:
    def __init__(self, nodes: int, per_node: int, rate: float) -> None:
        world = nodes * per_node
        self.hosts = {
            host_name(node): Host(host_name(node), node, per_node, world, rate)
            for node in range(nodes)
        }
        self.frozen = False
        self.started = time.monotonic()

    async def connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection to the Unix socket (the ``socket`` transport)."""
        name, _, command = (await reader.readline()).decode().strip().partition(" ")
        if name not in self.hosts:
            writer.close()
            return
        if command == "dump":
            # Asked by a supervisor that may end before it reads the answer (the benchmark
            # ends it once the failure is recorded, while it keeps the evidence).
            with contextlib.suppress(ConnectionError):
                writer.write(self.dump(name))
                await writer.drain()
            writer.close()
            return
        await self.followed(name, writer, reader.read())

    async def followed(self, name: str, channel: Channel, ended: Awaitable[object]) -> None:
        """Send host ``name``'s documents to ``channel`` until ``ended``: its lines from its
        first follower on, from a follower that reconnects only the new ones (their offsets
        run on, as a file's do)."""
        host = self.hosts[name]
        if host.writer is None and not host.offsets:
            host.start(time.time(), time.monotonic() - self.started)
        host.writer = channel
        with contextlib.suppress(ConnectionError):
            await ended
        if host.writer is channel:
            host.writer = None

    def dump(self, name: str) -> bytes:
        """Host ``name``'s node agent's answer to ``dump``, its line."""
        return json.dumps(self.hosts[name].dump(self.frozen)).encode() + b"\n"

    async def run(self) -> None:
        next_beat = time.monotonic()
        while True:
            clock, now = time.monotonic() - self.started, time.time()
            beat = time.monotonic() >= next_beat
            if beat:
                next_beat += BEAT_S
            for host in self.hosts.values():
                if host.writer is None:
                    continue
                host.tick(clock, now, self.frozen)
                if beat:
                    host.beat(now, self.frozen)
                if clock >= host.next_round:
                    # As the agent writes: once a round, each host in its own rhythm.
                    host.next_round = clock + POLL_S
                    host.flush(clock)
            await asyncio.sleep(TICK_S)

    def command(self, words: list[str]) -> str:
        now = time.time()
        match words:
            case ["freeze"]:
                self.frozen = True
                first = next(iter(self.hosts.values()))
                first.stopped_rank = first.ranks.start
                now = max(host.last_step for host in self.hosts.values())
            case ["thaw"]:
                self.frozen = False
                for host in self.hosts.values():
                    host.stopped_rank = None
                    # Stepping again from now, not catching up on the frozen time.
                    clock = time.monotonic() - self.started
                    host.due = dict.fromkeys(host.ranks, clock)
            case ["fail", node]:
                self.hosts[host_name(int(node))].fail(now)
            case _:
                return f"unknown {words}"
        return f"{words[0]} {now:.6f}"


class SimSshd(LoopbackSshd):
    """The simulated hosts' SSH servers: each session answers as its host's node agent."""

    def __init__(self, root: Path, client_public_key: str, simulation: Simulation) -> None:
        super().__init__(root, client_public_key)
        self.simulation = simulation

    def serve(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run ``coroutine`` on the servers' event loop until it ends: the simulation writes to
        the sessions' channels, which only that loop may touch."""
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _run(self, process: asyncssh.SSHServerProcess[bytes], home: Path) -> None:
        _python, _program, *args = command_argv(process.command or "")
        # The agent's program (with a follower's offsets): the simulation answers from its own.
        await process.stdin.read()
        match args:
            case ["follow", _run_dir, "thin"]:
                # As a supervisor follows: the simulation thins as the agent is asked to.
                await self.simulation.followed(home.name, process.stdout, process.wait_closed())
                return
            case ["dump", *_]:
                process.stdout.write(self.simulation.dump(home.name))
                status = 0
            case _:
                process.stderr.write(f"the simulated hosts run no {args[:1]}\n".encode())
                status = 127
        process.exit(status)


async def serve_commands(simulation: Simulation) -> None:
    """Step the simulation and follow stdin's commands, until ``quit``."""
    ticking = asyncio.create_task(simulation.run())
    loop = asyncio.get_running_loop()
    print("serving", flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        words = line.split()
        if not words or words == ["quit"]:
            break
        print(simulation.command(words), flush=True)
    ticking.cancel()


async def serve_socket(path: str, simulation: Simulation) -> None:
    # Every host's follower and, at a dump, every host's question connect at once: asyncio's
    # backlog of 100 refused some of 256 hosts' dumps.
    server = await asyncio.start_unix_server(simulation.connected, path=path, backlog=4096)
    await serve_commands(simulation)
    server.close()


def serve_ssh(directory: Path, simulation: Simulation, per_node: int) -> None:
    def sshd(root: Path, client_public_key: str) -> SimSshd:
        return SimSshd(root, client_public_key, simulation)

    directory.mkdir(mode=0o700)
    with loopback_hosts(directory, sshd, list(simulation.hosts)) as loopback:
        hosts_file = loopback.hosts_toml(loopback.servers.hosts, per_node)
        (directory / "hosts.toml").write_text(hosts_file)
        loopback.servers.serve(serve_commands(simulation))


def main(transport: str, where: str, nodes: int, per_node: int, rate: float) -> None:
    simulation = Simulation(nodes, per_node, rate)
    if transport == "socket":
        asyncio.run(serve_socket(where, simulation))
    else:
        serve_ssh(Path(where), simulation, per_node)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
