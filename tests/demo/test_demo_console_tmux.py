"""``ddptui demo`` in a real terminal: tmux runs it, keys launch, stop and resume the run on the
demo's own hosts, and quitting ends the demo with nothing of it left running or on disk."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.run.store import RunState, RunStore
from tests.ui.terminal import Terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
OK = re.compile(r"\bok\b")
"""A host's status cell on the health screen once its check passed."""
# A rank row of the run screen: node and demo host, rank, step, then a loss like 0.54 or 1.2e-05.
RANK_ROW = re.compile(r"^\s*\d+ demo-\d+\s+\d+\s+\d+\s+(\d\.\d+(?:e-\d+)?)\s", re.MULTILINE)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal(f"ddptui-demo-test-{os.getpid()}")
    yield term
    term.close()


def _run_dir_holders(tmp: Path) -> list[str]:
    marker = f"DDPTUI_RUN_DIR={tmp}".encode()
    holders = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "environ").read_bytes():
                    holders.append(proc.name)
            except OSError:
                continue
    return holders


def test_keys_launch_stop_and_resume_on_the_demo_and_quitting_ends_it(
    tmp_path: Path, terminal: Terminal
) -> None:
    state, tmp = tmp_path / "state", tmp_path / "tmp"
    tmp.mkdir()
    command = shlex.join([sys.executable, "-m", "ddptui", "demo"])
    terminal.tmux(
        *("new-session", "-d", "-s", "console", "-x", "120", "-y", "36"),
        *("-e", f"XDG_STATE_HOME={state}", "-e", f"TMPDIR={tmp}", "-e", "TERM=xterm-256color"),
        f"cd {shlex.quote(str(tmp_path))} && {command}; echo demo exited $?; sleep 60",
    )
    store = RunStore(state / "ddptui" / "runs")
    text = terminal.wait_for("both demo hosts checked", lambda t: len(OK.findall(t)) == 2, 120)
    assert "demo-0" in text and "demo-1" in text

    terminal.keys("l")
    text = terminal.wait_for("the launch plan", lambda t: "launch this run?" in t, 60)
    assert "2 host(s), 4 ranks, backend gloo, master 127.0.0.1:" in text
    terminal.keys("y")
    text = terminal.wait_for("losses", lambda t: len(RANK_ROW.findall(t)) == 4, 180)

    terminal.keys("s")
    terminal.wait_for("the stop confirmation", lambda t: "stop the run?" in t, 30)
    terminal.keys("y")
    terminal.wait_for("a clean stop", lambda t: "nothing of it is left running" in t, 120)
    (record,) = store.records()
    assert record.state is RunState.STOPPED and record.demo

    terminal.keys("r")
    terminal.wait_for("the resumed run", lambda t: "resumed (attempt 2)" in t, 120)
    terminal.wait_for("losses again", lambda t: len(RANK_ROW.findall(t)) == 4, 180)
    assert store.load(record.id).state is RunState.RUNNING
    assert _run_dir_holders(tmp)

    terminal.keys("q")
    text = terminal.wait_for("the demo's end", lambda t: "demo exited" in t, 120)
    assert "demo exited 0" in text
    assert f"killing run {record.id}" in text
    # Only what happens is said: the demo's run does not go on.
    assert "goes on" not in text
    assert store.load(record.id).state is RunState.STOPPED
    assert _run_dir_holders(tmp) == []
    assert list(tmp.iterdir()) == []
