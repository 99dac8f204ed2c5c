"""The notify hook, with real small programs: it gets the incident as one ASCII JSON line, its
failure is words (its exit and its stderr's first line, its deadline, a program that is not
there), and nothing of it outlives its deadline or a cancellation."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from ddptui.run.notify import incident_document, notify
from ddptui.run.record import Incident, RunRecord, SetAside

DOCUMENT = {"run": "20261130-120000-heal", "cause": "rank 3 on gpu-\x1b]0;x\x07b failed", "n": 1}


def _script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return [sys.executable, str(path)]


def test_the_program_gets_the_document_as_one_ascii_json_line(tmp_path: Path) -> None:
    got = tmp_path / "got"
    argv = _script(
        tmp_path,
        "keep",
        f"import sys\nopen({str(got)!r}, 'wb').write(sys.stdin.buffer.read())\n",
    )
    assert asyncio.run(notify(argv, DOCUMENT)) == "ok"
    text = got.read_bytes()
    assert text.isascii() and text.endswith(b"\n") and text.count(b"\n") == 1
    assert b"\\u001b]0;x\\u0007" in text
    assert json.loads(text) == DOCUMENT


def test_a_program_that_fails_is_said_by_its_exit_and_its_stderr_s_first_line(
    tmp_path: Path,
) -> None:
    argv = _script(
        tmp_path,
        "fail",
        "import sys\nsys.stderr.write('\\n  smtp: \\x1b[31mrefused\\n' + 'more\\n' * 5000)\n"
        "sys.exit(3)\n",
    )
    assert asyncio.run(notify(argv, DOCUMENT)) == "notify exited 3: smtp: \\x1b[31mrefused"
    silent = _script(tmp_path, "silent", "import sys\nsys.exit(4)\n")
    assert asyncio.run(notify(silent, DOCUMENT)) == "notify exited 4"


def test_a_program_that_reads_nothing_and_talks_a_lot_still_succeeds(tmp_path: Path) -> None:
    argv = _script(tmp_path, "chatty", "import sys\nsys.stderr.write('x' * (1 << 20))\n")
    big = {**DOCUMENT, "padding": "p" * (1 << 20)}
    assert asyncio.run(notify(argv, big)) == "ok"


def _sleeper(tmp_path: Path) -> tuple[list[str], Path]:
    """A program that starts a child, both sleeping long, and says their pids."""
    pids = tmp_path / "pids"
    argv = _script(
        tmp_path,
        "sleep",
        "import os, time\n"
        "child = os.fork()\n"
        "if child:\n"
        f"    open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child}}')\n"
        "time.sleep(60)\n",
    )
    return argv, pids


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie not yet reaped by init counts as ended)."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_program_past_its_deadline_is_killed_with_all_it_started(tmp_path: Path) -> None:
    argv, pids = _sleeper(tmp_path)
    started = time.monotonic()
    said = asyncio.run(notify(argv, DOCUMENT, deadline_s=0.5))
    assert said == "notify did not finish in 0.5 s: killed"
    assert time.monotonic() - started < 5.0
    assert all(_gone(int(pid)) for pid in pids.read_text().split())


def test_a_cancelled_notify_is_cancelled_and_leaves_nothing_behind(tmp_path: Path) -> None:
    argv, pids = _sleeper(tmp_path)

    async def cancelled() -> None:
        task = asyncio.ensure_future(notify(argv, DOCUMENT))
        while not pids.exists() or len(pids.read_text().split()) < 2:
            await asyncio.sleep(0.05)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled())
    assert all(_gone(int(pid)) for pid in pids.read_text().split())


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["/nonexistent/notify-hook"], "notify could not start: FileNotFoundError: "),
        ([], "notify could not start: no program given"),
        (["notify\0hook"], "notify could not start: ValueError: "),
    ],
)
def test_a_program_that_cannot_start_is_said_so(argv: list[str], words: str) -> None:
    assert asyncio.run(notify(argv, DOCUMENT)).startswith(words)


def test_a_program_killed_by_a_signal_says_which(tmp_path: Path) -> None:
    argv = _script(tmp_path, "die", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    assert asyncio.run(notify(argv, DOCUMENT)) == "notify was killed by SIGTERM"


def test_the_incident_document_names_the_run_the_incident_and_the_hosts_set_aside() -> None:
    record = RunRecord("20261130-120000-heal", 1.0, "/h/hosts.toml", "t", "nccl", "", 4, [], [])
    incident = Incident(
        1,
        1,
        100.0,
        "rank 3 on gpu-b was killed by SIGKILL",
        ("gpu-b",),
        "OOM",
        action="resumed on gpu-e in place of gpu-b",
        resumed_attempt=2,
        last_step=140,
        checkpoint_step=100,
    )
    record.incidents, record.set_aside = [incident], [SetAside("gpu-b", "OOM", 101.0)]
    document = incident_document(record, incident)
    assert document == {
        "v": 1,
        "run": "20261130-120000-heal",
        "hosts_file": "/h/hosts.toml",
        "incident": incident.to_json(),
        "set_aside": [{"host": "gpu-b", "why": "OOM", "at": 101.0, "leftovers": ""}],
    }
    assert incident.to_json()["steps_redone"] == 40
    assert json.loads(json.dumps(document)) == document
