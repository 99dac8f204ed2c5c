"""A backend of in-memory hosts that drives the real supervisor in-process: each host steps,
stalls, exits, falls silent or comes back when a test says so, and every node sends a
heartbeat every few milliseconds as the agent does each round. Everything above the backend —
jobs, phases, following, the journal, judging, the record, the socket viewers attach to — is
the real code."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig, RecoveryConfig
from ddptui.remote.transport import Transport
from ddptui.run import protocol
from ddptui.run.backends import (
    BackendEvent,
    Follower,
    NodesEnded,
    Owner,
    Restarted,
    RunBackend,
    StartFailed,
    kind_of,
)
from ddptui.run.evidence.kept import StackDump
from ddptui.run.following.state import Verdict
from ddptui.run.following.updates import FileLine, Heartbeat, HostBack, HostSilent, Update
from ddptui.run.protocol import Attach, Reply, Request
from ddptui.run.record import NodeRecord, RunRecord, RunState
from ddptui.run.stopper import StopReport
from ddptui.run.store import RunStore
from ddptui.run.supervisor import Supervisor
from ddptui.run.supervisor.jobs import Job
from ddptui.run.supervisor.process import serve
from tests.run.bed import two_host_record

BEAT_S = 0.02
HOSTS = ("a", "b")


class Clock:
    """Monotonic time that a test can move forward (a hang window passes at once)."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.skew

    def wall(self) -> float:
        return time.time() + self.skew

    def jump(self, seconds: float) -> None:
        self.skew += seconds


@dataclass
class FakeHost:
    """One node: its ranks' files as lines, its torchrun's process group, its link."""

    name: str
    node_rank: int
    updates: asyncio.Queue[Update] = field(default_factory=asyncio.Queue)
    alive: dict[int, bool] = field(default_factory=dict)
    offset: int = 0
    silent: bool = False
    attempt: int = 0
    world_size: int = 4

    def _line(self, path: str, text: str) -> None:
        self.offset += len(text) + 1
        self.updates.put_nowait(FileLine(self.name, path, self.offset, text))

    def _event(self, kind: str, rank: int, **fields: object) -> None:
        local = rank - 2 * self.node_rank
        document = {"v": 1, "type": kind, "rank": rank, "local_rank": local}
        document.update(
            {"node_rank": self.node_rank, "world_size": self.world_size, "time": time.time()}
        )
        self._line(f"events/rank{rank}.jsonl", json.dumps({**document, **fields}))

    def start(self, attempt: int, step: int = 0) -> None:
        self.attempt = attempt
        self.alive[attempt] = True
        for rank in self.ranks:
            self._event("start", rank, start_step=step)

    @property
    def ranks(self) -> range:
        return range(2 * self.node_rank, 2 * self.node_rank + 2)

    def step(self, step: int) -> None:
        for rank in self.ranks:
            self._event("step", rank, step=step, loss=1.0 / step, step_time_s=0.01)

    def exit(self, status: int) -> None:
        if not self.alive.get(self.attempt):
            return
        self.alive[self.attempt] = False
        self._line(f"node/attempt-{self.attempt}.exit", str(status))

    def cut(self) -> None:
        self.silent = True
        self.updates.put_nowait(HostSilent(self.name, 15.0, "link cut"))

    def back(self) -> None:
        self.silent = False
        self.updates.put_nowait(HostBack(self.name))


class FakeFollower:
    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.closed = asyncio.Event()

    async def batches(self) -> AsyncIterator[list[Update]]:
        while not self.closed.is_set():
            try:
                yield [await asyncio.wait_for(self.host.updates.get(), BEAT_S)]
            except asyncio.TimeoutError:
                if not self.host.silent:
                    yield [Heartbeat(self.host.name, time.time(), dict(self.host.alive))]

    async def close(self) -> None:
        self.closed.set()

    def reached(self) -> tuple[str, Transport] | None:
        return None


class FakeBackend(RunBackend):
    """Starts, stops and ends attempts on :class:`FakeHost` nodes; what it was asked is kept
    in :attr:`asked`. Set :attr:`refuse` (nothing starts), :attr:`fail_running` (the start
    fails once the nodes are followed, as a failed allocation check) or hold
    :attr:`stacks_gate` to keep a job's stack dump from finishing (:attr:`asked_stacks_gate`:
    a dump a viewer asked for)."""

    ends_set_aside = True

    def __init__(self, config: Config, owner: Owner) -> None:
        # The kind's transport is never opened: the fake hosts are reached in memory.
        super().__init__(config, owner, kind_of(config).transport)
        self.hosts = {name: FakeHost(name, rank) for rank, name in enumerate(HOSTS)}
        self.set_aside: dict[str, FakeHost] = {}
        """The hosts recovery took out of the run, as they were left."""
        self.asked: list[str] = []
        self.refuse: StartFailed | None = None
        self.fail_running: StartFailed | None = None
        self.events: asyncio.Queue[BackendEvent] = asyncio.Queue()
        self.stacks_gate = asyncio.Event()
        self.stacks_gate.set()
        self.asked_stacks_gate = asyncio.Event()
        self.asked_stacks_gate.set()
        self.scheduler_holds = False
        self.holds_asked = 0
        """How often the supervisor asked whether the run is held: it asks at its idle exit
        (its run ended, nothing asked of it for its idle time) and nowhere else."""

    async def connect(self) -> None:
        self.asked.append("connect")

    async def disconnect(self) -> None:
        self.asked.append("disconnect")

    async def start(self, number: int, *, resume: bool, debug: bool) -> StartFailed | None:
        self.asked.append(f"start {number}{' resume' if resume else ''}")
        if self.refuse is not None:
            return self.refuse
        self.owner.say(f"staging attempt {number}")
        self.owner.attempt_starting(number, 29500, f"starting attempt {number}")
        for host in self.hosts.values():
            host.start(number)
        self.owner.attempt_running("every node started")
        return self.fail_running

    async def replace(
        self, swaps: Mapping[str, str], without: Collection[str] = ()
    ) -> StartFailed | None:
        self.asked.append(
            f"replace {dict(swaps)}" + (f" without {sorted(without)}" if without else "")
        )

        def placed(record: RunRecord) -> None:
            kept = [node for node in record.nodes if node.host not in without]
            record.nodes = [
                dataclasses.replace(node, host=swaps.get(node.host, node.host), node_rank=rank)
                for rank, node in enumerate(kept)
            ]
            record.world_size = sum(node.nproc for node in record.nodes)

        self.owner.change(placed)
        for host in without:
            self.set_aside[host] = self.hosts.pop(host)
        for host, spare in swaps.items():
            self.set_aside[host] = self.hosts.pop(host)
            self.hosts[spare] = FakeHost(spare, self.set_aside[host].node_rank)
        for node in self.owner.record.nodes:
            self.hosts[node.host].node_rank = node.node_rank
            self.hosts[node.host].world_size = self.owner.record.world_size
        return None

    async def stop(self, *, kill: bool, graceful: bool) -> StopReport:
        self.asked.append(f"stop kill={kill} graceful={graceful}")
        for host in self.hosts.values():
            host.exit(0 if graceful else 143)
        return StopReport(graceful=graceful and not kill)

    async def terminate(self, skip: Collection[str] = ()) -> StopReport:
        self.asked.append(f"terminate skip={sorted(skip)}")
        for host in self.hosts.values():
            if host.name not in skip:
                host.exit(143)
        return StopReport()

    async def end_set_aside(self, host: str, run_dir: str) -> StopReport | None:
        self.asked.append(f"end set aside {host} {run_dir}")
        left = self.set_aside[host]
        if left.silent:
            return StopReport(unreachable={host: "link cut"})
        killed = [f"python3 (rank {rank})" for rank in left.ranks if left.alive.get(left.attempt)]
        left.alive[left.attempt] = False
        return StopReport(killed={host: killed} if killed else {})

    def follower(self, node: NodeRecord, offsets: Mapping[str, int] | None) -> Follower:
        return FakeFollower(self.hosts[node.host])

    async def take_stacks(
        self,
        skip: Collection[str] = (),
        followed: Mapping[str, Transport] | None = None,
        *,
        own_connections: bool = False,
    ) -> StackDump:
        if own_connections:
            # A dump asked for, beside the jobs: the gate holds the jobs' alone.
            self.asked.append("stacks asked")
            await self.asked_stacks_gate.wait()
        else:
            self.asked.append(f"stacks skip={sorted(skip)}" if skip else "stacks")
            await self.stacks_gate.wait()
        return StackDump(self.owner.record.id, time.time(), ())

    @property
    def holds_run(self) -> bool:
        self.holds_asked += 1
        return self.scheduler_holds

    async def watch(self) -> AsyncIterator[BackendEvent]:
        while True:
            yield await self.events.get()

    async def ending(self, event: NodesEnded) -> Verdict | None:
        if self.owner.record.state.final:
            return None
        return await self.owner.verdict_within(0.2) or Verdict(
            RunState.FAILED, "the scheduler ended the job"
        )

    async def ended(self, event: NodesEnded, state: RunState) -> None:
        self.asked.append(f"ended {state.value}")

    async def restart(self, event: Restarted) -> StartFailed | None:
        record = self.owner.record
        number = record.attempt.number + 1
        self.asked.append(f"restart {number}")
        self.owner.attempt_starting(number, 29500, f"attempt {number}: requeued")
        for host in self.hosts.values():
            host.start(number)
        self.owner.attempt_running("requeued job runs", list(record.nodes), "a,b")
        return None


def config(*, recovery: RecoveryConfig | None = None, **job: object) -> Config:
    """Hosts a and b in the run; with ``recovery``, c as their spare."""
    hosts = (HostConfig("a", "10.0.0.1"), HostConfig("b", "10.0.0.2"))
    if recovery is None:
        return Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig(**job))  # type: ignore[arg-type]
    spare = HostConfig("c", "10.0.0.3", spare=True)
    return Config(
        Path("hosts.toml"),
        ClusterConfig(),
        (*hosts, spare),
        JobConfig(**job),  # type: ignore[arg-type]
        recovery=recovery,
    )


def new_record(store: RunStore, *, attempts: int, state: RunState) -> RunRecord:
    record = two_host_record(attempts)
    nodes = [
        NodeRecord(n.host, n.address, n.node_rank, n.nproc, n.run_dir, [], {}) for n in record.nodes
    ]
    record.nodes = nodes
    for passing in _path_to(state):
        record.transition(passing, passing.value, now=0.0)
    store.create(record, "")
    return record


def _path_to(state: RunState) -> list[RunState]:
    way = {
        RunState.STAGING: [RunState.STAGING],
        RunState.STARTING: [RunState.STAGING, RunState.STARTING],
        RunState.RUNNING: [RunState.STAGING, RunState.STARTING, RunState.RUNNING],
        RunState.STOPPING: [
            RunState.STAGING,
            RunState.STARTING,
            RunState.RUNNING,
            RunState.STOPPING,
        ],
        RunState.FAILED: [RunState.STAGING, RunState.STARTING, RunState.FAILED],
    }
    return way[state]


class Viewer:
    """A viewer on the supervisor's real socket: requests and what it was told."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.told: list[object] = []
        self._count = 0

    @classmethod
    async def attach(cls, supervisor: Supervisor, position: int | None = None) -> Viewer:
        with protocol.socket_address(supervisor.files.socket) as address:
            for _ in range(200):
                with contextlib.suppress(OSError):
                    reader, writer = await asyncio.open_unix_connection(
                        address, limit=protocol.MAX_MESSAGE_BYTES
                    )
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the supervisor never listened")
        writer.write(protocol.message(Attach(position)))
        return cls(reader, writer)

    def send(self, op: str, bring_back: tuple[str, ...] = ()) -> str:
        """Ask for ``op`` without waiting: the request's id."""
        self._count += 1
        request = f"r{self._count}"
        self.writer.write(protocol.message(Request(request, op, bring_back=bring_back)))
        return request

    async def ask(
        self, op: str, *, timeout: float = 20.0, bring_back: tuple[str, ...] = ()
    ) -> Reply:
        request = self.send(op, bring_back)
        return await self.until(
            lambda item: isinstance(item, Reply) and item.id == request, timeout=timeout
        )  # type: ignore[return-value]

    async def until(self, wanted: object, *, timeout: float = 20.0) -> object:
        async def read() -> object:
            while True:
                raw = await self.reader.readline()
                if not raw:
                    raise AssertionError(f"the supervisor hung up; told {self.told[-5:]}")
                item = protocol.decode(raw)
                self.told.append(item)
                if wanted(item):  # type: ignore[operator]
                    return item

        return await asyncio.wait_for(read(), timeout)

    def close(self) -> None:
        self.writer.close()


class Bed:
    """A supervisor of a two-host run on :class:`FakeBackend`, served on its real socket."""

    def __init__(self, root: Path, record: RunRecord, config: Config) -> None:
        self.clock = Clock()
        self.store = RunStore(root)
        self.supervisor = Supervisor(
            self.store,
            record,
            config,
            backend=FakeBackend,
            clock=self.clock,
            wall=self.clock.wall,
            idle_exit_s=0.5,
        )
        assert isinstance(self.supervisor.backend, FakeBackend)
        self.backend: FakeBackend = self.supervisor.backend
        self.task: asyncio.Task[None] | None = None

    def serve(self, first: Job | None) -> None:
        self.task = asyncio.create_task(serve(self.supervisor, first))

    @property
    def record(self) -> RunRecord:
        return self.store.load(self.supervisor.record.id)

    @property
    def moves(self) -> list[tuple[str, str]]:
        return [(a.value, b.value) for a, b in self.supervisor.phases.moves]

    async def until(self, done: object, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out; record {self.record.state.value}: {self.record.detail}; "
                    f"moves {self.moves}; asked {self.backend.asked}"
                )
            await asyncio.sleep(0.01)

    async def hang(self) -> None:
        """Every rank steps twice, then none for longer than a hang window of 2 s: until the
        supervisor asks for the hang's stacks."""
        for step in (1, 2):
            for host in self.backend.hosts.values():
                host.step(step)
        await self.until(lambda: self.supervisor.following.model.attempt_steps == 8)
        self.clock.jump(3.0)
        await self.until(lambda: "stacks" in self.backend.asked)

    async def until_state(self, state: RunState) -> None:
        await self.until(lambda: self.supervisor.record.state is state)

    async def until_idle_exits(self, times: int = 2) -> None:
        """Until the supervisor, its run ended, has come to its idle exit ``times`` more times
        (having come to the second, it stayed at the first), or has exited."""
        asked = self.backend.holds_asked
        await self.until(
            lambda: (
                self.backend.holds_asked >= asked + times
                or (self.task is not None and self.task.done())
            )
        )

    async def finish(self) -> None:
        """Until the supervisor exits, idle (its run ended and nothing asked)."""
        assert self.task is not None
        # Not wait_for: serve() takes a cancel as SIGTERM and returns, so a supervisor that
        # never exits by itself would look finished after the timeout.
        done, _ = await asyncio.wait({self.task}, timeout=30.0)
        if not done:
            self.task.cancel()
            raise AssertionError("the supervisor did not exit by itself within 30 s")
        self.task.result()
