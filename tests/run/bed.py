"""What the runs tests on the test bed share: the command line with a private run store, a
hosts file for the bed, and what the trainer left on the hosts (steps, processes)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ddptui.config.model import HostConfig
from ddptui.run.record import Attempt, NodeRecord, RunRecord
from ddptui.run.store import RunStore
from ddptui.run.supervising import holds_open
from tests.testbed import TestBed, TestHost

PACED = ("--min-step-s", "0.05")
"""Twenty steps a second at most: unpaced, each rank of the bed's tiny model takes a whole core
and floods its agent and the supervisor with step events, and the suite's beds share two."""
SMALL = [
    *("--width", "64", "--depth", "2", "--samples", "2048", "--batch-size", "16"),
    *("--lr", "1e-2", "--epochs", "100000", *PACED),
]
RUN_ID = re.compile(r"run (\d{8}-\d{6}-[a-z0-9]{4})")


class Cli:
    """``python -m ddptui`` with a private run store."""

    def __init__(self, state: Path) -> None:
        # faulthandler: a command that hangs is sent SIGABRT and shows where it hung.
        self.env = {
            **os.environ,
            "XDG_STATE_HOME": str(state),
            "PYTHONUNBUFFERED": "1",
            "PYTHONFAULTHANDLER": "1",
        }
        self.store = state / "ddptui" / "runs"

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ddptui", *args]
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env
        ) as process:
            try:
                out, err = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGABRT)
                out, err = process.communicate(timeout=30)
                raise AssertionError(f"{args} hung; where:\n{err[-6000:]}") from None
        return subprocess.CompletedProcess(command, process.returncode, out, err)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "ddptui", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )

    def json(self, *args: str) -> Any:
        done = self.run(*args, "--json")
        assert done.stdout, done.stderr
        return json.loads(done.stdout)

    def record(self, run_id: str) -> RunRecord:
        """The run's record as its supervisor last wrote it, read from the store: what a test
        polls. A ``ddptui status`` each quarter second would keep half a core busy starting
        interpreters, slowing the very run it waits on."""
        return RunStore(self.store).load(run_id)

    def status_once(
        self, what: str, run_id: str, ready: Callable[[RunRecord], object], timeout: float
    ) -> dict[str, Any]:
        """``ddptui status RUN --json`` once the run's record is ``ready`` (polled from the
        store), or an AssertionError naming ``what`` and showing the record after
        ``timeout`` seconds."""
        wait_until(
            what,
            lambda: ready(self.record(run_id)),
            timeout,
            story=lambda: self.record(run_id).to_toml()[-6000:],
        )
        document: dict[str, Any] = self.json("status", run_id)
        return document


def write_hosts(
    bed: TestBed,
    tmp_path: Path,
    hosts: Sequence[TestHost] | None = None,
    *,
    cluster: Mapping[str, object] = {},
    job: Mapping[str, object] = {},
    host_overrides: Mapping[str, Mapping[str, object]] = {},
) -> Path:
    """A hosts file for 3 hosts (or ``hosts``) of one trainer process each, unless ``job``
    says otherwise: on 2 cores, each process more slows every launch by seconds."""
    return bed.write_hosts_file(
        tmp_path / "hosts.toml",
        bed.hosts[:3] if hosts is None else hosts,
        cluster=cluster,
        job={"nproc_per_node": 1, "args": SMALL, **job},
        host_overrides=host_overrides,
    )


_T = TypeVar("_T")


def wait_until(
    what: str,
    ready: Callable[[], _T | None],
    timeout: float,
    *,
    every: float = 0.25,
    story: Callable[[], str] | None = None,
) -> _T:
    """``ready()``'s first true value, asked every ``every`` seconds; after ``timeout`` seconds
    an AssertionError naming ``what``, with ``story()`` (what the test saw) where given."""
    deadline = time.monotonic() + timeout
    while True:
        found = ready()
        if found:
            return found
        if time.monotonic() > deadline:
            told = f"\n{story()}" if story is not None else ""
            raise AssertionError(f"waited {timeout:.0f} s for {what}{told}")
        time.sleep(every)


def run_id_in(output: str) -> str:
    match = RUN_ID.search(output)
    assert match, output
    return match.group(1)


def host_run_dir(host: TestHost, run_id: str) -> Path:
    """The host's node directory of the run (each test bed host has a workdir of its own)."""
    nodes = list((host.workdir / "runs" / run_id).glob("node*"))
    assert len(nodes) == 1, nodes
    return nodes[0]


def steps_of(
    bed: TestBed, hosts: Sequence[TestHost], run_id: str
) -> dict[int, list[dict[str, Any]]]:
    """Every rank's step events, in file order."""
    found: dict[int, list[dict[str, Any]]] = {}
    for host in hosts:
        for path in sorted((host_run_dir(host, run_id) / "events").glob("rank*.jsonl")):
            for line in path.read_text().splitlines():
                event = json.loads(line)
                if event["type"] == "step":
                    found.setdefault(event["rank"], []).append(event)
    return found


def wait_for_step(
    bed: TestBed,
    hosts: Sequence[TestHost],
    run_id: str,
    step: int,
    *,
    procs: int = 1,
    timeout: float = 120,
) -> None:
    """Until each of the ``procs`` ranks on every one of ``hosts`` has made ``step`` steps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = steps_of(bed, hosts, run_id)
        if len(steps) == len(hosts) * procs and all(
            events[-1]["step"] >= step for events in steps.values()
        ):
            return
        time.sleep(0.5)
    raise AssertionError(f"the run did not reach step {step}")


def run_processes(hosts: Sequence[TestHost], run_id: str) -> list[str]:
    """Processes of the run still alive on the hosts (the bed shares one PID namespace), found
    by the run directory every one of them inherits in its environment."""
    marks = {
        f"DDPTUI_RUN_DIR={node}".encode(): host.name
        for host in hosts
        for node in (host.workdir / "runs" / run_id).glob("node*")
    }
    return [f"{marks[mark]} pid {pid}" for pid, mark in processes_marked(marks)]


def processes_marked(marks: Collection[bytes]) -> list[tuple[int, bytes]]:
    """Every live process with one of ``marks`` (``NAME=value``) in its environment, and the
    mark it has."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        found += [(int(entry.name), mark) for mark in marks if mark in environ]
    return found


def run_pid(host: TestHost, run_id: str, *marks: bytes) -> int:
    """The one Python process of the run on ``host`` with all of ``marks`` in its argv or
    environment (not the shell wrapper, whose argv holds torchrun's)."""
    mark = f"DDPTUI_RUN_DIR={host_run_dir(host, run_id)}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            words = set((entry / "environ").read_bytes().split(b"\0")) | set(argv)
        except OSError:
            continue
        python = b"python" in Path(argv[0].decode(errors="replace")).name.encode()
        if python and mark in words and all(wanted in words for wanted in marks):
            found.append(int(entry.name))
    assert len(found) == 1, found
    return found[0]


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[float]:
    """``pid`` stopped (SIGSTOP) for the block: when it was."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield time.time()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def held_until_asked_to_stop(node_dirs: Sequence[Path], ranks: int) -> Iterator[None]:
    """The ``ranks`` ranks of the run whose nodes' directories are ``node_dirs`` (node 0's
    first) held (SIGSTOP) in the block, then until node 0 has the request to stop: a fast or a
    loaded machine can train every step left in the seconds a stop takes to arrive."""
    marks = {f"DDPTUI_RUN_DIR={node}".encode() for node in node_dirs}
    held = [pid for pid, _ in processes_marked(marks) if _is_rank(pid)]
    assert len(held) == ranks, held
    for pid in held:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
        request = node_dirs[0] / "control" / "stop"
        deadline = time.monotonic() + 60
        while not request.exists():
            assert time.monotonic() < deadline, f"no {request} in 60 s"
            time.sleep(0.2)
    finally:
        for pid in held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _is_rank(pid: int) -> bool:
    """Whether ``pid`` is a rank: torchrun gives its workers alone a ``LOCAL_RANK``."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return any(entry.startswith(b"LOCAL_RANK=") for entry in environ)


def launch_and_wait(
    cli: Cli, hosts_file: Path, testbed: TestBed
) -> tuple[subprocess.Popen[str], str, list[str]]:
    launcher = cli.start("launch", str(hosts_file), "--headless", "--", "--max-steps", "100000")
    assert launcher.stdout is not None
    lines = []
    for line in launcher.stdout:
        lines.append(line)
        match = RUN_ID.search(line)
        if match and "is running" in line:
            wait_for_step(testbed, testbed.hosts[:3], match.group(1), 5)
            return launcher, match.group(1), lines
    raise AssertionError("".join(lines))


def kill_run(cli: Cli, hosts: Sequence[TestHost], run_id: str) -> None:
    """``ddptui stop --kill``, and nothing of the run left on ``hosts``."""
    stopped = cli.run("stop", run_id, "--kill")
    assert stopped.returncode == 0, stopped.stderr
    assert not run_processes(hosts, run_id)


def kill_supervisors(store: Path) -> None:
    """SIGKILL every live supervisor of a run in ``store``: none outlives what started it (a
    run left live would be followed on)."""
    for pid in supervisors(store):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def supervisors(store: Path) -> list[int]:
    """The pids of the live supervisors of runs in ``store``: named in their argv, or, started
    as a standby (told their run on stdin), holding a run's lock there open."""
    found = []
    locks = [store / run_id / "supervisor.lock" for run_id in _run_ids(store)]
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ddptui.run.supervisor" not in argv:
            continue
        pid = int(entry.name)
        if str(store).encode() in argv or any(holds_open(pid, lock) for lock in locks):
            found.append(pid)
    return found


def _run_ids(store: Path) -> list[str]:
    try:
        return [entry.name for entry in store.iterdir()]
    except OSError:
        return []


def one_rank_a_host_record(
    run_id: str,
    hosts: Sequence[HostConfig],
    run_dirs: Sequence[str],
    argv: list[str],
    *,
    ended: float | None = None,
) -> RunRecord:
    """A record of the bundled trainer's first attempt on ``hosts``, a rank on each, in
    ``run_dirs``."""
    return RunRecord(
        id=run_id,
        created=0.0,
        hosts_file="hosts.toml",
        entry="trainer",
        backend="gloo",
        master_addr=hosts[0].address,
        world_size=len(hosts),
        args=[],
        nodes=[
            NodeRecord(host.name, host.address, rank, 1, run_dir, argv, {})
            for rank, (host, run_dir) in enumerate(zip(hosts, run_dirs, strict=True))
        ],
        attempts=[Attempt(number=1, started=0.0, master_port=29500, ended=ended)],
    )


def two_host_record(attempts: int = 1) -> RunRecord:
    """A record of two hosts of two ranks, with no I/O behind it: a runs ranks 0 and 1, b ranks
    2 and 3."""
    record = RunRecord(
        id="20261130-120000-abcd",
        created=0.0,
        hosts_file="/h.toml",
        entry="trainer",
        backend="gloo",
        master_addr="10.0.0.1",
        world_size=4,
        args=[],
        nodes=[
            NodeRecord("a", "10.0.0.1", 0, 2, "/r", [], {}),
            NodeRecord("b", "10.0.0.2", 1, 2, "/r", [], {}),
        ],
    )
    record.attempts += [Attempt(n, 0.0, 29500) for n in range(1, attempts + 1)]
    return record


PHASES = """\
import json, os, sys, time
import torch
import torch.distributed as dist

first_step_s, save_every, save_s = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
saves, steps = int(sys.argv[4]), int(sys.argv[5])
dist.init_process_group("gloo")
rank = dist.get_rank()
ids = {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"])}
ids.update(node_rank=int(os.environ["GROUP_RANK"]), world_size=dist.get_world_size())
events = os.path.join(os.environ["DDPTUI_RUN_DIR"], "events")
os.makedirs(events, exist_ok=True)
out = open(os.path.join(events, f"rank{rank}.jsonl"), "a")

def emit(kind, **fields):
    out.write(json.dumps({"v": 1, "type": kind, **ids, "time": time.time(), **fields}) + "\\n")
    out.flush()

emit("start", start_step=0)
time.sleep(first_step_s)  # the first step compiles, unannounced
step = 0
while steps == 0 or step < steps:
    dist.all_reduce(torch.ones(1))
    step += 1
    emit("step", step=step, loss=1.0 / step, step_time_s=0.1)
    if step % save_every == 0 and step // save_every <= saves:
        emit("phase", phase="checkpoint")
        if rank == 0:
            time.sleep(save_s)  # a slow filesystem
        dist.barrier()
        emit("phase", phase="train")
    time.sleep(0.1)
emit("done", step=step, reason="completed")
dist.destroy_process_group()
"""
"""A user's script with events: a first step of ``argv[1]`` seconds, then ``argv[4]`` checkpoint
saves of ``argv[3]`` seconds (rank 0 writes, the others wait in a barrier), one every
``argv[2]`` steps, while the ranks train; ``argv[5]`` steps in all (0: until it is ended)."""
