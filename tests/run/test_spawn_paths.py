"""The interpreters ddptui starts on the head import nothing from the directory it was started
in: run from a folder another user can write (``/tmp``, a shared project), whose ``json.py`` or
``ddptui/run/supervisor/__init__.py`` would otherwise run as the user."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.srun import SrunCluster
from ddptui.run.control import RunControl
from ddptui.run.standby import Standby
from ddptui.run.store import RunStore
from ddptui.run.supervising import holds_open
from tests.run.bed import wait_until

PLANTED = ("json.py", "argparse.py", "ddptui/__init__.py", "ddptui/run/supervisor/__init__.py")


def plant(directory: Path, marker: Path) -> None:
    for name in PLANTED:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")
    (directory / "ddptui" / "run" / "__init__.py").write_text("")


@pytest.fixture
def hostile_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    marker = tmp_path / "imported-from-cwd"
    cwd = tmp_path / "shared"
    plant(cwd, marker)
    monkeypatch.chdir(cwd)
    return marker


def test_the_supervisor_starts_from_ddptui_s_own_files(hostile_cwd: Path, tmp_path: Path) -> None:
    # A store whose path has a space in it: told whole, not split.
    store = RunStore(tmp_path / "state dir" / "runs")
    (store.root / "20990101-000000-none").mkdir(parents=True)
    control = RunControl(store)
    control.supervisors.spawn("20990101-000000-none")
    # The real supervisor finds no run and ends: whatever it imported, it has imported.
    _wait_for_the_end(control, store, "20990101-000000-none")
    assert not hostile_cwd.exists(), hostile_cwd.read_text()


def test_the_node_agent_run_here_for_an_ended_job_imports_the_standard_library(
    hostile_cwd: Path,
) -> None:
    node = HostConfig("node1", "node1")
    here = SrunCluster(None)
    argv = here.python(node, "-", "x")
    result = asyncio.run(
        here.run(node, argv, input="import json; print(json.dumps(1))", timeout=30)
    )
    assert (result.exit_status, result.stdout) == (0, "1\n"), result.stderr
    assert not hostile_cwd.exists(), hostile_cwd.read_text()


def _wait_for_the_end(control: RunControl, store: RunStore, run_id: str) -> None:
    """Until ``run_id``'s supervisor has started and ended: its log is written once it holds
    the run's lock, which it lets go of only as it exits."""
    log = store.files(run_id).supervisor_log
    wait_until(
        "the supervisor to start and end",
        lambda: log.exists() and not control.supervised(run_id),
        60,
        every=0.1,
        story=lambda: log.read_text() if log.exists() else "it never wrote its log",
    )


def test_a_standby_supervisor_told_its_run_supervises_it(
    hostile_cwd: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store whose path has a space in it: told whole, not split.
    store = RunStore(tmp_path / "state dir" / "runs")
    (store.root / "20990101-000000-none").mkdir(parents=True)
    control = RunControl(store)
    control.warm_up()

    def spawn(run_id: str, *args: str) -> None:
        pytest.fail("a second supervisor was started: the standby was not used")

    monkeypatch.setattr(control.supervisors, "spawn", spawn)
    control._start_supervisor("20990101-000000-none")
    log = store.files("20990101-000000-none").supervisor_log
    _wait_for_the_end(control, store, "20990101-000000-none")
    # It found no record, as a spawned one does, and said so in the run's log.
    assert "cannot supervise run 20990101-000000-none" in log.read_text()
    assert not hostile_cwd.exists(), hostile_cwd.read_text()


def test_a_standby_supervisor_never_told_goes_with_its_starter(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    standby = Standby.start()
    process = standby._process
    assert process.poll() is None
    # The launch did not go ahead: the starter lets go of it (as its exit does).
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=30) == 0
    assert not store.root.exists() or not any(store.root.iterdir())


def test_a_supervisor_is_known_by_the_run_lock_it_holds_open_not_by_its_argv(
    tmp_path: Path,
) -> None:
    # A standby's argv names neither its store nor its run: the lock it holds open does.
    lock = tmp_path / "run" / "supervisor.lock"
    lock.parent.mkdir()
    other = tmp_path / "other.lock"
    other.touch()
    with lock.open("ab"):
        assert holds_open(os.getpid(), lock)
        assert holds_open(os.getpid(), tmp_path / "run" / ".." / "run" / "supervisor.lock")
        assert not holds_open(os.getpid(), other)
    assert not holds_open(os.getpid(), lock)
    assert not holds_open(2**22 + 1, lock)
