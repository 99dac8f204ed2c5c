"""A run whose one node turns hostile, on the test bed, followed by the real commands.

The second host's first rank writes what an attacker controlling that host's files would:
terminal escapes, lines forged to look like another host's, lines built to make a pattern
backtrack, losses of ±1e308 and 5e-324, events in another host's ranks' names (a ``done:
stopped`` among them) and 2,000 invented ranks' events and logs. ``launch --headless``, ``logs``,
``logs --errors`` and ``status --json`` must each finish in seconds and print no live escape, no
traceback and no forged line, and the supervisor that took it all in stays small.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.confirm import ConfirmScreen
from tests.run.bed import (
    SMALL,
    Cli,
    run_id_in,
    run_processes,
    supervisors,
    wait_for_step,
    write_hosts,
)
from tests.testbed import TestBed
from tests.ui.pilot import open_from_runs, until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HOSTILE_SCRIPT = r"""
import json, os, time
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
node, world = int(os.environ["GROUP_RANK"]), int(os.environ["WORLD_SIZE"])
events = os.path.join(os.environ["DDPTUI_RUN_DIR"], "events")
os.makedirs(events, exist_ok=True)


def event(kind, as_rank=rank, **fields):
    common = {"v": 1, "type": kind, "rank": as_rank, "local_rank": local, "node_rank": node,
              "world_size": world, "time": time.time()}
    with open(os.path.join(events, f"rank{as_rank}.jsonl"), "a") as out:
        out.write(json.dumps({**common, **fields}) + "\n")


event("start")
for step in range(1, 21):
    event("step", step=step, epoch=0, loss=1.0 / step, lr=0.1, samples_per_s=100.0,
          step_time_s=0.01)
    time.sleep(0.05)
if rank == 2:
    print("\x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;owned\x07\x1b[2J\x9b2J clipboard, title, clear")
    print("benign\nnode0 rank 0 stdout (attempt 1) | FORGED: rank 0 says all is well")
    for _ in range(200):
        print("NCCL error in: " + "a, " * 1300 + "x")
    for step, loss in ((21, 1e308), (22, -1e308), (23, 5e-324)):
        event("step", step=step, epoch=0, loss=loss, lr=0.1, samples_per_s=1e308,
              step_time_s=0.01)
    event("error", message="boom\nnode0 rank 0 stdout (attempt 1) | FORGED \x1b]0;t\x07")
    event("done", as_rank=0, step=20, reason="stopped")
    event("step", as_rank=1, step=999, epoch=0, loss=0.0, lr=0.1, samples_per_s=1.0,
          step_time_s=0.01)
    logs = os.path.join(os.environ["DDPTUI_RUN_DIR"], "logs", "attempt-1", "x", "attempt_0")
    for invented in range(100, 2100):
        with open(os.path.join(events, f"rank{invented}.jsonl"), "w") as out:
            out.write(json.dumps({"v": 1, "type": "start", "rank": invented, "local_rank": 0,
                                  "node_rank": node, "world_size": world,
                                  "time": time.time()}) + "\n")
        os.makedirs(os.path.join(logs, str(invented)), exist_ok=True)
        with open(os.path.join(logs, str(invented), "stdout.log"), "w") as out:
            out.write("invented rank " + "\x1b[31m" * 50 + "\n")
    time.sleep(3)
event("done", step=20, reason="completed")
"""

FORGED = "node0 rank 0 stdout (attempt 1) | FORGED"
LIVE = (b"\x1b", b"\xc2\x9b", b"\xc2\x9d", b"\x07")
"""ESC, CSI and OSC (C1, in UTF-8) and BEL."""
KEYS = ("g", "y", "e", "o", "y", "g")
"""Every pane of the run screen, and the chart on both scales."""


def _clean(what: str, text: str, ours: str = "") -> None:
    """``text`` (all that was shown) holds no live escape and no forged line, and ``ours``
    (what ddptui itself said: stderr) no traceback. A host's lines may hold tracebacks of its
    own (torchrun's, when its exit barrier finds node 0 gone)."""
    raw = text.encode("utf-8", "surrogateescape")
    assert not any(escape in raw for escape in LIVE), f"{what} printed a live escape"
    assert "Traceback" not in ours, f"{what} crashed:\n{ours[-3000:]}"
    forged = [line for line in text.splitlines() if line.strip().startswith(FORGED)]
    assert not forged, (what, forged)


MEASURED = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run([sys.executable, '-m', 'ddptui', *sys.argv[1:]])\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(f'peak-rss-kib {peak}', file=sys.stderr)\n"
    "sys.exit(done.returncode)\n"
)
"""Runs one ddptui command and says its peak resident size: the test process's own children
include every earlier test's, so theirs cannot tell."""


@dataclass
class Measured:
    seconds: float
    stdout: str
    stderr: str
    code: int
    peak_mib: float


def _measured(cli: Cli, *args: str) -> Measured:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *args],
        capture_output=True,
        text=True,
        env=cli.env,
        timeout=120,
        check=False,
    )
    seconds = time.monotonic() - began
    stderr, _, peak = done.stderr.rpartition("peak-rss-kib ")
    assert peak.strip().isdigit(), done.stderr[-3000:]
    return Measured(seconds, done.stdout, stderr, done.returncode, int(peak) / 1024)


def _supervisor_peak_mib(cli: Cli, run_id: str) -> int:
    """The supervisor's peak resident size, as it logs it on leaving (10 s after the end)."""
    log = cli.store / run_id / "supervisor.log"
    deadline = time.monotonic() + 60
    while supervisors(cli.store) and time.monotonic() < deadline:
        time.sleep(0.5)
    found = re.findall(r"supervisor exits \(peak RSS (\d+) MiB\)", log.read_text())
    assert found, log.read_text()[-3000:]
    return int(found[-1])


def test_a_hostile_node_s_run_is_followed_shown_and_judged_safely(
    testbed: TestBed,
    tmp_path: Path,
    cli: Cli,
) -> None:
    hosts = testbed.hosts[:2]
    # A directory of its own: the script's directory is uploaded with it.
    script = tmp_path / "job" / "train.py"
    script.parent.mkdir()
    script.write_text(HOSTILE_SCRIPT)
    job = {"script": str(script), "args": [], "nproc_per_node": 2}
    hosts_file = write_hosts(testbed, tmp_path, hosts, job=job)

    launch = _measured(cli, "launch", str(hosts_file), "--headless")
    _clean("launch --headless", launch.stdout + launch.stderr, launch.stderr)
    run_id = run_id_in(launch.stderr)
    # Every rank exits 0: the forged "stopped" and the invented ranks change nothing.
    assert launch.code == 0, launch.stderr[-3000:]
    assert f"run {run_id} completed" in launch.stderr
    assert launch.peak_mib < 300, f"launch peaked at {launch.peak_mib:.0f} MiB"

    shown = {}
    for args in (("logs", run_id), ("logs", run_id, "--errors"), ("status", run_id, "--json")):
        done = _measured(cli, *args)
        what = " ".join(args)
        assert done.code in (0, 1), (what, done.stderr[-3000:])
        assert done.seconds < 30, f"{what} took {done.seconds:.1f} s"
        assert done.peak_mib < 300, f"{what} peaked at {done.peak_mib:.0f} MiB"
        _clean(what, done.stdout + done.stderr, done.stderr)
        shown[what] = done.stdout
    logs = shown[f"logs {run_id}"]
    assert "\\x1b]52;c;" in logs, "the clipboard escape is shown, not dropped"
    # The forged label is shown after the label of the host that wrote it.
    assert "node1 rank 2 stdout (attempt 1) | node0 rank 0 stdout (attempt 1) | FORGED" in logs
    assert "invented rank" not in logs
    assert "boom" in shown[f"logs {run_id} --errors"]
    status = json.loads(shown[f"status {run_id} --json"])
    assert status["state"] == "completed"
    assert status["world_size"] == 4
    peak = _supervisor_peak_mib(cli, run_id)
    assert peak < 300, f"the supervisor peaked at {peak} MiB"
    asyncio.run(_console_on_the_run(hosts_file, RunStore(cli.store), run_id))


def _screen_clean(app: DdptuiApp, what: str) -> None:
    """Everything on the console's screen, drawn now, holds no live escape."""
    _clean(what, app.export_screenshot())


async def _console_on_the_run(hosts_file: Path, store: RunStore, run_id: str) -> None:
    """The console opens the finished run from its runs screen (its files read back from the
    hosts) and draws every pane and scale of it."""
    app = DdptuiApp(hosts_file, store=store)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await open_from_runs(pilot, run_id)
        # Rank 2's extreme losses are what the chart is to draw (the read-back replaces the
        # screen's model when it is done).
        extremes = {1e308, -1e308, 5e-324}
        await until(
            pilot,
            "the read-back",
            lambda: {loss for _, loss in screen.run_model.progress.ranks[2].losses} >= extremes,
            60,
        )
        for key in KEYS:
            await pilot.press(key)
            await pilot.pause(0.3)
            assert app.is_running and app.screen is screen, f"the console ended on {key!r}"
            _screen_clean(app, f"the run screen after {key!r}")
        assert [rank.rank for rank in screen.run_model.progress.ranks] == [0, 1, 2, 3]


TAMPERING = r'''#!{python}
"""A host's Python that lies in every answer while {flag} exists (and is itself otherwise)."""
import json, os, subprocess, sys

REAL = {python!r}
if not os.path.exists({flag!r}):
    os.execv(REAL, [REAL, *sys.argv[1:]])
EVIL = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;owned\x07"


def lie(value):
    if isinstance(value, dict):
        return {{("\u00b2" if key.isdigit() else key): lie(item) for key, item in value.items()}}
    if isinstance(value, list):
        return [lie(item) for item in value] + [7, [1, 2, 3]]
    if isinstance(value, str):
        return value + EVIL
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    return -value if value > 1 else 10**40


child = subprocess.Popen([REAL, *sys.argv[1:]], stdout=subprocess.PIPE)
for line in child.stdout:
    try:
        line = (json.dumps(lie(json.loads(line)), ensure_ascii=False) + "\n").encode()
    except ValueError:
        pass
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
sys.exit(child.wait())
'''


def test_a_host_whose_python_lies_is_named_and_the_others_are_still_stopped(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    liar = hosts[2]
    flag = tmp_path / "lying"
    python = tmp_path / "python-that-lies"
    python.write_text(TAMPERING.format(python=testbed.python, flag=str(flag)))
    python.chmod(0o755)
    hosts_file = testbed.write_hosts_file(
        tmp_path / "hosts.toml",
        hosts,
        host_overrides={liar.name: {"python": str(python)}},
        job={"nproc_per_node": 1, "args": [*SMALL, "--max-steps", "100000"]},
    )
    flag.touch()
    dry_run = _measured(cli, "launch", str(hosts_file), "--dry-run")
    _clean("launch --dry-run", dry_run.stdout + dry_run.stderr, dry_run.stderr)
    assert liar.name in dry_run.stdout + dry_run.stderr
    asyncio.run(_console_launch_dialog(hosts_file, RunStore(cli.store)))
    flag.unlink()

    started = cli.run("launch", str(hosts_file), "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_for_step(testbed, hosts, run_id, 3)
    flag.touch()
    stop = _measured(cli, "stop", run_id, "--kill")
    _clean("stop --kill", stop.stdout + stop.stderr, stop.stderr)
    assert f"{liar.name} answered garbage" in stop.stderr, stop.stderr[-3000:]
    assert not run_processes(hosts[:2], run_id)
    status = _measured(cli, "status", run_id)
    _clean("status", status.stdout + status.stderr, status.stderr)
    flag.unlink()
    # What the liar hid was signalled all the same.
    deadline = time.monotonic() + 15
    while run_processes([liar], run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not run_processes([liar], run_id)


async def _console_launch_dialog(hosts_file: Path, store: RunStore) -> None:
    """The console's health screen and its launch dialog (or the error that replaces it) on
    the liar's answers."""
    app = DdptuiApp(hosts_file, store=store)
    async with app.run_test(size=(160, 48)) as pilot:
        health = app.screen
        await until(pilot, "the check", lambda: app.report is not None, 120)
        _screen_clean(app, "the health screen")
        await pilot.press("l")
        await until(
            pilot,
            "the dialog or its error",
            lambda: isinstance(app.screen, ConfirmScreen) or bool(app._notifications),
            60,
        )
        _screen_clean(app, "the launch dialog")
        if isinstance(app.screen, ConfirmScreen):
            await pilot.press("n")
        assert app.is_running and app.screen is health
    assert not store.root.exists() or not list(store.root.iterdir()), "it launched"
