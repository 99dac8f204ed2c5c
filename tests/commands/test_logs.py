"""``ddptui logs`` on a finished run prints every line its files hold, however large: the node
agent sends a file a megabyte a poll, so a heartbeat can come with lines still unsent, and the
read ends only once every host has caught up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.onhost.common import READ_CHUNK
from ddptui.run.record import Attempt, NodeRecord, RunRecord, RunState, StateChange
from ddptui.run.store import RunStore

RUN = "20990101-000000-logs"
HOSTS = """
[cluster]
workdir = "{workdir}"

[slurm]
nodes = 1

[job]
nproc_per_node = 1
"""


def test_a_finished_run_s_log_of_twelve_pieces_is_printed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Slurm run whose job has ended: its node's files are read here, through the agent.
    run_dir = tmp_path / "shared" / "runs" / RUN / "node0"
    log = run_dir / "logs" / "attempt-1" / "none_ab12" / "attempt_0" / "0" / "stdout.log"
    log.parent.mkdir(parents=True)
    line = "step {:07d} " + "x" * 88
    count = READ_CHUNK * 12 // (len(line.format(0)) + 1)
    log.write_text("".join(line.format(n) + "\n" for n in range(count)))
    record = RunRecord(
        id=RUN,
        created=0.0,
        hosts_file="slurm.toml",
        entry="trainer",
        backend="gloo",
        master_addr="node0",
        world_size=1,
        args=[],
        nodes=[NodeRecord("node0", "node0", 0, 1, str(run_dir), ["torchrun"], {})],
        attempts=[Attempt(number=1, started=0.0, master_port=29500, ended=1.0)],
        states=[StateChange(RunState.COMPLETED, 1.0, "done")],
    )
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    RunStore().create(record, HOSTS.format(workdir=tmp_path / "shared"))
    assert main(["logs", RUN]) == 0
    printed = [text for text in capsys.readouterr().out.splitlines() if "step " in text]
    assert len(printed) == count, (len(printed), count)
    assert printed[-1].endswith(line.format(count - 1))
    sys.stdout.flush()
