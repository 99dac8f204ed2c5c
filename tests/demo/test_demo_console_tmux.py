"""``ddptui demo`` in a real terminal: tmux runs it, keys launch, stop and resume the run on the
demo's own hosts, and quitting ends the demo with nothing of it left running or on disk."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from tests.run.bed import supervisors
from tests.ui.terminal import Terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
OK = re.compile(r"\bok\b")
"""A host's status cell on the health screen once its check passed."""
# A rank row of the run screen: node and demo host, rank, step, then a loss like 0.54 or 1.2e-05.
RANK_ROW = re.compile(r"^\s*\d+ demo-\d+\s+\d+\s+\d+\s+(\d\.\d+(?:e-\d+)?)\s", re.MULTILINE)


@dataclass(frozen=True)
class Chart:
    """The loss chart as the terminal shows it."""

    rows: int
    """Rows inside the plot's frame."""
    title: str
    """What the row above the frame holds right of the rank table."""
    ticks_apart: bool
    """The step tick labels under the frame are numbers with space between each."""


def _chart(text: str) -> Chart:
    lines = text.splitlines()
    top = next((i for i, line in enumerate(lines) if "┏" in line), None)
    bottom = next((i for i, line in enumerate(lines) if "┗" in line), None)
    if top is None or bottom is None or bottom <= top:
        return Chart(0, "", False)
    column = lines[top].index("┏")
    # The title is drawn over the margin left of the frame and the frame's own columns.
    title = lines[top - 1][column - 8 :].strip() if top else ""
    ticks = lines[bottom + 1][column:].split() if bottom + 1 < len(lines) else []
    numbers = [tick.replace(",", "") for tick in ticks]
    apart = len(numbers) >= 2 and all(n.isdigit() for n in numbers)
    apart = apart and [int(n) for n in numbers] == sorted({int(n) for n in numbers})
    return Chart(bottom - top - 1, title, apart)


def _pane(text: str) -> list[str]:
    """The lines of the pane under the chart (errors, log or GPUs) that hold something."""
    lines = text.splitlines()
    rule = max(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"})
    footer = max(i for i, line in enumerate(lines) if line.strip())
    return [line.strip() for line in lines[rule + 1 : footer] if line.strip()]


def _footer(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1].strip()


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    # A server of its own per test: one that the last test's kill-server is still taking down
    # would take this test's session with it.
    term = Terminal(f"ddptui-demo-test-{os.getpid()}-{secrets.token_hex(3)}")
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


def _demo(terminal: Terminal, tmp_path: Path, after: str = "", *args: str) -> tuple[RunStore, Path]:
    """``ddptui demo ARGS`` in a 120×36 tmux pane (then ``after``, shell), its state and
    temporary files under ``tmp_path``: the demo's run store, and its TMPDIR."""
    state, tmp = tmp_path / "state", tmp_path / "tmp"
    tmp.mkdir()
    command = shlex.join([sys.executable, "-m", "ddptui", "demo", *args])
    terminal.tmux(
        *("new-session", "-d", "-s", "console", "-x", "120", "-y", "36"),
        *("-e", f"XDG_STATE_HOME={state}", "-e", f"TMPDIR={tmp}", "-e", "TERM=xterm-256color"),
        f"cd {shlex.quote(str(tmp_path))} && {command}{after}",
    )
    return RunStore(state / "ddptui" / "runs"), tmp


def test_keys_launch_stop_and_resume_on_the_demo_and_quitting_ends_it(
    tmp_path: Path, terminal: Terminal
) -> None:
    store, tmp = _demo(terminal, tmp_path, "; echo demo exited $?; sleep 60")
    text = terminal.wait_for("both demo hosts checked", lambda t: len(OK.findall(t)) == 2, 120)
    assert "demo-0" in text and "demo-1" in text

    terminal.keys("l")
    text = terminal.wait_for("the launch plan", lambda t: "launch this run?" in t, 60)
    assert "2 host(s), 4 ranks, backend gloo, master 127.0.0.1:" in text
    terminal.keys("y")
    text = terminal.wait_for("losses", lambda t: len(RANK_ROW.findall(t)) == 4, 180)

    # 80×24, the size the docs promise, redrawn in place (not from scratch): the chart takes
    # the room an empty errors pane gives up, its step ticks stay apart, and switching the scale
    # leaves nothing of the old title behind.
    terminal.tmux("resize-window", "-t", "console", "-x", "80", "-y", "24")
    text = terminal.wait_for("the chart at 80×24", lambda t: _chart(t).rows >= 10, 30)
    chart = _chart(text)
    assert chart.title == "log10(loss)" and chart.ticks_apart, text
    terminal.keys("y")
    # A capture can catch the chart mid-redraw: the title as it settles, whole and alone.
    terminal.wait_for("the linear scale", lambda t: _chart(t).title == "loss", 30)
    terminal.keys("y")
    text = terminal.wait_for("the log scale", lambda t: _chart(t).title == "log10(loss)", 30)
    assert (
        _footer(text)
        == "? help  s stop  r resume  e errors  o log  g GPUs  y scale  esc back  q quit"
    )
    # Each pane switch, redrawn over the last: nothing of the pane before is left.
    terminal.keys("o")
    # Not the pane half redrawn (empty): an empty pane would pass every check on the log below.
    text = terminal.wait_for(
        "rank 0's log", lambda t: bool(_pane(t)) and "no errors" not in _pane(t), 30
    )
    log = _pane(text)
    assert log == ["rank 0: no log line yet · enter on a rank shows its log"] or all(
        line.startswith("[0] ") for line in log
    ), text
    terminal.keys("g")
    # Not the log pane still shown (its lines change too), nor the pane half redrawn: both
    # hosts' lines.
    text = terminal.wait_for(
        "the GPUs", lambda t: len(_pane(t)) >= 4 and _pane(t)[0].startswith("demo-0 "), 30
    )
    gpus = _pane(text)
    assert re.fullmatch(r"demo-0  cpu \d+%  rss \d+ MiB", gpus[0]), text
    assert gpus[1:4:2] == ["no GPU samples"] * 2 and gpus[2].startswith("demo-1"), text
    terminal.keys("e")
    # The pane's text can be captured before the chart below it is redrawn: wait for both.
    terminal.wait_for(
        "no errors, and the chart in the room",
        lambda t: _pane(t) == ["no errors"] and _chart(t).rows >= 10,
        30,
    )
    terminal.tmux("resize-window", "-t", "console", "-x", "120", "-y", "36")

    terminal.keys("s")
    terminal.wait_for("the stop confirmation", lambda t: "stop the run?" in t, 30)
    terminal.keys("y")
    terminal.wait_for("a clean stop", lambda t: "nothing of it is left running" in t, 120)
    (record,) = store.records()
    assert record.state is RunState.STOPPED and record.demo

    terminal.keys("r")
    # The state line says so; the note under it says "resumed (attempt 2)" until the supervisor
    # says more (the new attempt's launch summary, at its first step).
    terminal.wait_for("the resumed run", lambda t: "running, attempt 2" in t, 120)
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


def test_closing_the_terminal_mid_run_ends_the_run_and_its_supervisor(
    tmp_path: Path, terminal: Terminal
) -> None:
    # A run far longer than the test: it can only end stopped, by the hang-up. A demo that
    # ends early leaves what it said on the pane (the shell waits, then goes with the server).
    store, tmp = _demo(terminal, tmp_path, "; echo demo exited $?; sleep 60", "--steps", "1000000")
    terminal.wait_for("both demo hosts checked", lambda t: len(OK.findall(t)) == 2, 120)
    terminal.keys("l")
    terminal.wait_for("the launch plan", lambda t: "launch this run?" in t, 60)
    terminal.keys("y")
    terminal.wait_for("losses", lambda t: len(RANK_ROW.findall(t)) == 4, 180)
    # The terminal goes (its window closed, the SSH session to the head dropped): SIGHUP.
    terminal.close()
    (record,) = store.records()
    deadline = time.monotonic() + 60
    left: tuple[object, ...] = (RunState.RUNNING, ["?"], ["?"], ["?"])
    # The demo removes its hosts' directories last, after the run has stopped.
    while left != (RunState.STOPPED, [], [], []):
        assert time.monotonic() < deadline, left
        time.sleep(0.5)
        left = (
            store.load(record.id).state,
            _run_dir_holders(tmp),
            supervisors(store.root),
            list(tmp.iterdir()),
        )
