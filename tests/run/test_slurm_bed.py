"""Runs through a real Slurm (the Slurm bed: 3 nodes, no sshd on them): ``ddptui launch``
submits the batch script and says the job's queue state until it runs, every node's torchrun
trains, and Slurm's warning before the time limit checkpoints and requeues the job, whose next
start resumes bit for bit."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import IO, Any

import tomli_w

from tests.run.bed import Cli, processes_marked
from tests.testbed import sshd
from tests.testbed.slurm import PARTITION, SlurmBed

NODES, PROCS = 3, 2
STEPS = 80
SMALL = ("--width", "64", "--depth", "2")
"""A model whose steps are quick on two shared cores: the bed runs six ranks at once."""


def _hosts_file(tmp_path: Path, *args: str) -> Path:
    document = {
        "cluster": {"python": sys.executable, "workdir": str(tmp_path / "shared")},
        "slurm": {"nodes": NODES, "partition": PARTITION, "time": "10"},
        "job": {"nproc_per_node": PROCS, "args": [*SMALL, *args]},
    }
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "slurm.toml"
    path.write_text(tomli_w.dumps(document))
    return path


def _slurm_cli(cli: Cli, slurm: SlurmBed) -> Cli:
    cli.env["SLURM_CONF"] = str(slurm.conf)
    return cli


def _events(run_root: Path) -> dict[int, list[dict[str, Any]]]:
    """Every rank's events, by global rank, from every node's directory."""
    found: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(run_root.glob("node*/events/rank*.jsonl")):
        rank = int(path.stem.removeprefix("rank"))
        found[rank] = [json.loads(line) for line in path.read_text().splitlines()]
    return found


def _losses(events: list[dict[str, Any]], after: int = 0) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["type"] == "step" and e["step"] > after}


def _submitted(cli: Cli, hosts_file: Path, *flags: str) -> tuple[str, Path]:
    done = cli.run("launch", str(hosts_file), *flags)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stderr.splitlines() if ": Slurm job " in line)
    job_id = line.split(": Slurm job ", 1)[1].split(";", 1)[0]
    run_root = Path(line.rsplit("its files are in ", 1)[1])
    return job_id, run_root


def _check_trained(run_root: Path, job_id: str, events: dict[int, list[dict[str, Any]]]) -> None:
    """Every rank of an uninterrupted run started in its node's directory and completed."""
    assert sorted(events) == list(range(NODES * PROCS))
    for rank, seen in events.items():
        node = rank // PROCS
        assert (run_root / f"node{node}" / "events" / f"rank{rank}.jsonl").exists()
        start = next(e for e in seen if e["type"] == "start")
        assert (start["world_size"], start["node_rank"]) == (NODES * PROCS, node)
        assert seen[-1]["type"] == "done" and seen[-1]["reason"] == "completed"
        assert max(_losses(seen)) == STEPS
    for node in range(NODES):
        assert (run_root / f"node{node}" / "node" / "attempt-1.exit").read_text() == "0\n"
    # The ranks ran the code staged for the run, not the checkout's.
    assert (run_root / "code" / "trainer" / "__main__.py").is_file()
    assert (run_root / "slurm" / "attempt-1.sh").read_text().startswith("#!/bin/bash\n")
    assert (run_root / "slurm" / f"job-{job_id}.out").exists()


def test_runs_train_through_slurm_and_its_warning_requeues_one_that_resumes_bit_for_bit(
    slurm_bed: SlurmBed, tmp_path: Path, cli: Cli
) -> None:
    cli = _slurm_cli(cli, slurm_bed)
    # Two runs at once (each node has room for both): one uninterrupted, followed until it
    # runs; one warned as a time limit nears.
    reference_id, reference = _submitted(
        cli, _hosts_file(tmp_path / "reference", "--max-steps", str(STEPS))
    )
    job_id, run_root = _submitted(
        cli, _hosts_file(tmp_path / "warned", "--max-steps", str(STEPS)), "--detach"
    )
    deadline = time.monotonic() + 180
    while max(_losses(_events(run_root).get(0, [])), default=0) < 15:
        assert time.monotonic() < deadline, "no step 15 in 180 s"
        time.sleep(0.5)
    # What --signal=B:USR1@90 sends 90 s before the time limit: to the batch script alone.
    slurm_bed.run("scancel", "--batch", "--signal=USR1", job_id)
    requeued = slurm_bed.wait_for_job(job_id, ["PENDING"], 120)
    assert requeued["Restarts"] == "1", requeued
    for job in (job_id, reference_id):
        ended = slurm_bed.wait_for_job(job, ["COMPLETED", "FAILED", "CANCELLED"], 300)
        assert ended["JobState"] == "COMPLETED", ended
    uninterrupted = _events(reference)
    _check_trained(reference, reference_id, uninterrupted)
    events = _events(run_root)
    first = events[0]
    stopped = next(e for e in first if e["type"] == "done")
    assert stopped["reason"] == "stopped" and 15 <= stopped["step"] < STEPS
    starts = [e for e in first if e["type"] == "start"]
    assert [s["start_step"] for s in starts] == [0, stopped["step"]]
    assert starts[1]["resumed_from"].endswith(f"ckpt-{stopped['step']:09d}.pt")
    for node in range(NODES):
        exits = run_root / f"node{node}" / "node"
        assert (exits / "attempt-1.exit").read_text() == (exits / "attempt-2.exit").read_text()
    for rank in range(NODES * PROCS):
        resumed = _losses(events[rank], after=stopped["step"])
        assert len(resumed) == STEPS - stopped["step"]
        assert resumed == _losses(uninterrupted[rank], after=stopped["step"]), rank
    assert not any(sshd.running(host) for host in slurm_bed.bed.hosts)


def test_a_drained_node_is_named_by_the_check_and_a_launch_needing_it_is_refused(
    slurm_bed: SlurmBed, tmp_path: Path, cli: Cli
) -> None:
    cli = _slurm_cli(cli, slurm_bed)
    hosts_file = _hosts_file(tmp_path, "--max-steps", "5")
    healthy = cli.run("check", str(hosts_file))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "healthy: partition debug, 3 of 3 nodes usable" in healthy.stdout
    slurm_bed.drain("node1", "bad_gpu_ecc")
    checked = cli.run("check", str(hosts_file))
    assert checked.returncode == 1
    assert "node1: node1 is drained in Slurm (bad_gpu_ecc)" in checked.stdout
    assert 'exclude = ["node1"] in [slurm]' in checked.stdout
    assert "[slurm] nodes = 3, but partition debug has 2 node(s) a job can get" in checked.stdout
    refused = cli.run("launch", str(hosts_file))
    assert refused.returncode == 1
    assert "not launching: the check found errors" in refused.stderr
    assert slurm_bed.run("squeue", "-h").stdout == ""
    report = cli.json("check", str(hosts_file))
    assert report["usable"] == ["node0", "node2"]
    assert [f["code"] for f in report["findings"]] == [
        "slurm_node_unavailable",
        "slurm_too_few_nodes",
    ]


def _run_processes(run_root: Path, nodes: tuple[int, ...]) -> list[int]:
    """Processes of the run on these nodes, by the node directory each has in its
    environment."""
    marks = {f"DDPTUI_RUN_DIR={run_root}/node{node}".encode() for node in nodes}
    return [pid for pid, _ in processes_marked(marks)]


def test_a_node_whose_slurmd_dies_ends_the_job_on_the_others_and_the_check_names_it(
    slurm_bed: SlurmBed, tmp_path: Path, cli: Cli
) -> None:
    cli = _slurm_cli(cli, slurm_bed)
    hosts_file = _hosts_file(tmp_path, "--max-steps", "100000")
    job_id, run_root = _submitted(cli, hosts_file, "--detach")
    deadline = time.monotonic() + 180
    while max(_losses(_events(run_root).get(0, [])), default=0) < 5:
        assert time.monotonic() < deadline, "no step 5 in 180 s"
        time.sleep(0.5)
    slurm_bed.kill_node(slurm_bed.bed.host("node1"))
    killed = time.monotonic()
    # Slurm notices the silent node (SlurmdTimeout, 10 s here) and ends the job on the others.
    while _run_processes(run_root, (0, 2)) or slurm_bed.job(job_id)["JobState"] == "RUNNING":
        assert time.monotonic() - killed < 30, (
            _run_processes(run_root, (0, 2)),
            slurm_bed.job(job_id),
        )
        time.sleep(0.5)
    checked = cli.run("check", str(hosts_file))
    assert checked.returncode == 1, checked.stdout
    assert re.search(r"node1: node1 is (down|idle)\S* in Slurm", checked.stdout), checked.stdout
    assert 'exclude = ["node1"] in [slurm]' in checked.stdout


def _read_until(stream: IO[str], said: list[str], wanted: str) -> None:
    for line in stream:
        said.append(line)
        if wanted in line:
            return
    raise AssertionError(f"never said {wanted!r}: {''.join(said)}")


def test_a_waiting_launch_says_why_and_rides_out_a_controller_restart(
    slurm_bed: SlurmBed, tmp_path: Path, cli: Cli
) -> None:
    cli = _slurm_cli(cli, slurm_bed)
    slurm_bed.drain("node1", "bad_gpu_ecc")
    hosts_file = _hosts_file(tmp_path, "--max-steps", "3")
    launcher = cli.start("launch", str(hosts_file), "--force")
    assert launcher.stdout is not None
    said: list[str] = []
    _read_until(launcher.stdout, said, "pending: a node it may use is down, drained or reserved")
    slurm_bed.stop_controller()
    _read_until(launcher.stdout, said, "; asking again in 2 s")
    slurm_bed.start_controller()
    slurm_bed.resume("node1")
    rest, _ = launcher.communicate(timeout=120)
    text = "".join(said) + rest
    assert launcher.returncode == 0, text
    assert "node1: node1 is drained in Slurm (bad_gpu_ecc)" in text
    assert re.search(r"job \d+ running on node\[0-2\]", text), text
    assert "torchrun's output on node 0:" in text
