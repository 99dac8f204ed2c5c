"""The node agent's stack dump, run for real on this machine: a launcher in torchrun's place
starts the ranks with ``RANK`` set, the agent's ``start`` puts its handler in front of them, and
its ``dump`` asks each for its stacks."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.onhost import processes
from tests.onhost.agent import agent

# torchrun's part: start each rank (a script, or a program that is not Python) with RANK set,
# then wait for them.
LAUNCHER = """\
import os, subprocess, sys
ranks = [
    subprocess.Popen(argv, env=dict(os.environ, RANK=str(rank)))
    for rank, argv in enumerate(
        [sys.executable, name] if name.endswith(".py") else ["sleep", "600"]
        for name in sys.argv[1:]
    )
]
for rank in ranks:
    rank.wait()
"""
RANK = """\
import os, time

def stuck_in_here():
    time.sleep(600)

def waiting_for_the_others():
    time.sleep(600)

print("started", flush=True)
(stuck_in_here if os.environ["RANK"] == "0" else waiting_for_the_others)()
"""
# A rank whose interpreter has exited while the process lingers in native code (as gloo's
# teardown can): libc's own exit handlers run after Python's finalization.
LINGERING = """\
import ctypes
libc = ctypes.CDLL(None)
libc.__cxa_atexit(ctypes.cast(libc.pause, ctypes.c_void_p), None, None)
"""
THEIR_SITE = """\
import os
open(os.path.join(os.environ["THEIR_MARKS"], str(os.getpid())), "w").close()
"""


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A run of three ranks (two Python, one not) whose own sitecustomize leaves marks."""
    run_dir, code = tmp_path / "runs" / "r1" / "node0", tmp_path / "code"
    code.mkdir()
    (code / "launcher.py").write_text(LAUNCHER)
    (code / "rank.py").write_text(RANK)
    theirs, marks = tmp_path / "their-site", tmp_path / "marks"
    theirs.mkdir()
    marks.mkdir()
    (theirs / "sitecustomize.py").write_text(THEIR_SITE)
    started = agent(
        "start",
        str(run_dir),
        str(code),
        "1",
        sys.executable,
        "launcher.py",
        "rank.py",
        "rank.py",
        "sleep",
        sent={"PYTHONPATH": str(theirs), "THEIR_MARKS": str(marks)},
    )
    pgid = started["pgid"]
    assert isinstance(pgid, int)
    try:
        # Generous: beside a bed's ranks on two cores, three Python starts took over 30 s.
        deadline = time.monotonic() + 90
        stacks = processes.stacks_dir(run_dir)

        def settled() -> bool:
            return len(list(stacks.glob("*.ready"))) >= 2 and len(list(marks.iterdir())) >= 3

        while not settled() and time.monotonic() < deadline:
            time.sleep(0.1)
        yield run_dir, marks
    finally:
        os.killpg(pgid, signal.SIGKILL)


def test_every_python_rank_s_stack_comes_back_and_other_ranks_are_left_alone(
    ranks: tuple[Path, Path],
) -> None:
    run_dir, _ = ranks
    answer = agent("dump", str(run_dir), "10")
    assert answer["attempt"] == 1
    reports = answer["ranks"]
    assert isinstance(reports, list)
    by_rank = {report["rank"]: report for report in reports}
    assert sorted(by_rank) == [0, 1, 2]
    assert by_rank[0]["via"] == by_rank[1]["via"] == "faulthandler"
    assert "in stuck_in_here" in by_rank[0]["text"] and "rank.py" in by_rank[0]["text"]
    assert "in waiting_for_the_others" in by_rank[1]["text"]
    assert "stuck_in_here" not in by_rank[1]["text"]
    assert by_rank[2]["text"] == "" and "no stack handler" in by_rank[2]["error"]
    # Every rank lives on, the one without a handler too; a second dump sends only the new stack.
    alive = [name for pid, name, _, _, _ in processes.run_processes(run_dir)]
    assert alive.count("python3") + alive.count(Path(sys.executable).name) >= 3
    assert "sleep" in alive
    again = {report["rank"]: report for report in agent("dump", str(run_dir), "10")["ranks"]}  # type: ignore[union-attr]
    assert again[0]["text"].count("in stuck_in_here") == 1


def test_the_user_s_own_sitecustomize_still_runs(ranks: tuple[Path, Path]) -> None:
    run_dir, marks = ranks
    ready = {path.stem for path in processes.stacks_dir(run_dir).glob("*.ready")}
    # Theirs ran in the launcher and in both Python ranks; ours registered in the ranks only.
    assert len(list(marks.iterdir())) == 3
    assert ready <= {path.name for path in marks.iterdir()} and len(ready) == 2


def _caught_signals(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigCgt for {pid}")


def test_a_rank_past_its_interpreter_s_exit_is_not_killed_by_a_dump(tmp_path: Path) -> None:
    run_dir, code = tmp_path / "runs" / "r1" / "node0", tmp_path / "code"
    code.mkdir()
    (code / "launcher.py").write_text(LAUNCHER)
    (code / "lingering.py").write_text(LINGERING)
    started = agent(
        "start", str(run_dir), str(code), "1", sys.executable, "launcher.py", "lingering.py"
    )
    pgid = started["pgid"]
    assert isinstance(pgid, int)
    dump_signal = signal.SIGRTMIN + 6
    try:
        deadline = time.monotonic() + 90
        ready: list[Path] = []
        while not ready and time.monotonic() < deadline:
            ready = list(processes.stacks_dir(run_dir).glob("*.ready"))
            time.sleep(0.1)
        assert ready, "the rank never registered its handler"
        pid = int(ready[0].stem)
        while _caught_signals(pid) >> (dump_signal - 1) & 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        answer = agent("dump", str(run_dir), "2")
        reports = answer["ranks"]
        assert isinstance(reports, list) and len(reports) == 1
        assert "interpreter has exited" in reports[0]["error"]
        # Even a signal sent before the agent could see the handler go leaves it running.
        os.kill(pid, dump_signal)
        time.sleep(0.5)
        assert Path(f"/proc/{pid}").exists()
        assert Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    finally:
        os.killpg(pgid, signal.SIGKILL)
