"""ddptui at a real cluster's size, by simulation: the supervisor and its viewers at 64 to
4,096 ranks.

Run: ``.venv/bin/python benchmarks/scale.py [--sizes 8x8@5,32x8@5,128x8@5,512x8@5]
[--seconds 30] [--transport socket|ssh|both]``. For each size (nodes × ranks per node @ steps
a second per rank), one process simulates every node's agent (``benchmarks/sim_hosts.py``:
real-shaped events, log lines and heartbeats), a real supervisor follows them
(``benchmarks/sim_backend.py``: starting and stopping the ranks is simulated), and two real
viewers attach as users do: ``ddptui logs RUN --follow --events`` (it reads and prints every
line) and ``ddptui logs RUN --follow`` (it reads every line and prints the ranks' output).

The supervisor reaches the simulated hosts one of two ways, both by default, side by side at
each size:

- ``ssh``: as it reaches a hosts file's hosts. Each simulated node is an SSH server of its own
  on 127.0.0.1 (asyncssh, in the simulated hosts' process), and each node's follower is
  ddptui's :class:`~ddptui.run.following.files.HostFollower` on a
  :class:`~ddptui.remote.connection.RemoteCluster` connection of its own, running the node
  agent's ``follow``: the supervisor's CPU includes decrypting every line, as it does on a
  cluster; the dump is ``ddptui dump``'s, over SSH;
- ``socket``: the same followers read a Unix socket to the simulated hosts instead: the
  supervisor's own work without SSH's (the difference between the rows is SSH's cost).

Measured, after a warm-up: each process's CPU (a share of one core) and the supervisor's
memory, how long a step takes from the simulated rank to the first viewer's output (p50, p99,
max, from a sample of lines), then how long after the last step a rank made the record says
``hung`` (against the hang window) and how long after a node's torchrun exits 1 it says
``failed``. Last, for each transport, how each grows with the events a second: the slope of a
least-squares line, and the supervisor's CPU per 1,000 events/s at each size (flat when the
growth is linear).

Targets (issue 45): at 1,024 ranks × 5 steps/s the supervisor ≤ 12% of a core and each viewer
≤ 3%; at 4,096 × 5 (``--sizes 512x8@5``) the supervisor < 25% and < 1 GiB, each viewer < 10%,
a step seen by a viewer within 1 s (p99), verdicts within 1 s of their windows (hung: the
window; failed: within torchrun's settle, 3 s) and the dump of every rank's stacks grouped in
< 1 s. The simulated hosts thin their ranks' step events as the agent does for a supervisor
(``ddptui.onhost.thinning``): what the head reads is what it would read from real hosts.
The simulated hosts share the machine's cores with what they drive: their own CPU (over
ssh, their SSH servers' too) is printed so that a saturated machine shows.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.procfs import cpu_seconds, memory_mib
from benchmarks.sim_backend import SimTransport, sim_run
from ddptui.config import load_config
from ddptui.remote.transport import Transport
from ddptui.run.backends import kind_of
from ddptui.run.control import RunControl
from ddptui.run.evidence import dump
from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.run.supervisor.judging import HANG_MIN_S

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = "20261204-000000-scal"
WARM_UP_S = 10.0
TIME_FIELD = re.compile(rb'"time":(\d+\.\d+)')
HANG_KEPT = "every rank's stacks at the hang"
SAMPLE_EVERY = 16
"""One printed event line in this many is timed (parsing them all would load the machine)."""
PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20
TRANSPORTS = ("socket", "ssh")


@dataclass(frozen=True)
class Size:
    nodes: int
    per_node: int
    rate: float

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node

    @property
    def events_per_s(self) -> float:
        return self.ranks * self.rate

    @classmethod
    def parse(cls, text: str) -> Size:
        shape, _, rate = text.partition("@")
        nodes, _, per_node = shape.partition("x")
        return cls(int(nodes), int(per_node), float(rate or 5))


@dataclass
class Figures:
    size: Size
    transport: str
    cpu: dict[str, float]
    rss_mib: float
    peak_mib: float
    latency: list[float]
    printed_per_s: list[float]
    hung_after: float | None
    failed_after: float | None
    dump_s: float
    dump_direct_s: float
    dump_stacks: int
    dump_groups: int


class Printed(threading.Thread):
    """Reads a viewer's output as it comes, timing one event line in ``SAMPLE_EVERY``."""

    def __init__(self, viewer: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True)
        self.viewer = viewer
        self.lines = 0
        self.latency: list[float] = []
        self.timing = False
        self.start()

    def run(self) -> None:
        assert self.viewer.stdout is not None
        pending = b""
        while chunk := self.viewer.stdout.read1(1 << 16):
            now = time.time()
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for index in range(0, len(lines), SAMPLE_EVERY):
                found = TIME_FIELD.search(lines[index]) if self.timing else None
                if found is not None:
                    self.latency.append(now - float(found.group(1)))
            self.lines += len(lines)


def until(what: str, done: object, timeout: float, every: float = 0.05) -> float:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} in {timeout:g} s")
        time.sleep(every)
    return time.time()


def command(sim: subprocess.Popen[str], words: str) -> float:
    """Tell the simulated hosts ``words``: the wall time it took effect (``freeze``: of the
    last step a rank made)."""
    assert sim.stdin is not None and sim.stdout is not None
    sim.stdin.write(words + "\n")
    sim.stdin.flush()
    return float(sim.stdout.readline().split()[1])


@dataclass
class SimulatedRun:
    """A run at ``size``: the simulated hosts, its real supervisor following them, and the
    store it is kept in (``env`` points ``XDG_STATE_HOME`` at it, for the processes that
    open it as users do)."""

    size: Size
    transport: str
    store: RunStore
    env: dict[str, str]
    sim: subprocess.Popen[str]
    supervisor: subprocess.Popen[bytes]
    socket: list[str]
    """The simulated hosts' socket, or empty over SSH."""


@contextmanager
def simulated_run(size: Size, transport: str, profile: str = "") -> Iterator[SimulatedRun]:
    """The simulated hosts and the supervisor, once the run is running and its supervisor
    listens for viewers; stopped on the way out."""
    work = Path(tempfile.mkdtemp(prefix="ddptui-scale-"))
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    supervisor_env = {**env, "SCALE_PROFILE": profile} if profile else env
    store = RunStore(work / "state" / "ddptui" / "runs")
    # The socket's path, or the directory of the SSH hosts' keys, homes and hosts file.
    where = work / ("hosts.sock" if transport == "socket" else "hosts")
    socket = [str(where)] if transport == "socket" else []
    python = sys.executable
    sim = subprocess.Popen(
        [python, str(ROOT / "benchmarks/sim_hosts.py"), transport, str(where), str(size.nodes),
         str(size.per_node), str(size.rate)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    supervisor = None
    try:
        assert sim.stdout is not None and sim.stdout.readline().strip() == "serving"
        record, hosts = sim_run(RUN_ID, size.nodes, size.per_node)
        store.create(record, hosts if socket else (where / "hosts.toml").read_text())
        supervisor = subprocess.Popen(
            [python, str(ROOT / "benchmarks/sim_backend.py"), str(store.root), RUN_ID, *socket],
            env=supervisor_env, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        until("running run", lambda: store.load(RUN_ID).state is RunState.RUNNING, 60)
        until("supervisor socket", store.files(RUN_ID).socket.exists, 30)
        yield SimulatedRun(size, transport, store, env, sim, supervisor, socket)
    finally:
        if supervisor is not None:
            supervisor.terminate()
            supervisor.wait(timeout=30)
        assert sim.stdin is not None
        sim.stdin.write("quit\n")
        sim.stdin.close()
        sim.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def measure(size: Size, transport: str, seconds: float, profile: str = "") -> Figures:
    with simulated_run(size, transport, profile) as run:
        viewers = [
            subprocess.Popen(
                [sys.executable, "-m", "ddptui", "logs", RUN_ID, "--follow", *flags],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=run.env,
            )
            for flags in (["--events"], [])
        ]
        try:
            return _measured(run, viewers, seconds)
        finally:
            for viewer in viewers:
                viewer.terminate()
            for viewer in viewers:
                viewer.wait(timeout=30)


def _measured(run: SimulatedRun, viewers: list[subprocess.Popen[bytes]], seconds: float) -> Figures:
    store, sim, socket = run.store, run.sim, run.socket
    printed = [Printed(viewer) for viewer in viewers]
    # A viewer that started slowly (seen on a loaded machine) would otherwise be measured
    # as one that prints nothing; one that never prints fails the benchmark here.
    until("line from each viewer", lambda: all(viewer.lines for viewer in printed), 60)
    time.sleep(WARM_UP_S)
    pids = {"supervisor": run.supervisor.pid, "simulated hosts": sim.pid}
    pids.update({f"viewer {n}": viewer.pid for n, viewer in enumerate(viewers, 1)})
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    lines_before = [viewer.lines for viewer in printed]
    began = time.monotonic()
    printed[0].timing = True
    time.sleep(seconds)
    printed[0].timing = False
    wall = time.monotonic() - began
    cpu = {name: (cpu_seconds(pid) - before[name]) / wall * 100 for name, pid in pids.items()}
    rates = [(v.lines - n) / wall for v, n in zip(printed, lines_before, strict=True)]
    rss = memory_mib(run.supervisor.pid, "VmRSS")
    peak = memory_mib(run.supervisor.pid, "VmHWM")
    last_step = command(sim, "freeze")
    hung = until("hang verdict", lambda: store.load(RUN_ID).state is RunState.HUNG, 120, 0.1)
    # The hang's own dump first (the supervisor takes it at the verdict): measured alone.
    until("hang's stacks kept", lambda: HANG_KEPT in store.load(RUN_ID).attempt.detail, 60, 0.1)
    dumped = asyncio.run(_dump(store, *socket))
    command(sim, "thaw")
    until("running again", lambda: store.load(RUN_ID).state is RunState.RUNNING, 60, 0.1)
    time.sleep(2)
    exited = command(sim, "fail 1")
    failed = until("failure verdict", lambda: store.load(RUN_ID).state is RunState.FAILED, 60, 0.1)
    return Figures(
        run.size, run.transport, cpu, rss, peak, printed[0].latency, rates,
        hung - last_step, failed - exited, *dumped,
    )  # fmt: skip


async def _dump(store: RunStore, socket: str | None = None) -> tuple[float, float, int, int]:
    """``ddptui dump``'s work on the head, as the command does it for a run with a supervisor
    (asked of it, taken through the connections it follows the hosts on, kept, read back and
    grouped), then as it does for a run without one (every host asked directly, through the
    run's kind's transport: over SSH, a new connection each), or through ``socket``: the
    seconds of each, the stacks and the groups of the first."""
    began = time.monotonic()
    taken = await RunControl(store).dump(RUN_ID)
    groups = len(taken.groups)
    supervised = time.monotonic() - began
    record = store.load(RUN_ID)
    config = load_config(store.files(RUN_ID).hosts)
    began = time.monotonic()
    remote: Transport
    if socket is None:
        remote = await kind_of(config).transport_for(record)
    else:
        SimTransport.socket = socket
        remote = SimTransport()
    try:
        direct = await dump.take(config, record, remote)
        assert len(direct.stacks) == len(taken.stacks) and len(direct.groups) == groups
    finally:
        await remote.close()
    return supervised, time.monotonic() - began, len(taken.stacks), groups


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def slope(points: list[tuple[float, float]]) -> float:
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0


def report(results: list[Figures]) -> None:
    print()
    print(
        f"{'ranks':>6} {'via':>6} {'steps/s':>8} {'events/s':>9} {'supervisor':>11} {'RSS MiB':>8} "
        f"{'viewer 1':>9} {'viewer 2':>9} {'sim hosts':>10} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'max ms':>7} {'hung +s':>8} {'failed s':>9}"
    )
    for figures in results:
        size, cpu, latency = figures.size, figures.cpu, figures.latency
        hung = (figures.hung_after or 0.0) - HANG_MIN_S
        print(
            f"{size.ranks:>6} {figures.transport:>6} {size.rate:>8g} {size.events_per_s:>9,.0f} "
            f"{cpu['supervisor']:>10.1f}% {figures.rss_mib:>8.0f} {cpu['viewer 1']:>8.1f}% "
            f"{cpu['viewer 2']:>8.1f}% {cpu['simulated hosts']:>9.1f}% "
            f"{percentile(latency, 0.5) * 1000:>7.0f} {percentile(latency, 0.99) * 1000:>7.0f} "
            f"{max(latency, default=float('nan')) * 1000:>7.0f} {hung:>+8.1f} "
            f"{figures.failed_after or float('nan'):>9.1f}"
        )
    for figures in results:
        shown = " and ".join(f"{rate:,.0f}" for rate in figures.printed_per_s)
        print(
            f"{figures.size.ranks} ranks over {figures.transport}: the viewers printed {shown} "
            "lines/s; dump of the hung "
            f"run from {figures.size.nodes} hosts: {figures.dump_stacks} stacks in "
            f"{figures.dump_groups} groups in {figures.dump_s:.2f} s through its supervisor "
            f"({figures.dump_direct_s:.2f} s from the hosts directly)"
        )
    print(
        f"(hung +s: after the last step a rank made, beyond the {HANG_MIN_S:g} s hang window; "
        "failed s: after the node's torchrun exited 1)"
    )
    for transport in TRANSPORTS:
        sizes = [r for r in results if r.transport == transport]
        if len(sizes) < 2:
            continue
        for name in ("supervisor", "viewer 1", "viewer 2"):
            points = [(r.size.events_per_s, r.cpu[name]) for r in sizes]
            each = ", ".join(f"{cpu / events * 1000:.2f}" for events, cpu in points)
            print(
                f"{name} over {transport}: {slope(points) * 1000:.2f}% of a core per 1,000 "
                f"events/s (least squares); at each size {each}"
            )
        memory = [(float(r.size.ranks), r.rss_mib) for r in sizes]
        print(
            f"supervisor RSS over {transport}: {slope(memory) * 1000:.0f} MiB per 1,000 ranks "
            "(least squares)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="8x8@5,32x8@5,128x8@5,512x8@5")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--transport", choices=(*TRANSPORTS, "both"), default="both")
    parser.add_argument("--profile", default="", help="the supervisor's cProfile stats, to PATH")
    args = parser.parse_args()
    transports = TRANSPORTS if args.transport == "both" else (args.transport,)
    sizes = [Size.parse(text) for text in args.sizes.split(",")]
    results = []
    for size, transport in itertools.product(sizes, transports):
        print(
            f"{size.nodes} nodes x {size.per_node} ranks at {size.rate:g} steps/s "
            f"over {transport} ...",
            flush=True,
        )
        results.append(measure(size, transport, args.seconds, args.profile))
        report(results[-1:])
    report(results)


if __name__ == "__main__":
    main()
