"""Ending a run's supervisor (``ddptui demo`` ending): the process is gone when it returns, not
only its lock; one that does not go is killed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.run import supervising
from ddptui.run.store import RunStore
from ddptui.run.supervising import Supervisors

RUN = "20990101-000000-none"

# A stand-in with what ddptui knows a supervisor by: the run's lock held open, its pid in the
# run's file, and the module's name in its argv.
STAND_IN = """
import fcntl, os, signal, sys, time
lock, pid_file, on_term = sys.argv[1], sys.argv[2], sys.argv[3]
handle = open(lock, "ab")
fcntl.flock(handle, fcntl.LOCK_EX)

def ended(number, frame):
    if on_term == "ignore":
        return
    # What a supervisor's interpreter does after it lets go of the lock: it winds down.
    handle.close()
    time.sleep(3)
    sys.exit(0)

signal.signal(signal.SIGTERM, ended)
with open(pid_file + ".new", "w") as out:
    out.write(f"{os.getpid()}\\n")
os.rename(pid_file + ".new", pid_file)
while True:
    time.sleep(0.05)
"""


def _stand_in(store: RunStore, on_term: str) -> subprocess.Popen[bytes]:
    files = store.files(RUN)
    files.directory.mkdir(parents=True)
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            STAND_IN,
            str(files.supervisor_lock),
            str(files.supervisor_pid),
            on_term,
            "ddptui.run.supervisor",
        ]
    )
    deadline = time.monotonic() + 20
    while not Supervisors(store).supervised(RUN) or not files.supervisor_pid.exists():
        assert time.monotonic() < deadline and process.poll() is None, "the stand-in never began"
        time.sleep(0.05)
    return process


def test_a_released_supervisor_is_gone_not_only_its_lock(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    process = _stand_in(store, on_term="linger")
    try:
        asyncio.run(Supervisors(store).release(RUN))
        assert process.poll() is not None, "release returned while the supervisor still ran"
        assert process.returncode == 0
    finally:
        process.kill()
        process.wait()


def test_a_supervisor_that_ignores_the_end_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervising, "ANSWER_S", 0.5)
    store = RunStore(tmp_path / "runs")
    process = _stand_in(store, on_term="ignore")
    try:
        asyncio.run(Supervisors(store).release(RUN))
        assert process.poll() == -9
    finally:
        process.kill()
        process.wait()
