"""The console in a real terminal: tmux runs ``python -m ddptui HOSTS`` on the test bed; keys go
in with ``send-keys`` and the screen comes back with ``capture-pane``: the hosts, then losses
arriving, then the stop confirmation, and the run stops cleanly."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ddptui.config import load_config
from ddptui.run.store import RunState, RunStore
from tests.testbed import TestBed

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

SMALL = [
    *("--width", "64", "--depth", "2", "--samples", "2048", "--batch-size", "16"),
    *("--lr", "1e-2", "--epochs", "100000", "--max-steps", "100000"),
]
# A rank row of the run screen: node and host, rank, step, then a loss like 0.5432 or 1.2e-05.
RANK_ROW = re.compile(r"^\s*\d+ node\d+\s+\d+\s+\d+\s+(\d\.\d+(?:e-\d+)?)\s", re.MULTILINE)


class Terminal:
    """One tmux session on a private server, 120×36."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False
        )
        return done.stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "console", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "console")

    def wait_for(self, what: str, seen: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if seen(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"the pane never showed {what}; it shows:\n{text}")
            time.sleep(0.5)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(f"ddptui-test-{os.getpid()}")
    yield term
    term.tmux("kill-server")


def test_the_console_in_tmux_launches_shows_losses_and_stops(
    testbed: TestBed, tmp_path: Path, terminal: Terminal
) -> None:
    hosts = testbed.hosts[:2]
    hosts_file = testbed.write_hosts_file(
        tmp_path / "hosts.toml", hosts, job={"nproc_per_node": 2, "args": SMALL}
    )
    state = tmp_path / "state"
    command = shlex.join([sys.executable, "-m", "ddptui", str(hosts_file)])
    terminal.tmux(
        *("new-session", "-d", "-s", "console", "-x", "120", "-y", "36"),
        *("-e", f"XDG_STATE_HOME={state}", "-e", "TERM=xterm-256color"),
        f"cd {shlex.quote(str(Path.cwd()))} && {command}; sleep 30",
    )
    store = RunStore(state / "ddptui" / "runs")
    try:
        text = terminal.wait_for("both hosts checked", lambda t: t.count("✓ ok") == 2, 120)
        assert all(host.name in text for host in hosts)

        terminal.keys("l")
        text = terminal.wait_for("the launch plan", lambda t: "launch this run?" in t, 60)
        assert "2 host(s), 4 ranks, backend gloo" in text
        terminal.keys("y")
        text = terminal.wait_for("losses", lambda t: len(RANK_ROW.findall(t)) == 4, 180)
        assert all(float(loss) > 0 for loss in RANK_ROW.findall(text))

        terminal.keys("s")
        terminal.wait_for("the stop confirmation", lambda t: "stop the run?" in t, 30)
        terminal.keys("y")
        text = terminal.wait_for("a clean stop", lambda t: "stopped cleanly" in t, 120)
        (record,) = store.records()
        assert record.state is RunState.STOPPED

        terminal.keys("q")
        terminal.wait_for("the shell after the console", lambda t: "launch this" not in t, 30)
    finally:
        for record in store.records():
            if not record.state.final:
                import asyncio

                from ddptui.run.stopper import stop_run

                config = load_config(hosts_file)
                asyncio.run(stop_run(config, record, store, kill=True, say=lambda line: None))
