"""``ddptui demo --headless`` as a newcomer runs it: a user with no privileges, no sshd serving
it, no hosts file. It must complete with the loss falling on every rank and leave nothing behind;
so must a demo interrupted with Ctrl-C mid-run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from tests.demo.user import DemoUser, demo_user, why_unusable

pytestmark = pytest.mark.slow

EVENTS = "ddptui-demo-*/demo-*/ddptui-runs/runs/*/node*/events/rank*.jsonl"
NODES, PROCS = 2, 2
STEPS = 600
"""Enough for the loss to fall by half on every rank; the default takes a minute."""


@pytest.fixture(scope="module")
def user() -> Iterator[DemoUser]:
    with demo_user() as made:
        reason = why_unusable(made)
        if reason is not None:
            pytest.skip(reason)
        yield made


@dataclass
class Watched:
    """What the test saw of a demo while it ran: its output, its files, its sockets."""

    started: float
    stderr: list[str] = field(default_factory=list)
    events: dict[str, str] = field(default_factory=dict)
    """Each rank's events file as last read, by file name."""
    first_step: float | None = None
    """Wall-clock time of the first step event any rank wrote."""
    ssh_ports: list[int] = field(default_factory=list)
    served_by: dict[int, str] = field(default_factory=dict)
    """Each SSH port's listening process, by command line."""
    error: str | None = None
    interrupted: list[str] = field(default_factory=list)
    """The interrupted process group as the interrupt found it: each process's session and
    signal masks (blocked, ignored, caught), for a Ctrl-C that was not acted on."""

    def losses(self, name: str) -> list[float]:
        return [event["loss"] for event in _steps(self.events.get(name, ""))]


def _steps(text: str) -> list[dict[str, float]]:
    """The step events of an events file; a last line still being written (no newline yet) is
    left for later: cut inside the start event's nested config, it can even end in "}"."""
    events = [json.loads(line) for line in text.split("\n")[:-1]]
    return [event for event in events if event["type"] == "step"]


def _watch_safely(user: DemoUser, watched: Watched, stop: threading.Event) -> None:
    """:func:`_watch`, its failure kept for the test to report (a thread's is lost)."""
    try:
        _watch(user, watched, stop)
    except Exception as error:
        watched.error = f"the watcher failed: {error!r}"


def _watch(user: DemoUser, watched: Watched, stop: threading.Event) -> None:
    """Poll the demo's directories (under the user's TMPDIR) until ``stop``."""
    while not stop.wait(0.1):
        if not watched.ssh_ports:
            for hosts in user.tmp.glob("ddptui-demo-*/hosts.toml"):
                with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
                    document = tomllib.loads(hosts.read_text())
                    watched.ssh_ports = [host["port"] for host in document["hosts"]]
                    watched.served_by = {
                        port: _listener_command(port) for port in watched.ssh_ports
                    }
        for path in user.tmp.glob(EVENTS):
            with contextlib.suppress(OSError):
                watched.events[path.name] = path.read_text()
            if watched.first_step is None:
                times = [
                    event["time"] for text in watched.events.values() for event in _steps(text)
                ]
                watched.first_step = min(times, default=None)


def _listening(port: int | None = None, uid: int | None = None) -> list[tuple[int, int, int]]:
    """(port, uid, inode) of every listening TCP socket, optionally only ``port``'s or ``uid``'s."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":
                continue
            entry = (int(fields[1].rsplit(":", 1)[1], 16), int(fields[7]), int(fields[9]))
            if (port is None or entry[0] == port) and (uid is None or entry[1] == uid):
                found.append(entry)
    return found


def _listener_command(port: int) -> str:
    inodes = {f"socket:[{inode}]" for _, _, inode in _listening(port)}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                if str(fd.readlink()) in inodes:
                    return _command(int(proc.name))
    return ""


def _command(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    return "(gone)"


def _run_dir_holders(user: DemoUser) -> list[str]:
    """Processes whose environment names a run directory of the user's demos."""
    marker = f"DDPTUI_RUN_DIR={user.tmp}".encode()
    holders = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (proc / "environ").read_bytes():
                    holders.append(proc.name)
    return holders


def _demo(
    user: DemoUser, *, steps: int | None = None, interrupt_after_steps: int | None = None
) -> tuple[int, Watched]:
    watched = Watched(started=time.time())
    length = ("--steps", str(steps)) if steps is not None else ()
    process = user.popen(
        "demo", "--headless", "--nodes", str(NODES), "--procs", str(PROCS), *length
    )
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_safely, args=(user, watched, stop), daemon=True)
    watcher.start()
    assert process.stderr is not None
    reader = threading.Thread(
        target=lambda: watched.stderr.extend(process.stderr),  # type: ignore[arg-type]
        daemon=True,
    )
    reader.start()
    try:
        if interrupt_after_steps is not None:
            deadline = time.monotonic() + 120
            while True:
                counts = [len(watched.losses(f"rank{rank}.jsonl")) for rank in range(NODES * PROCS)]
                if min(counts) >= interrupt_after_steps:
                    break
                assert watched.error is None, watched.error
                assert time.monotonic() < deadline and process.poll() is None, (
                    f"no {interrupt_after_steps} steps on every rank seen (steps {counts})"
                )
                time.sleep(0.1)
            # What a terminal's Ctrl-C does: SIGINT to the foreground process group.
            watched.interrupted = _group(process.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
        stop.set()
        watcher.join()
        reader.join(timeout=10)
    assert watched.error is None, watched.error
    return code, watched


def _group(pgid: int) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if proc.name.isdigit() and int(fields[2]) == pgid:
                masks = [
                    line
                    for line in (proc / "status").read_text().splitlines()
                    if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
                ]
                found.append(f"{proc.name} sid {fields[3]} {_command(int(proc.name))} {masks}")
    return found


def _assert_nothing_left(user: DemoUser, watched: Watched) -> None:
    assert _run_dir_holders(user) == []
    left = {pid: _command(pid) for pid in user.processes()}
    assert left == {}
    for port in watched.ssh_ports:
        assert _listening(port) == [], f"port {port} still listens"
    if user.throwaway:
        assert _listening(uid=user.uid) == []
    assert list(user.tmp.iterdir()) == []


def _runs(user: DemoUser) -> list[dict[str, object]]:
    result = user.run("runs", "--json")
    assert result.returncode == 0, result.stderr
    runs: list[dict[str, object]] = json.loads(result.stdout)
    return runs


def test_the_demo_runs_to_completion_as_a_plain_user_and_leaves_nothing(user: DemoUser) -> None:
    code, watched = _demo(user, steps=STEPS)
    output = "".join(watched.stderr)
    assert code == 0, output
    assert re.search(r"run \S+ completed: every node exited 0", output)
    # The hosts were this process's own SSH servers on loopback, not an sshd.
    assert len(watched.ssh_ports) == NODES
    for port, command in watched.served_by.items():
        assert "-m ddptui demo" in command, (port, command)
    for rank in range(NODES * PROCS):
        losses = watched.losses(f"rank{rank}.jsonl")
        assert len(losses) == STEPS, (rank, len(losses))
        first, last = statistics.mean(losses[:20]), statistics.mean(losses[-20:])
        assert last < first / 2, (rank, first, last)
    assert watched.first_step is not None
    print(
        f"\ntime from `ddptui demo --headless` to the first step event: "
        f"{watched.first_step - watched.started:.1f} s"
    )
    _assert_nothing_left(user, watched)
    [run] = [run for run in _runs(user) if run["state"] == "completed"]
    assert run["demo"] is True
    listing = user.run("runs")
    assert listing.returncode == 0 and "(demo)" in listing.stdout


def test_ctrl_c_mid_run_kills_the_run_and_leaves_nothing(user: DemoUser) -> None:
    before = {str(run["id"]) for run in _runs(user)}
    code, watched = _demo(user, interrupt_after_steps=5)
    output = "".join(watched.stderr)
    assert code == 130, "\n".join([*watched.interrupted, output[-2000:]])
    _assert_nothing_left(user, watched)
    assert "demo ending: killing run" in output
    [run] = [run for run in _runs(user) if run["id"] not in before]
    assert (run["state"], run["demo"]) == ("stopped", True)
