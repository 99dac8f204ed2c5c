"""Runs end to end on the test bed: 3 hosts × 1 process (2 where several per host are the point),
gloo on CPU, real sshd and torchrun.

Every test drives the real command line in a subprocess (as users do), with its own run store
(``XDG_STATE_HOME``), and reads what the trainer wrote on the hosts to judge the outcome.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from tests.fixtures.gpu import H200_IDLE_SAMPLE, nvidia_smi_double
from tests.run.bed import (
    RUN_ID,
    SMALL,
    Cli,
    held_until_asked_to_stop,
    host_run_dir,
    launch_and_wait,
    run_id_in,
    run_pid,
    run_processes,
    steps_of,
    wait_for_step,
    wait_until,
    write_hosts,
)
from tests.testbed import (
    TestBed,
    TestHost,
    cut_head_link,
    install_double,
    occupy_port,
    open_firewall,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_launch_runs_to_completion_as_dry_run_said(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts_file = write_hosts(testbed, tmp_path, job={"nproc_per_node": 2})
    dry = cli.run("launch", str(hosts_file), "--dry-run", "--", "--max-steps", "40")
    assert dry.returncode == 0, dry.stderr
    assert "stands" not in dry.stderr
    launched = cli.run("launch", str(hosts_file), "--headless", "--", "--max-steps", "40")
    assert launched.returncode == 0, launched.stdout + launched.stderr
    run_id = run_id_in(launched.stderr)
    assert "completed" in launched.stderr
    # The dry run's check, seconds old, stood for the launch's; asked, a launch checks again.
    assert re.search(r"the check of \d+ s ago stands \(3 hosts healthy", launched.stderr)
    rechecked = cli.run("launch", str(hosts_file), "--dry-run", "--recheck")
    assert rechecked.returncode == 0 and "stands" not in rechecked.stderr, rechecked.stderr

    steps = steps_of(testbed, testbed.hosts[:3], run_id)
    assert sorted(steps) == list(range(6))
    for events in steps.values():
        assert [event["step"] for event in events] == list(range(1, 41))
        assert sum(e["loss"] for e in events[-3:]) < sum(e["loss"] for e in events[:3]) / 5

    status = cli.json("status", run_id)
    assert status["state"] == "completed"
    assert [rank["step"] for rank in status["ranks"]] == [40] * 6
    # Stopping a run that ended only makes sure nothing is left; it keeps its outcome.
    late = cli.run("stop", run_id)
    assert late.returncode == 0 and f"run {run_id} stays completed" in late.stderr
    runs = cli.json("runs")
    assert [(run["id"], run["state"]) for run in runs] == [(run_id, "completed")]

    # What ran is what --dry-run printed, but for the run id it made up.
    record = tomllib.loads((cli.store / run_id / "run.toml").read_text())
    lines = dry.stdout.splitlines()
    exports = [shlex.split(line) for line in lines if line.startswith("export ")]
    commands = [shlex.split(line) for line in lines if line.startswith("exec ")]
    dry_id = run_id_in(dry.stdout)
    assert len(exports) == len(commands) == 3
    for export, command, node in zip(exports, commands, record["nodes"], strict=True):
        assert command[1:] == [arg.replace(run_id, dry_id) for arg in node["argv"]]
        env = [f"{name}={value.replace(run_id, dry_id)}" for name, value in node["env"].items()]
        assert export[1:] == env
    assert not run_processes(testbed.hosts[:3], run_id)


def _losses(steps: Mapping[int, list[dict[str, Any]]]) -> dict[tuple[int, int], float]:
    return {
        (rank, event["step"]): event["loss"] for rank, events in steps.items() for event in events
    }


def test_stop_then_resume_repeats_the_uninterrupted_losses_bit_for_bit(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    hosts_file = write_hosts(testbed, tmp_path, job={"checkpoint_every": 40})
    # The ranks are held from step 40 until the stop is asked: however long it takes to land,
    # the run cannot end first, which would prove nothing about resuming.
    last = 150
    total = ["--", "--max-steps", str(last)]
    straight = cli.run("launch", str(hosts_file), "--headless", *total)
    assert straight.returncode == 0, straight.stderr
    expected = _losses(steps_of(testbed, hosts, run_id_in(straight.stderr)))
    assert len(expected) == 3 * last

    # Checked again (the last launch's check could stand): every stage of a launch is timed.
    began = time.time()
    started = cli.run("launch", str(hosts_file), "--detach", "--recheck", *total)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_for_step(testbed, hosts, run_id, 40)
    nodes = [host_run_dir(host, run_id) for host in hosts]
    with held_until_asked_to_stop(nodes, len(hosts)):
        _the_timeline_adds_up_to_the_launch(cli, testbed, hosts, run_id, began)
        stopping = cli.start("stop", run_id)
    said, _ = stopping.communicate(timeout=240)
    assert stopping.returncode == 0, said
    assert "stopped on its own after checkpointing" in said
    assert not run_processes(hosts, run_id)
    status = cli.run("status", run_id)
    assert status.returncode == 3, status.stdout + status.stderr
    assert f"run {run_id}: stopped" in status.stdout
    stop_step = max(events[-1]["step"] for events in steps_of(testbed, hosts, run_id).values())
    assert stop_step < last

    resumed_at = time.time()
    resumed = cli.run("resume", run_id, "--headless")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    steps = steps_of(testbed, hosts, run_id)
    for events in steps.values():
        # Every step once: the resume starts right after the stop's checkpoint.
        assert [event["step"] for event in events] == list(range(1, last + 1))
    assert _losses(steps) == expected
    runs = {run["id"]: run for run in cli.json("runs")}
    assert runs[run_id]["state"] == "completed" and runs[run_id]["attempts"] == 2
    # A resume's launch has no check and no staging; it begins with the command, and its
    # ranks' stages are its own.
    resume = cli.json("status", run_id)["launch"]
    assert resume["attempt"] == 2
    for host in resume["hosts"]:
        assert [stage["stage"] for stage in host["stages"]] == ["checking", *RANK_STAGES]
    measured = (
        max(
            next(event["time"] for event in events if event["step"] > stop_step)
            for events in steps.values()
        )
        - resumed_at
    )
    assert abs(resume["first_step_s"] - measured) <= 0.1 * measured, (resume, measured)


RANK_STAGES = ["started", "spawned", "imported", "rendezvous", "ready", "first_step"]


def _the_timeline_adds_up_to_the_launch(
    cli: Cli, bed: TestBed, hosts: Sequence[TestHost], run_id: str, began: float
) -> None:
    """Every host's launch stages are in ``status --json``, in order, and the first step they
    add up to is the one the ranks' events show, measured from before ``ddptui launch``, within
    10%."""
    first_steps = [events[0]["time"] for events in steps_of(bed, hosts, run_id).values()]
    measured = max(first_steps) - began
    # The record is the supervisor's: it learns of the first steps through its followers,
    # which may be a moment behind the files the ranks write here.
    launch = wait_until(
        "the first step in the record",
        lambda: (
            (found := cli.json("status", run_id)["launch"])["first_step_s"] is not None and found
        ),
        60,
    )
    assert launch["attempt"] == 1
    assert abs(launch["first_step_s"] - measured) <= 0.1 * measured, (launch, measured)
    check = ["checking", "connected", "probed", "checked", "staged"]
    for host in launch["hosts"]:
        stages = host["stages"]
        assert [stage["stage"] for stage in stages] == check + RANK_STAGES, host
        total = sum(stage["took_s"] for stage in stages)
        assert total == pytest.approx(stages[-1]["at_s"], abs=0.01)
    assert launch["summary"].startswith(f"first step in {launch['first_step_s']:.1f} s; slowest: ")


def test_a_killed_launcher_leaves_the_run_going_and_logs_reattach(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    hosts_file = write_hosts(testbed, tmp_path)
    launcher = cli.start("launch", str(hosts_file), "--headless", "--", "--max-steps", "250")
    assert launcher.stdout is not None
    run_id = None
    for line in launcher.stdout:
        match = RUN_ID.search(line)
        if match and "is running" in line:
            run_id = match.group(1)
            break
    assert run_id is not None
    wait_for_step(testbed, hosts, run_id, 10)
    launcher.kill()
    launcher.wait(timeout=10)
    status = cli.json("status", run_id)
    assert status["state"] == "running"
    assert all(node["alive"] for node in status["nodes"])

    follow = cli.run("logs", run_id, "--follow", "--events")
    assert follow.returncode == 0, follow.stderr
    # Followed live, a fast rank's steps come thinned, its first and last among them, each once.
    seen = _steps_printed(follow.stdout)
    assert sorted(seen) == list(range(3))
    for steps in seen.values():
        assert steps[0] == 1 and steps[-1] == 250 and steps == sorted(set(steps)), steps
    final = cli.json("status", run_id)
    assert final["state"] == "completed"
    # Read back from the hosts once it is over: every step of every rank.
    logs = cli.run("logs", run_id, "--events")
    assert logs.returncode == 0, logs.stderr
    assert _steps_printed(logs.stdout) == {rank: list(range(1, 251)) for rank in range(3)}


def _steps_printed(printed: str) -> dict[int, list[int]]:
    """Rank → the steps of the step events ``logs --events`` printed of it, in order."""
    seen: dict[int, list[int]] = {}
    for line in printed.splitlines():
        match = re.match(r"node\d rank (\d) event \| (.*)$", line)
        if match:
            event = json.loads(match.group(2))
            if event["type"] == "step":
                seen.setdefault(int(match.group(1)), []).append(event["step"])
    return seen


def test_the_run_outlives_the_head_node_losing_its_hosts_and_following_picks_up_again(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    launcher, run_id, lines = launch_and_wait(cli, write_hosts(testbed, tmp_path), testbed)
    assert launcher.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(launcher.stdout or ()), daemon=True)
    reader.start()

    def node2_steps() -> int:
        return max(event["step"] for event in steps_of(testbed, hosts[2:], run_id)[2])

    try:
        # Only the head node loses node2; the hosts still reach each other.
        cut_head_link(hosts[2], testbed.gateway)
        before = node2_steps()
        time.sleep(20)
        assert launcher.poll() is None, "".join(lines)
        assert node2_steps() > before, "node2 stopped training"
        open_firewall(hosts[2])
        # Now the head node loses every host: nothing can tell how the run fares.
        for host in hosts:
            cut_head_link(host, testbed.gateway)
        time.sleep(20)
        assert launcher.poll() is None, "".join(lines)
    finally:
        for host in hosts:
            open_firewall(host)
    wait_for_step(testbed, hosts, run_id, node2_steps() + 20)
    time.sleep(4)
    stopped = cli.run("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert launcher.wait(60) == 3
    reader.join(10)
    output = "".join(lines)
    assert "node2: not answering: no answer for" in output
    assert "its peers keep stepping, so it still trains" in output
    assert "the head node's own network?" in output
    assert "node2: answering again" in output and f"run {run_id} failed" not in output, output
    record = tomllib.loads((cli.store / run_id / "run.toml").read_text())
    assert [change["state"] for change in record["states"]][-2:] == ["stopping", "stopped"]
    assert not run_processes(hosts, run_id)


def test_a_killed_rank_or_torchrun_fails_the_run_naming_node_rank_and_cause(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    hosts_file = write_hosts(testbed, tmp_path)

    # The OOM killer's way: one worker (global rank 1, node1's only one) dies of SIGKILL.
    launcher, run_id, lines = launch_and_wait(cli, hosts_file, testbed)
    os.kill(run_pid(hosts[1], run_id, b"LOCAL_RANK=0", b"trainer"), signal.SIGKILL)
    rest, _ = launcher.communicate(timeout=120)
    output = "".join(lines) + rest
    assert launcher.returncode == 1, output
    assert f"run {run_id} failed: torchrun on node1 (node 1) exited 1" in output
    assert "first failure: rank 1 on node1 (killed_by_signal)" in output
    assert not run_processes(hosts, run_id)

    # torchrun itself killed: its node is named with the signal.
    launcher, run_id, lines = launch_and_wait(cli, hosts_file, testbed)
    os.kill(run_pid(hosts[2], run_id, b"torch.distributed.run", b"-m"), signal.SIGKILL)
    rest, _ = launcher.communicate(timeout=120)
    output = "".join(lines) + rest
    assert launcher.returncode == 1, output
    assert "torchrun on node2 (node 2) was killed by SIGKILL (exit 137)" in output
    assert not run_processes(hosts, run_id)


def test_auto_master_port_avoids_a_taken_port_and_a_fixed_taken_port_is_refused(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:2]
    with occupy_port(hosts[0], 29500):
        auto = write_hosts(testbed, tmp_path, hosts, cluster={"master_port": "auto"})
        done = cli.run("launch", str(auto), "--headless", "--", "--max-steps", "5")
        assert done.returncode == 0, done.stderr
        port = re.search(r"master port (\d+)", done.stderr)
        assert port and int(port.group(1)) != 29500

        fixed = write_hosts(testbed, tmp_path, hosts, cluster={"master_port": 29500})
        refused = cli.run("launch", str(fixed), "--headless", "--force", "--", "--max-steps", "5")
        assert refused.returncode == 1
        assert "port 29500 is not free" in refused.stderr
        assert len(list((hosts[0].workdir / "runs").iterdir())) == 1


def test_hostile_values_never_run_as_shell_on_any_host(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:2]
    marker = tmp_path / "pwned"
    payloads = [
        f"; touch {marker}",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"' ; touch {marker} ; '",
        f'" ; touch {marker} ; "',
        f"&& touch {marker} #",
    ]
    # A real workdir whose path is itself a payload (a name cannot hold "/", so it touches a
    # relative name, wherever a shell would run it): it reaches every command on the host.
    workdir = hosts[1].workdir / "x$(touch ddptui-pwned);'y\"`touch ddptui-pwned`"
    workdir.mkdir()
    hosts_file = testbed.write_hosts_file(
        tmp_path / "hosts.toml",
        hosts,
        cluster={"env": {f"V{i}": value for i, value in enumerate(payloads)}},
        host_overrides={"node1": {"workdir": str(workdir)}},
        job={"nproc_per_node": 1, "args": [*SMALL, "--max-steps", "3"]},
    )
    dry = cli.run("launch", str(hosts_file), "--dry-run", "--", "--seed", payloads[1])
    assert dry.returncode == 0, dry.stderr
    done = cli.run("launch", str(hosts_file), "--headless")
    assert done.returncode == 0, done.stderr
    run_id = run_id_in(done.stderr)
    assert (workdir / "runs" / run_id / "node1" / "events" / "rank1.jsonl").is_file()
    # Trainer arguments reach argparse untouched: payloads there are refused, not run (all at
    # once: each passes through every command line the same way).
    refused = cli.run("launch", str(hosts_file), "--headless", "--", "--data", *payloads)
    assert refused.returncode == 1, refused.stderr
    assert "unrecognized arguments" in cli.run("logs", run_id_in(refused.stderr)).stdout
    # A newline in a value is refused before anything is sent anywhere.
    newline = testbed.write_hosts_file(
        tmp_path / "newline.toml", hosts, cluster={"env": {"V": f"\ntouch {marker}\n"}}
    )
    bad = cli.run("launch", str(newline), "--headless")
    assert bad.returncode == 2 and "control characters" in bad.stderr
    assert not marker.exists()
    for root in (testbed.root, tmp_path, Path.cwd()):
        assert not list(root.rglob("ddptui-pwned"))


def test_one_host_cluster_launches_completes_and_samples_its_gpu(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    # The recorded H200 stands in for the GPU hardware, at nvidia-smi's boundary only.
    install_double(testbed.hosts[0], "nvidia-smi", nvidia_smi_double("h200_idle"))
    hosts_file = write_hosts(
        testbed,
        tmp_path,
        testbed.hosts[:1],
        cluster={"backend": "gloo", "gpus": 0},
        job={"nproc_per_node": 2},
    )
    dry = cli.run("launch", str(hosts_file), "--dry-run")
    assert "--master-addr=127.0.0.1" in dry.stdout and "GLOO_SOCKET_IFNAME" not in dry.stdout
    done = cli.run("launch", str(hosts_file), "--headless", "--", "--max-steps", "20")
    assert done.returncode == 0, done.stderr
    run_id = run_id_in(done.stderr)
    assert len(steps_of(testbed, testbed.hosts[:1], run_id)) == 2
    (node,) = cli.json("status", run_id)["nodes"]
    # nvidia-smi's printed values, typed; the console draws its bars and sparklines from them.
    assert node["sample"]["gpus"] == [H200_IDLE_SAMPLE]


USER_SCRIPT = """\
import os, signal, sys, time
import datautils
from pkg.greet import GREETING
rank = int(os.environ["RANK"])
with open("configs/greeting.txt") as greeting:
    said = greeting.read().strip()
print(f"hello from rank {rank}: {datautils.NAME}, {GREETING}, {said}", flush=True)
if rank == 1:
    print("user script warning: about to wait", file=sys.stderr, flush=True)
def leave(*_):
    print(f"rank {rank} got SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, leave)
step = 0
while True:
    step += 1
    # What Hugging Face's Trainer prints, and no step events.
    print({"loss": round(1 / step + rank / 100, 4), "epoch": step / 10}, flush=True)
    time.sleep(0.2)
"""
GREETING = "datautils here, package here, configs here"
PROJECT = {
    "multinode.py": USER_SCRIPT,
    "datautils.py": "NAME = 'datautils here'\n",
    "pkg/__init__.py": "",
    "pkg/greet.py": "GREETING = 'package here'\n",
    "pkg/main.py": (
        "import datautils\nfrom pkg.greet import GREETING\n"
        "print(f'module run: {datautils.NAME}, {GREETING}', flush=True)\n"
    ),
    "configs/greeting.txt": "configs here\n",
    ".gitignore": "data/\n",
    "data/train.bin": "x" * 100_000,
}


def test_a_user_project_on_a_shared_workdir_launches_stops_and_resumes(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    # A project as users have them: the script imports its sibling and a package and reads a
    # config file relative to itself; a data set is in .gitignore. The hosts' sshd offers no
    # SFTP, and they share their workdir, as hosts with an NFS home do.
    shared = {"workdir": str(tmp_path / "nfs-home" / "ddptui-runs")}
    project = tmp_path / "ddp-series"
    for name, text in PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    uploaded = {name: text for name, text in PROJECT.items() if not name.startswith("data/")}
    size = sum(len(text.encode()) for text in uploaded.values())
    overrides = {host.name: shared for host in hosts}
    job = {"script": str(project / "multinode.py"), "args": []}
    hosts_file = write_hosts(testbed, tmp_path, hosts, job=job, host_overrides=overrides)
    checked = cli.run("check", str(hosts_file), "--json")
    assert checked.returncode == 0, checked.stderr
    assert sorted(_hosts_with_code(checked.stdout)) == [host.name for host in hosts]
    planned = cli.run("launch", str(hosts_file), "--dry-run")
    assert planned.returncode == 0, planned.stderr
    summary = f"uploads {len(uploaded)} file(s), {size:,} bytes from {project}"
    assert summary in planned.stdout, planned.stdout
    assert "data/" not in planned.stdout
    started = cli.run("launch", str(hosts_file), "--detach")
    assert started.returncode == 0, started.stderr
    assert f"staging {len(uploaded)} file(s), {size:,} bytes, on 3 host(s)" in started.stderr
    # Staged once for the hosts sharing the workdir: the others found it in place.
    assert "found it staged by a host sharing the workdir" in started.stderr
    run_id = started.stdout.strip()
    logs = _wait_for_greetings(cli, run_id, 3)
    assert "node1 rank 1 stderr (attempt 1) | user script warning: about to wait" in logs
    # Per-rank loss from what the script prints.
    status = json.loads(cli.run("status", run_id, "--json").stdout)
    assert all(rank["loss"] is not None and rank["state"] == "running" for rank in status["ranks"])
    stopped = cli.run("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert "SIGTERM to" in stopped.stderr
    assert not run_processes(hosts, run_id)
    after = cli.run("logs", run_id, "--rank", "2")
    assert "rank 2 got SIGTERM" in after.stdout
    assert "rank 0:" not in after.stdout
    # One code directory, each node's files its own although the directory is shared:
    # attempt 2 starts.
    runs = tmp_path / "nfs-home" / "ddptui-runs" / "runs" / run_id
    assert sorted(path.name for path in runs.iterdir()) == ["code", "node0", "node1", "node2"]
    resumed = cli.run("resume", run_id, "--detach")
    assert resumed.returncode == 0, resumed.stderr
    assert "node2 rank 2 stdout (attempt 2) | hello" in _wait_for_greetings(cli, run_id, 6)
    assert cli.run("stop", run_id).returncode == 0
    assert not run_processes(hosts, run_id)
    # The same project's package as a module: run from the uploaded directory.
    job = {"module": "pkg.main", "dir": str(project), "args": []}
    hosts_file = write_hosts(testbed, tmp_path, hosts, job=job, host_overrides=overrides)
    done = cli.run("launch", str(hosts_file), "--headless")
    assert done.returncode == 0, done.stderr
    module_logs = cli.run("logs", run_id_in(done.stderr)).stdout
    assert module_logs.count("module run: datautils here, package here") == 3, module_logs


def _hosts_with_code(report: str, code: str = "workdir_shared") -> list[str]:
    return [f["host"] for f in json.loads(report)["findings"] if f["code"] == code]


def _wait_for_greetings(cli: Cli, run_id: str, count: int) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        logs = cli.run("logs", run_id).stdout
        if logs.count(GREETING) == count:
            return logs
        time.sleep(1)
    raise AssertionError(f"not {count} greetings in the logs:\n{logs}")


SNAPSHOT_SCRIPT = """\
import os, signal, sys, time
rank = int(os.environ["RANK"])
# The pattern of the DDP tutorials: rank 0 saves a snapshot where it runs; every rank loads it
# if it is there.
epoch = int(open("snapshot.pt").read()) + 1 if os.path.exists("snapshot.pt") else 0
print(f"rank {rank} first epoch {epoch}", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    if rank == 0:
        with open("snapshot.tmp", "w") as snapshot:
            snapshot.write(str(epoch))
        os.replace("snapshot.tmp", "snapshot.pt")
    print(f"rank {rank} epoch {epoch} loss {1 / (epoch + 1):.4f}", flush=True)
    epoch += 1
    time.sleep(0.3)
"""


def test_rank_0_s_snapshot_reaches_every_node_on_resume_with_checkpoint_files(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    hosts = testbed.hosts[:3]
    script = tmp_path / "snapshots" / "train.py"
    script.parent.mkdir()
    script.write_text(SNAPSHOT_SCRIPT)
    job = {"script": str(script), "args": [], "checkpoint_files": ["snapshot.pt"]}
    run_id = _detached(cli, write_hosts(testbed, tmp_path, hosts, job=job))
    _wait_for_lines(cli, run_id, "rank 0 epoch 3 ")
    assert cli.run("stop", run_id).returncode == 0
    node0 = json.loads(cli.run("status", run_id, "--json").stdout)["nodes"][0]
    saved = int((Path(node0["run_dir"]).parent / "code" / "snapshot.pt").read_text())
    resumed = cli.run("resume", run_id, "--detach")
    assert resumed.returncode == 0, resumed.stderr
    size = len(str(saved))
    assert f"copied snapshot.pt ({size} bytes) from {hosts[0].name} to " in resumed.stderr
    logs = _wait_for_lines(cli, run_id, "first epoch", count=6)
    firsts = re.findall(r"\(attempt 2\) \| rank (\d) first epoch (\d+)", logs)
    assert sorted(firsts) == [(str(rank), str(saved + 1)) for rank in range(3)], logs
    assert cli.run("stop", run_id).returncode == 0
    # A name that matches nothing on any node: the resume is refused in one line, exit 2.
    job["checkpoint_files"] = ["snapshots/*.pt"]
    run_id = _detached(cli, write_hosts(testbed, tmp_path, hosts, job=job))
    assert cli.run("stop", run_id).returncode == 0
    refused = cli.run("resume", run_id)
    assert refused.returncode == 2, refused.stderr
    assert "[job] checkpoint_files: 'snapshots/*.pt' matches no file on any node" in (
        refused.stderr
    )
    assert not run_processes(hosts, run_id)
    # Without the key, the resume says what will diverge before it starts anything.
    del job["checkpoint_files"]
    run_id = _detached(cli, write_hosts(testbed, tmp_path, hosts, job=job))
    _wait_for_lines(cli, run_id, "rank 0 epoch 1 ")
    assert cli.run("stop", run_id).returncode == 0
    warned = cli.run("resume", run_id, "--detach")
    assert warned.returncode == 0, warned.stderr
    warning = (
        "warning: snapshot.pt exist(s) on node 0 only: the other ranks would start from scratch. "
        'Set [job] checkpoint_files = ["snapshot.pt"] to copy it on resume'
    )
    assert warning in warned.stderr
    assert warned.stderr.index(warning) < warned.stderr.index("starting attempt 2")
    assert cli.run("stop", run_id).returncode == 0


def _detached(cli: Cli, hosts_file: Path) -> str:
    started = cli.run("launch", str(hosts_file), "--detach")
    assert started.returncode == 0, started.stderr
    return started.stdout.strip()


def _wait_for_lines(cli: Cli, run_id: str, text: str, count: int = 1) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        logs = cli.run("logs", run_id).stdout
        if logs.count(text) >= count:
            return logs
        time.sleep(1)
    raise AssertionError(f"not {count} of {text!r} in the logs:\n{logs}")
