"""``ddptui logs`` on a finished run ends, and says why, whatever a host's heartbeats say: one
that keeps saying it has lines unsent (``"behind": true``) is waited for no longer than
:data:`~ddptui.run.following.direct.BEHIND_BEATS` heartbeats without a line, nor, if it sends lines
without end, than :data:`~ddptui.commands.logs.FINISHED_READ_S`.

Both hosts are reached over SSH (an in-process server on this machine): gpu-a runs the real node
agent on its run's files; gpu-b's "Python" is a program that says what a compromised host
would, over a channel it keeps open.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.commands import logs
from ddptui.config.model import ClusterConfig, Config, JobConfig
from ddptui.config.render import config_to_toml
from ddptui.run.following.direct import BEHIND_BEATS
from ddptui.run.record import RunState, StateChange
from ddptui.run.store import RunStore
from tests.remote.hosts import local_host
from tests.run.bed import one_rank_a_host_record
from tests.testbed import LocalSshServer

RUN = "20990101-000000-late"
LOG = "logs/attempt-1/none_ab12/attempt_0/0/stdout.log"
"""Local rank 0's stdout in attempt 1, relative to the run's directory on its host."""
BEHIND = """#!{python}
import json, sys, time

sys.stdin.buffer.read()  # the node agent, never run
offset = 0
while True:
    if {with_lines}:
        offset += 100
        line = {{"k": "line", "f": {log!r}, "o": offset, "t": "more"}}
        print(json.dumps(line))
    print(json.dumps({{"k": "hb", "time": time.time(), "groups": {{"1": False}}, "behind": True}}))
    sys.stdout.flush()
    time.sleep(0.05)
"""
"""gpu-b's "Python": heartbeats that say it is behind, with or without a line before each."""


@pytest.fixture
def second_ssh_server(tmp_path: Path) -> Iterator[LocalSshServer]:
    """gpu-b's: a hosts file names each address and port once."""
    server = LocalSshServer.start(tmp_path / "second-ssh")
    yield server
    server.stop()


def _logs_of_a_finished_run(
    servers: tuple[LocalSshServer, LocalSshServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    with_lines: bool,
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run_dirs = (tmp_path / "gpu-a", tmp_path / "gpu-b")
    log = run_dirs[0] / LOG
    log.parent.mkdir(parents=True)
    log.write_text("step 1 done\n")
    behind = tmp_path / "behind"
    behind.write_text(BEHIND.format(python=sys.executable, with_lines=with_lines, log=LOG))
    behind.chmod(0o755)
    hosts = (
        local_host(servers[0], name="gpu-a"),
        local_host(servers[1], name="gpu-b", python=str(behind)),
    )
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig(nproc_per_node=1))
    record = one_rank_a_host_record(
        RUN, hosts, [str(run_dir) for run_dir in run_dirs], ["torchrun"], ended=1.0
    )
    record.states = [StateChange(RunState.COMPLETED, 1.0, "done")]
    RunStore().create(record, config_to_toml(config))
    assert main(["logs", RUN]) == 0


@pytest.mark.timeout(90)
def test_a_host_always_behind_with_no_line_is_left_and_named(
    local_ssh_server: LocalSshServer,
    second_ssh_server: LocalSshServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _logs_of_a_finished_run(
        (local_ssh_server, second_ssh_server), tmp_path, monkeypatch, with_lines=False
    )
    said = capsys.readouterr()
    assert said.out.splitlines() == ["gpu-a rank 0 stdout (attempt 1) | step 1 done"]
    [stopped] = [line for line in said.err.splitlines() if "stopped waiting" in line]
    assert stopped.startswith("ddptui: stopped waiting after ")
    assert stopped.endswith(
        f" s: gpu-b still says it is behind, with no line in {BEHIND_BEATS} heartbeats; "
        "its lines above may be incomplete"
    )


@pytest.mark.timeout(90)
def test_a_host_behind_for_ever_is_left_at_the_deadline_and_named(
    local_ssh_server: LocalSshServer,
    second_ssh_server: LocalSshServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(logs, "FINISHED_READ_S", 5.0)
    began = time.monotonic()
    _logs_of_a_finished_run(
        (local_ssh_server, second_ssh_server), tmp_path, monkeypatch, with_lines=True
    )
    # The deadline, then the hosts' channels closed.
    assert time.monotonic() - began < 5.0 + 15.0
    said = capsys.readouterr()
    printed = said.out.splitlines()
    assert "gpu-a rank 0 stdout (attempt 1) | step 1 done" in printed
    assert "gpu-b rank 1 stdout (attempt 1) | more" in printed
    assert [line for line in said.err.splitlines() if "stopped waiting" in line] == [
        "ddptui: stopped waiting after 5 s: gpu-b still says it is behind; "
        "its lines above may be incomplete"
    ]
