"""One owner per run, on the test bed: the supervisor judges and acts with no front end open,
settles races between requests, survives being killed, and serves every viewer through one
channel per host. 3 hosts × 1 process, gloo on CPU, real sshd and torchrun."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from ddptui.layout import RunFiles
from ddptui.run import protocol
from ddptui.run.control import RunControl
from ddptui.run.evidence import kept as kept_dump
from ddptui.run.following.state import clock_time
from ddptui.run.following.updates import FileLine
from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.widgets.rank_table import RANK_COLUMNS, RankTable
from tests.fixtures.nvml import machine, pynvml_double
from tests.run.bed import (
    PHASES,
    Cli,
    frozen,
    host_run_dir,
    kill_run,
    run_id_in,
    run_pid,
    run_processes,
    supervisors,
    wait_for_step,
    wait_until,
    write_hosts,
)
from tests.testbed import (
    TestBed,
    TestHost,
    cpu_throttled,
    cut_link,
    install_module,
    log_kernel,
    restore_link,
)
from tests.ui.pilot import until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.xdist_group("second-bed")]

ENDLESS = ("--", "--max-steps", "100000")
STATE_COLUMN = RANK_COLUMNS.index("state")


def _record(cli: Cli, run_id: str) -> dict[str, Any]:
    return tomllib.loads(RunFiles(cli.store / run_id).record.read_text())


def _launch(cli: Cli, hosts_file: Path, *args: str) -> str:
    started = cli.run("launch", str(hosts_file), "--detach", *args)
    assert started.returncode == 0, started.stderr
    return started.stdout.strip()


def _wait_for_attempt_steps(
    bed: TestBed, hosts: Sequence[TestHost], run_id: str, *, attempt: int, steps: int
) -> None:
    """Until every rank has made ``steps`` steps in ``attempt`` (counted by its start events)."""

    def stepped() -> bool:
        for host in hosts:
            for path in (host_run_dir(host, run_id) / "events").glob("rank*.jsonl"):
                starts = made = 0
                for line in path.read_text().splitlines():
                    kind = json.loads(line)["type"]
                    starts += kind == "start"
                    made += kind == "step" and starts == attempt
                if made < steps:
                    return False
        return True

    wait_until(f"{steps} steps of attempt {attempt} on every rank", stepped, 180, every=0.5)


def _attempt_of(pid: int) -> bytes | None:
    with contextlib.suppress(OSError):
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"DDPTUI_ATTEMPT="):
                return item.partition(b"=")[2]
    return None


def test_a_detached_run_that_loses_a_host_fails_with_no_front_end_open_and_resumes(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    hosts_file = write_hosts(testbed, tmp_path, job={"checkpoint_every": 20})
    run_id = _launch(cli, hosts_file, *ENDLESS)
    wait_for_step(testbed, hosts, run_id, 45)
    cut = time.time()
    cut_link(hosts[2])
    try:
        # Nothing of ddptui runs now but the run's supervisor, asked as a user would.
        statuses = []
        wait_until(
            "status to say failed",
            lambda: (
                statuses.append(cli.json("status", run_id)) or statuses[-1]["state"] == "failed"
            ),
            90,
            every=0.5,
        )
        seen = time.time()
        record = _record(cli, run_id)
        failed = next(change for change in record["states"] if change["state"] == "failed")
        # Recorded when judged (12 s of silence, the others idle 10 s), and said at once.
        assert failed["time"] - cut <= 15, failed
        assert seen - failed["time"] <= 5, (seen, failed)
        assert failed["detail"].startswith("node2 (node 2) stopped answering"), failed
        # The others are ended after the verdict, and status says so while it happens.
        steps = (
            "ending what is left of the run on node0, node1",
            "keeping the flight recorders' dumps",
            "taking the nodes' last lines",
        )
        # On a loaded machine the ending may be over before status is asked again; then the
        # attempt's detail says what it ended.
        last = statuses[-1]
        ended = last["doing"] is None and "SIGTERM to" in last["attempts"][-1]["detail"]
        assert last["doing"] in steps or ended, last
        wait_until(
            "the healthy hosts to be cleared", lambda: not run_processes(hosts[:2], run_id), 30
        )
        wait_until(
            "status to say it is done", lambda: cli.json("status", run_id)["doing"] is None, 30
        )
    finally:
        restore_link(hosts[2])
    # Once the host answers again, a resume ends what is left there and goes on from the
    # last checkpoint.
    resumed = cli.run("resume", run_id, "--detach")
    assert resumed.returncode == 0, resumed.stderr
    starts = wait_until(
        "attempt 2's start on rank 0",
        lambda: len(found := _starts(hosts[0], run_id)) == 2 and found,
        90,
        every=0.5,
    )
    assert starts[1]["resumed_from"] is not None and starts[1]["start_step"] >= 40
    kill_run(cli, hosts, run_id)


def _starts(host: TestHost, run_id: str) -> list[dict[str, Any]]:
    events = host_run_dir(host, run_id) / "events" / "rank0.jsonl"
    lines = events.read_text().splitlines()
    return [json.loads(line) for line in lines if '"type":"start"' in line]


FIRST_STEP_S, SAVE_AT, SAVE_S = 22, 30, 40
"""The save is longer than the 35 s within which a frozen rank must be named: no window that
is simply longer can pass both."""


def test_slow_phases_are_no_hang_but_a_frozen_rank_is_named_within_the_window(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    project = tmp_path / "project"
    project.mkdir()
    (project / "phases.py").write_text(PHASES)
    # One save, at SAVE_AT; then it trains until it is ended.
    args = [str(FIRST_STEP_S), str(SAVE_AT), str(SAVE_S), "1", "0"]
    job = {"script": str(project / "phases.py"), "args": args}
    run_id = _launch(cli, write_hosts(testbed, tmp_path, job=job))
    wait_for_step(testbed, hosts, run_id, SAVE_AT + 30, timeout=FIRST_STEP_S + SAVE_S + 60)
    states = [change["state"] for change in _record(cli, run_id)["states"]]
    assert states[-1] == "running" and "hung" not in states, states
    rank1 = run_pid(hosts[1], run_id, b"LOCAL_RANK=0")
    with frozen(rank1) as frozen_at:
        status = wait_until(
            "status to say hung",
            lambda: (found := cli.json("status", run_id))["state"] == "hung" and found,
            120,
            every=1.0,
        )
        seen = time.time()
        hung = next(c for c in _record(cli, run_id)["states"] if c["state"] == "hung")
        human = cli.run("status", run_id)
        table = asyncio.run(_rank_table_states(cli.store, run_id))
    # Said once the default window (20 s for steps this short) passed since the last step.
    assert hung["time"] - frozen_at <= 30 + 5, (hung, frozen_at)
    assert seen - frozen_at <= 30 + 15
    hang = status["hang"]
    assert hang["window_s"] == 20 and abs(hang["since"] - frozen_at) < 5, hang
    odd = [rank for rank in hang["ranks"] if rank["why"]]
    found = [(rank["rank"], rank["host"], rank["process"]) for rank in odd]
    assert found == [(1, "node1", "T")], hang["ranks"]
    assert "stopped (SIGSTOP" in odd[0]["why"]
    # Each rank's step as its events last said (a rank writes them a little behind its steps).
    assert all(rank["step"] >= hang["step"] >= SAVE_AT + 30 for rank in hang["ranks"]), hang
    assert "rank 1 on node1" in status["detail"]
    # One judgement, the same in every view: the frozen rank marked apart from the ranks that
    # only wait for it in the collective, in status and in the console's rank table alike.
    marks = {rank["rank"]: rank["hung"] for rank in status["ranks"]}
    assert marks == {0: "waiting", 1: "stuck", 2: "waiting"}, status["ranks"]
    assert {rank: state.split(" ", 1)[1] for rank, state in table.items()} == {
        0: "… waiting",
        1: "⏸ stuck",
        2: "… waiting",
    }, table
    assert human.returncode == 0
    assert f"run {run_id}: hung, attempt 1: no step for" in human.stdout, human.stdout
    assert re.search(r"hung since \d\d:\d\d:\d\d \(\d+ s without a step", human.stdout)
    # SIGCONT: it steps again, and so does the record.
    wait_until(
        "the run to step again",
        lambda: _record(cli, run_id)["states"][-1]["state"] == "running",
        60,
    )
    assert _record(cli, run_id)["states"][-1]["detail"] == "stepping again"
    kill_run(cli, hosts, run_id)


async def _rank_table_states(store: Path, run_id: str) -> dict[int, str]:
    """Each rank's state as the console's rank table shows it, once it shows the hang: the run
    screen on a live attachment, as ``ddptui`` opens it."""
    attachment = await RunControl(RunStore(store)).attach(run_id)
    app = DdptuiApp(first_screen=RunScreen(attachment.record, attachment=attachment))
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.screen.query_one(RankTable)

        def states() -> dict[int, str]:
            return {
                int(str(key.value)): str(table.get_row(key)[STATE_COLUMN])
                for key in list(table.rows)
            }

        await until(pilot, "the hang in the rank table", lambda: "⏸" in str(states()), 30)
        return states()


HEAVIER = ["--width", "256", "--depth", "4", "--batch-size", "64", "--samples", "8192"]
"""A forward pass of a few milliseconds: long against a throttled host's CFS slices."""


def _stragglers(cli: Cli, run_id: str) -> list[tuple[int, str]]:
    return _named_stragglers(cli.json("status", run_id))


def _named_stragglers(status: dict[str, Any]) -> list[tuple[int, str]]:
    return [(rank["rank"], rank["host"]) for rank in status["ranks"] if rank["straggler"]]


def _gpu_of(host: TestHost, **changes: Any) -> None:
    """``host``'s one GPU, at NVML's boundary: the recorded H200 with ``changes``, read by
    the agent at its next heartbeat (written whole: it reads the file at every call)."""
    recorded = machine("h200_idle")
    recorded["devices"][0].update(changes)  # type: ignore[index]
    install_module(host, {"pynvml.py": pynvml_double(), "pynvml.json.new": json.dumps(recorded)})
    (host.python_dir / "pynvml.json.new").replace(host.python_dir / "pynvml.json")


HOT = 0x4 | 0x8 | 0x40
"""NVML's reasons for a GPU its own heat holds down (at its power limit too)."""


def test_a_throttled_host_s_rank_is_named_a_straggler_and_unnamed_when_it_recovers(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    _gpu_of(hosts[1])
    job = {"args": [*HEAVIER, "--epochs", "100000"]}
    run_id = _launch(cli, write_hosts(testbed, tmp_path, job=job), *ENDLESS)
    wait_for_step(testbed, hosts, run_id, 20)
    assert _stragglers(cli, run_id) == []
    rank1 = run_pid(hosts[1], run_id, b"LOCAL_RANK=0")
    # Its GPU runs hot as the rank slows: the straggler is named with that cause.
    hot_from = time.time()
    _gpu_of(hosts[1], clocks_event_reasons=HOT, temperature_c=91)
    # A twentieth of a core for node1's rank. Half a core, as on a host of many cores, would hold
    # it to about what it gets on the bed anyway (three ranks, their torchruns and agents share
    # two cores), and a fifth was not named in 150 s with the whole suite beside it.
    with cpu_throttled([rank1], 0.05, f"ddptui-test-{os.getpid()}"):
        # How soon is benchmarks/stragglers.py's to measure, on an idle machine. One status
        # says it all: a second could come after the rank recovered.
        status = wait_until(
            "a straggler",
            lambda: _named_stragglers(found := cli.json("status", run_id)) and found,
            150,
            every=2.0,
        )
    assert _named_stragglers(status) == [(1, "node1")]
    rank = next(rank for rank in status["ranks"] if rank["rank"] == 1)
    # Named once 10% slower; it stays named until under 5%.
    assert rank["slower_by"] >= 0.05 and rank["compute_s"] > 0, rank
    assert "straggler rank 1 on node1 +" in status["progress"]
    heat = "its GPU 0 has been slowed by its own heat (hardware thermal slowdown) since "
    assert rank["slow_cause"].startswith(heat), rank
    # Dated by the first heartbeat that said so: within two heartbeats (and a second's
    # rounding) of the change.
    dated = {clock_time(hot_from + seconds) for seconds in range(6)}
    assert rank["slow_cause"].removeprefix(heat) in dated, (rank, dated)
    _gpu_of(hosts[1])
    wait_until("no straggler", lambda: not _stragglers(cli, run_id), 150, every=2.0)

    def recorded() -> str | None:
        detail = str(_record(cli, run_id)["attempts"][-1]["detail"])
        return detail if "rank 1 no longer a straggler" in detail else None

    # status asks the supervisor's model; its record takes the recovery at its next judging,
    # up to half a second later.
    detail = wait_until("the recovery in the record", recorded, 10)
    assert "straggler: rank 1 on node1 +" in detail and "rank 1 no longer a straggler" in detail
    assert f": {heat}" in detail
    kill_run(cli, hosts, run_id)


FELL_OFF_THE_BUS = (
    "NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)
"""The driver's line for the recorded H200 (PCI 00000000:00:06.0) gone from the bus."""


def test_a_gpu_that_falls_off_the_bus_is_named_first_in_the_run_s_failure(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    _gpu_of(hosts[1])
    run_id = _launch(cli, write_hosts(testbed, tmp_path), *ENDLESS)
    wait_for_step(testbed, hosts, run_id, 5)
    rank1 = run_pid(hosts[1], run_id, b"LOCAL_RANK=0", b"trainer")
    log_kernel(hosts[1], FELL_OFF_THE_BUS)
    said = "node1 GPU 0 (PCI 0000:00:06) logged Xid 79, the GPU fell off the bus, at "

    def node1_xids() -> list[str]:
        nodes = cli.json("status", run_id)["nodes"]
        return list(next(node for node in nodes if node["host"] == "node1")["xids"])

    (xid,) = wait_until("the Xid in status --json", node1_xids, 20, every=2.0)
    assert xid.startswith(said), xid
    # Its rank dies with the GPU, as a rank on a GPU gone from the bus does.
    os.kill(rank1, signal.SIGKILL)
    wait_until("the failure", lambda: cli.record(run_id).state.final, 60)
    record = cli.record(run_id)
    detail = record.states[-1].detail
    assert record.state.value == "failed" and detail.startswith(said), detail
    assert "; torchrun on node" in detail, detail
    wait_until("nothing left of the run", lambda: not run_processes(hosts, run_id), 30)


def test_on_hang_stop_ends_a_hung_run_as_failed_and_keeps_the_evidence(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    job = {"hang_timeout_s": 5, "on_hang": "stop"}
    run_id = _launch(cli, write_hosts(testbed, tmp_path, job=job), *ENDLESS)
    wait_for_step(testbed, hosts, run_id, 10)
    rank1 = run_pid(hosts[1], run_id, b"LOCAL_RANK=0", b"trainer")
    with frozen(rank1):
        record = wait_until(
            "the hung run to be stopped",
            lambda: (found := _record(cli, run_id))["state"] == "failed" and found,
            90,
        )
    states = [change["state"] for change in record["states"]]
    assert states[-3:] == ["hung", "stopping", "failed"], states
    detail = record["states"][-1]["detail"]
    assert detail.startswith("hung at step ") and "rank 1 on node1" in detail, detail
    (evidence,) = (cli.store / run_id / "evidence").glob("hang-*.json")
    kept = json.loads(evidence.read_text())
    assert kept["state"] == "hung" and kept["hang"]["window_s"] == 5
    # Every rank's stacks were taken before the stop: the frozen rank could not answer, the
    # others were caught waiting for it.
    stacks = kept["stacks"]
    (silent,) = stacks["without_stack"]
    assert (silent["rank"], silent["host"]) == (1, "node1") and "stopped" in silent["why"]
    assert sorted(rank for group in stacks["groups"] for rank in group["ranks"]) == [0, 2]
    saved = Path(stacks["saved_in"])
    assert sorted(path.name for path in saved.iterdir()) == [
        "node0.txt",
        "node1.txt",
        "node2.txt",
        kept_dump.STACKS_INDEX,
    ]
    assert f"every rank's stacks at the hang: {saved}" in record["attempts"][0]["detail"]
    wait_until("nothing left of the run", lambda: not run_processes(hosts, run_id), 30)


# A script of one's own that reads ddptui's stop request (docs/events.md), ends by itself after
# the number of steps its argument gives (if any), and whose rank 1 crashes on its way out, as
# torch's gloo teardown can abort a process: its node's torchrun fails, and node 0's then waits in
# torch's exit barrier (up to 300 s), deaf to SIGTERM.
CRASHES_AT_EXIT = """\
import json, os, sys, time
import torch, torch.distributed as dist

run_dir, rank = os.environ["DDPTUI_RUN_DIR"], int(os.environ["RANK"])
os.makedirs(os.path.join(run_dir, "events"), exist_ok=True)
events = open(os.path.join(run_dir, "events", "rank%d.jsonl" % rank), "a")


def emit(kind, **fields):
    fields.update(v=1, type=kind, rank=rank, local_rank=int(os.environ["LOCAL_RANK"]),
                  node_rank=int(os.environ["GROUP_RANK"]),
                  world_size=int(os.environ["WORLD_SIZE"]), time=time.time())
    events.write(json.dumps(fields) + "\\n")
    events.flush()


dist.init_process_group("gloo")
emit("start", start_step=0, control=["stop"])
step, last, reason = 0, int(sys.argv[1]) if sys.argv[1:] else 0, "stopped"
while True:
    asked = os.path.exists(os.path.join(run_dir, "control", "stop"))
    flag = torch.tensor([float(asked)])
    dist.all_reduce(flag)
    if flag.item():
        break
    step += 1
    emit("step", step=step, loss=1.0 / step)
    if step == last:
        reason = "completed"
        break
    time.sleep(0.2)
emit("done", step=step, reason=reason)
dist.destroy_process_group()
if rank == 1:
    os._exit(1)
"""


def _crashing_at_exit(
    bed: TestBed, tmp_path: Path, hosts: Sequence[TestHost], **job: object
) -> Path:
    """A hosts file whose job is :data:`CRASHES_AT_EXIT`, with ``job``'s keys."""
    script = tmp_path / "crashes_at_exit.py"
    script.write_text(CRASHES_AT_EXIT)
    return write_hosts(bed, tmp_path, hosts, job={"script": str(script), "args": [], **job})


def test_a_stop_ends_the_launchers_that_outlive_every_rank_without_waiting_out_the_grace(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:2]
    run_id = _launch(cli, _crashing_at_exit(testbed, tmp_path, hosts, stop_grace_s=240))
    wait_for_step(testbed, hosts, run_id, 3)
    stopped = cli.run("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    said = stopped.stderr
    assert "every rank stopped on its own after checkpointing; torchrun outlived them" in said
    assert "node0: SIGTERM to" in said and "nothing of it is left running" in said
    seconds = re.search(r"stopped in ([\d.]+) s", said)
    assert seconds and float(seconds.group(1)) < 120, said
    assert not run_processes(hosts, run_id)
    assert _record(cli, run_id)["state"] == "stopped"


def test_a_completed_run_ends_the_launchers_left_waiting_for_a_node_that_crashed_on_its_way_out(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:2]
    hosts_file = _crashing_at_exit(testbed, tmp_path, hosts, args=["10"])
    began = time.monotonic()
    # Without the launchers ended, node 0's torchrun holds the run for 300 s in its exit barrier.
    done = cli.run("launch", str(hosts_file), "--headless")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    run_id = run_id_in(done.stderr)
    assert took < 120, done.stderr
    detail = _record(cli, run_id)["attempts"][-1]["detail"]
    assert detail.startswith(
        "every rank completed its training, then torchrun on node1 (node 1) exited 1: a crash on "
        "the way out, the training and its last checkpoint whole; torchrun outlived every rank "
        "on node0 (its exit barrier waits for a node that failed): ended; node0: SIGTERM to"
    ), detail
    assert not run_processes(hosts, run_id)


def test_two_resumes_at_once_start_one_supervisor_and_one_attempt(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    hosts_file = write_hosts(testbed, tmp_path, job={"checkpoint_every": 20})

    # Two resumes at once: exactly one new attempt; the other is told why.
    run_id = _launch(cli, hosts_file, *ENDLESS)
    wait_for_step(testbed, hosts, run_id, 5)
    kill_run(cli, hosts, run_id)
    resumes = [cli.start("resume", run_id, "--detach") for _ in range(2)]
    outputs = [resume.communicate(timeout=240)[0] for resume in resumes]
    codes = sorted(resume.returncode for resume in resumes)
    assert codes == [0, 1], outputs
    refused = outputs[[resume.returncode for resume in resumes].index(1)]
    assert "attempt 2 is starting already" in refused or "is running" in refused, refused
    record = _record(cli, run_id)
    assert record["state"] == "running" and len(record["attempts"]) == 2
    for host in hosts:
        assert not (host_run_dir(host, run_id) / "node" / "attempt-3.pgid").exists()
    attempts = {_attempt_of(int(line.split()[-1])) for line in run_processes(hosts, run_id)}
    assert attempts == {b"2"}, attempts

    # What the supervisor does with racing requests once they reach it (a stop that meets the
    # run's own failure, a stop asked during a launch) is walked on in-memory hosts in
    # tests/run/supervisor/test_phases.py; here only what needs real processes: two `ddptui
    # resume` commands at once, each reaching or starting the run's one supervisor.
    kill_run(cli, hosts, run_id)


def _follower_steps(output: str) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {}
    for line in output.splitlines():
        match = re.match(r"node\d rank (\d) event \| (.*)$", line)
        if match:
            event = json.loads(match.group(2))
            if event["type"] == "step":
                seen.setdefault(int(match.group(1)), []).append(event["step"])
    return seen


def _supervised(cli: Cli, run_id: str) -> int | None:
    """The pid of the run's supervisor once it is up (it writes its pid file then)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((cli.store / run_id / "supervisor.pid").read_text())
        if pid in supervisors(cli.store):
            return pid
    return None


def _printed(output: Path, step: int) -> bool:
    return all(max(steps) >= step for steps in _follower_steps(output.read_text()).values())


def _kill_supervisor(cli: Cli, run_id: str) -> int:
    pid = wait_until("the run's supervisor", lambda: _supervised(cli, run_id), 30)
    os.kill(pid, signal.SIGKILL)
    wait_until("the supervisor to die", lambda: not supervisors(cli.store), 10, every=0.05)
    return int(pid)


def _follow_into(path: Path, cli: Cli, run_id: str) -> subprocess.Popen[bytes]:
    """``logs --follow --events`` into a file: a pipe nobody reads would stop it once full."""
    with path.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ddptui", "logs", run_id, "--follow", "--events"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cli.env,
        )


def test_a_killed_or_stuck_supervisor_is_replaced_and_followers_lose_and_repeat_nothing(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    # Endless, ended by a stop: a run that completes on its own could end before the last
    # supervisor is killed (it did, on an idle machine), and then there is nothing to adopt.
    run_id = _launch(cli, write_hosts(testbed, tmp_path), *ENDLESS)
    followed = tmp_path / "first.out"
    first = _follow_into(followed, cli, run_id)
    wait_for_step(testbed, hosts, run_id, 60)
    killed = _kill_supervisor(cli, run_id)
    # The follower finds its supervisor gone, starts another and goes on where it was.
    wait_until("the follower to start another supervisor", lambda: _supervised(cli, run_id), 30)
    assert _supervised(cli, run_id) != killed
    wait_for_step(testbed, hosts, run_id, 200)
    wait_until("the follower to print step 200", lambda: _printed(followed, 200), 30)
    first.kill()
    first.wait(30)
    output = followed.read_text()
    assert f"run {run_id} had no supervisor" in output
    early = _follower_steps(output)
    assert sorted(early) == list(range(3))

    # With nobody attached, the next command finds no supervisor, starts one and says so.
    _kill_supervisor(cli, run_id)
    status = cli.run("status", run_id)
    assert f"run {run_id} had no supervisor" in status.stderr, status.stderr
    assert f"run {run_id}: running" in status.stdout, status.stdout
    # One that holds the run but does not answer (stopped) is ended and replaced, not waited on.
    stuck = wait_until("the new supervisor", lambda: _supervised(cli, run_id), 30)
    os.kill(stuck, signal.SIGSTOP)
    status = cli.run("status", run_id)
    assert f"(pid {stuck}) does not answer: ending it" in status.stderr, status.stderr
    assert f"run {run_id}: running" in status.stdout, status.stdout
    assert _supervised(cli, run_id) not in (None, stuck)
    # Listing the runs adopts a live one whose supervisor is gone, too.
    gone = _kill_supervisor(cli, run_id)
    listing = cli.run("runs")
    assert f"run {run_id} had no supervisor" in listing.stderr, listing.stderr
    wait_until("the adopted supervisor", lambda: _supervised(cli, run_id) not in (None, gone), 30)
    whole = tmp_path / "whole.out"
    second = _follow_into(whole, cli, run_id)
    wait_until("the second follower to print step 250", lambda: _printed(whole, 250), 120)
    stopped = cli.run("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert second.wait(60) == 0
    output = whole.read_text()
    assert f"run {run_id} stopped" in output
    steps = _follower_steps(output)
    # What every supervisor took, in order: each follower printed it, none of it twice (a
    # fast rank's step events are thinned on the hosts, so not every step is there).
    taken = _journal_steps(cli, run_id)
    assert sorted(steps) == sorted(taken) == list(range(3))
    for rank, printed in steps.items():
        assert printed == taken[rank] and printed[0] == 1, (rank, printed, taken[rank])
        assert printed == sorted(set(printed)) and printed[-1] >= 250
        assert early[rank] == taken[rank][: len(early[rank])] and early[rank][-1] >= 200
    assert _record(cli, run_id)["state"] == "stopped"


def _journal_steps(cli: Cli, run_id: str) -> dict[int, list[int]]:
    """Rank → the steps of its step events in the run's journal, in the order taken (its
    segments read as files: the journal's own reader would write its offsets)."""
    seen: dict[int, list[int]] = {}
    for segment in sorted(RunFiles(cli.store / run_id).journal.glob("journal-*.jsonl")):
        for raw in segment.read_bytes().splitlines():
            line = protocol.decode(raw)
            if isinstance(line, FileLine) and line.path.startswith("events/rank"):
                event = json.loads(line.text)
                if event["type"] == "step":
                    seen.setdefault(event["rank"], []).append(event["step"])
    return seen


def _followers_per_host(hosts: Sequence[TestHost], run_id: str) -> dict[str, int]:
    """How many node agents follow the run on each host (the bed shares one PID namespace)."""
    dirs = {str(host_run_dir(host, run_id)).encode(): host.name for host in hosts}
    counts = dict.fromkeys((host.name for host in hosts), 0)
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if len(argv) > 3 and argv[1:3] == [b"-", b"follow"] and argv[3] in dirs:
                counts[dirs[argv[3]]] += 1
    return counts


def test_any_number_of_viewers_cost_the_hosts_one_channel_each(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    from tests.ui.terminal import Terminal

    hosts = testbed.hosts[:3]
    hosts_file = write_hosts(testbed, tmp_path)
    run_id = _launch(cli, hosts_file, *ENDLESS)
    wait_for_step(testbed, hosts, run_id, 5)
    follower = subprocess.Popen(
        [sys.executable, "-m", "ddptui", "logs", run_id, "--follow"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=cli.env,
    )
    consoles = [Terminal(f"ddptui-viewers-{os.getpid()}-{n}") for n in range(2)]
    try:
        for console in consoles:
            state = {"XDG_STATE_HOME": cli.env["XDG_STATE_HOME"]}
            console.start([sys.executable, "-m", "ddptui", str(hosts_file)], state)
        for console in consoles:
            console.wait_for("the hosts checked", lambda t: "healthy" in t, 120)
            console.keys("R")
            console.wait_for("the runs screen", lambda t: run_id in t, 30)
            console.keys("Enter")
        for console in consoles:
            console.wait_for(
                "the run attached", lambda t: f"run {run_id}: running" in t and "step " in t, 120
            )
        time.sleep(3)
        assert _followers_per_host(hosts, run_id) == dict.fromkeys((host.name for host in hosts), 1)
        assert follower.poll() is None
    finally:
        for console in consoles:
            console.close()
        follower.kill()
        follower.wait(10)
    kill_run(cli, hosts, run_id)
