"""``ddptui dump`` on the test bed: a rank stuck in a function of its own while the others wait
for it in a collective, as a hung run is; and the user's own sitecustomize still runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Static

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from ddptui.run.evidence import kept as kept_dump
from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from tests.fixtures.flight.hostile import evaluating_dump
from tests.run.bed import Cli, host_run_dir, run_pid, run_processes, wait_for_step, write_hosts
from tests.testbed import TestBed, TestHost
from tests.testbed.faults import install_double
from tests.ui.pilot import open_from_runs, until

HANGS = """\
import os, sys, time
import torch
import torch.distributed as dist

def stuck_in_here():
    time.sleep(600)

dist.init_process_group("gloo")
print("up; theirs:", os.environ.get("THEIR_SITE_RAN"), flush=True)
if dist.get_rank() == 4:
    stuck_in_here()
dist.all_reduce(torch.ones(1))
"""
PTRACE_REFUSED = """#!/bin/sh
cat >&2 <<'SAID'
Permission Denied: Try running again with elevated permissions by going 'sudo env "PATH=$PATH" !!'
SAID
exit 1
"""
"""What py-spy says where ptrace is refused (kernel.yama.ptrace_scope, a container)."""
THEIR_SITE = 'import os\nos.environ["THEIR_SITE_RAN"] = "yes"\n'
QUIET_S = 20


def _logins(host: TestHost) -> int:
    """The SSH logins ``host``'s sshd has let in so far."""
    return host.sshd_log.read_text().count("Accepted publickey")


def _texts(saved: Path) -> dict[int, str]:
    """Each rank's text in the dump kept in ``saved``, as its host sent it."""
    return {stack.rank: stack.text for stack in kept_dump.load(saved).stacks}


def test_dump_names_the_stuck_rank_first_and_groups_the_waiting_ones(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    project, theirs = tmp_path / "project", tmp_path / "their-site"
    project.mkdir()
    theirs.mkdir()
    (project / "hangs.py").write_text(HANGS)
    (theirs / "sitecustomize.py").write_text(THEIR_SITE)
    # The script writes no step events: it is judged by its output and CPU use.
    job = {"script": str(project / "hangs.py"), "args": [], "nproc_per_node": 2}
    job["hang_timeout_s"] = QUIET_S
    cluster = {"env": {"PYTHONPATH": str(theirs)}}
    hosts_file = write_hosts(testbed, tmp_path, hosts, job=job, cluster=cluster)
    started = cli.run("launch", str(hosts_file), "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    deadline = time.monotonic() + 60
    while (logs := cli.run("logs", run_id).stdout).count("up; theirs: yes") < 6:
        assert time.monotonic() < deadline, logs
        time.sleep(1)

    # Asked of the run's supervisor, which asks each host through the connection it follows
    # the host on: not one login more on any host.
    logins = [_logins(host) for host in hosts]
    began = time.monotonic()
    dumped = cli.run("dump", run_id)
    took = time.monotonic() - began
    assert [_logins(host) for host in hosts] == logins
    assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    assert took < 30
    lines = dumped.stdout.splitlines()
    assert lines[0] == "2 different stacks; the odd ones first:", dumped.stdout
    assert lines[1] == "rank 4 on node2: stuck_in_here ← <module> at hangs.py:6"
    assert lines[2].endswith("/code/hangs.py:6 in stuck_in_here")
    waiting = next(line for line in lines if line.startswith("ranks 0–3, 5 on "))
    assert waiting.startswith("ranks 0–3, 5 on node0, node1, node2: all_reduce ← ")
    saved = Path(lines[-1].rpartition(": ")[2])
    assert sorted(path.name for path in saved.iterdir()) == [
        "node0.txt",
        "node1.txt",
        "node2.txt",
        kept_dump.STACKS_INDEX,
    ]
    assert "in stuck_in_here" in _texts(saved)[4]
    # py-spy where a host has it: node2's ranks through it. node1's refuses to attach (ptrace):
    # its ranks are asked by signal instead, and the dump says why.
    (hosts[2].bin_dir / "py-spy").symlink_to(Path(sys.executable).parent / "py-spy")
    install_double(hosts[1], "py-spy", PTRACE_REFUSED)
    again = cli.run("dump", run_id)
    assert again.returncode == 0, again.stdout + again.stderr
    lines = again.stdout.splitlines()
    assert lines[1] == "rank 4 on node2: stuck_in_here ← <module> at hangs.py:6", again.stdout
    assert any(line.startswith("ranks 0–3, 5 on node0, node1, node2: all_reduce") for line in lines)
    assert "node1: py-spy: Permission Denied: Try running again with elevated permissions" in (
        again.stdout
    )
    texts = _texts(Path(lines[-1].rpartition(": ")[2]))
    assert texts[4].startswith("Process ") and texts[2].startswith("Current thread ")
    # Dumping took nothing down: every rank still waits where it was.
    assert len(run_processes(hosts, run_id)) >= 12
    # Quiet and idle for the window: hung, with nothing following it.
    status = _hung(cli, run_id)
    assert status["hang"]["quiet"] is True and status["hang"]["window_s"] == QUIET_S
    assert status["detail"].startswith("no output and no CPU use for "), status["detail"]
    try:
        asyncio.run(_on_the_console(hosts_file, cli, run_id))
    finally:
        assert cli.run("stop", run_id, "--kill").returncode == 0


def _hung(cli: Cli, run_id: str) -> dict[str, Any]:
    return cli.status_once("hung", run_id, lambda run: run.state is RunState.HUNG, QUIET_S + 40)


async def _on_the_console(hosts_file: Path, cli: Cli, run_id: str) -> None:
    """The same with ``D`` on the run screen; enter on a rank shows its every thread."""
    app = DdptuiApp(hosts_file, store=RunStore(cli.store))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_from_runs(pilot, run_id)
        await pilot.press("D")
        await until(pilot, "the stacks", lambda: screen.stacks is not None, 30)
        text = str(screen.query_one("#stacks-text", Static).content)
        assert "rank 4 on node2: stuck_in_here ← <module> at hangs.py:6" in text, text
        assert text.index("rank 4 on node2") < text.index("ranks 0–3, 5 on node0")
        await until(pilot, "the ranks", lambda: len(screen.run_model.progress.ranks) == 6, 30)
        table = screen.query_one("#ranks", DataTable)
        table.focus()
        table.move_cursor(row=4)
        await pilot.press("enter")
        await pilot.pause()
        text = str(screen.query_one("#stacks-text", Static).content)
        assert "rank 4 on node2 (pid " in text and "in stuck_in_here" in text, text


def test_a_failed_run_s_flight_recorders_are_gathered_and_name_the_rank_without_one(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    # Rank 1 frozen for good: its peers' all_reduce times out after 10 s, each of them dumps
    # its flight recorder as it fails (gloo has no watchdog to do it), the frozen rank cannot.
    hosts = testbed.hosts[:3]
    hosts_file = write_hosts(testbed, tmp_path)
    started = cli.run(
        "launch", str(hosts_file), "--detach", "--", "--max-steps", "100000", "--dist-timeout", "10"
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_for_step(testbed, hosts, run_id, 10)
    os.kill(run_pid(hosts[1], run_id, b"LOCAL_RANK=0", b"trainer"), signal.SIGSTOP)
    deadline = time.monotonic() + 90
    while "flight recorders kept in" not in (detail := _attempt_detail(cli, run_id)):
        assert time.monotonic() < deadline, detail
        time.sleep(1)
    assert "no flight-recorder dump from rank 1: " in detail, detail
    # The peers' collective, named: both in it, or (a ring lets one rank finish a collective
    # the other still waits in) one a collective ahead of the other.
    assert re.search(r"#\d+ \(gloo:all_reduce \[\[5508\]\], called from _gradients", detail), detail
    assert re.search(r"ranks 0, 2 entered #\d+|which rank [02] waits? in", detail), detail
    dumped = cli.run("dump", run_id)
    assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    lines = dumped.stdout.splitlines()
    assert lines[:2] == [
        "no rank of the run is running on its hosts",
        "flight recorder (each rank's last collectives):",
    ]
    assert lines[2].startswith("  no flight-recorder dump from rank 1: ")
    saved = Path(lines[-1].rpartition(": ")[2])
    assert sorted(path.name for path in saved.iterdir()) == [
        "flight-rank0.from-host",
        "flight-rank2.from-host",
        "flight-recorder.json",
        kept_dump.STACKS_INDEX,
    ]
    read = json.loads((saved / "flight-recorder.json").read_text())
    assert [trace["rank"] for trace in read] == [0, 2]
    # Node 0 compromised: its dump now holds what torch's own analyser would evaluate.
    marker = tmp_path / "evaluated"
    (host_run_dir(hosts[0], run_id) / "node" / "flight_0").write_bytes(evaluating_dump(marker))
    before = set(tmp_path.rglob("*"))
    again = cli.run("dump", run_id)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not marker.exists()
    assert re.search(r"#\d+ \(gloo:all_reduce \[\[5508\]\], called from _gradients", again.stdout)
    resaved = Path(again.stdout.splitlines()[-1].rpartition(": ")[2])
    assert {path for path in set(tmp_path.rglob("*")) - before if resaved not in path.parents} == {
        resaved
    }


def _attempt_detail(cli: Cli, run_id: str) -> str:
    record = tomllib.loads((cli.store / run_id / "run.toml").read_text())
    return str(record["attempts"][-1].get("detail", ""))
