"""Runs through a real Slurm (the Slurm bed: 3 nodes, no sshd on them), owned by ddptui as SSH
runs are: ``ddptui launch`` submits the batch script and says the job's queue state until it
runs; its supervisor follows every rank through ``srun`` steps; ``ddptui stop`` and ``ddptui
resume`` end it and start it again as a new job, and Slurm's warning before the time limit
checkpoints and requeues the job, whose next start is the run's next attempt. Both resume bit
for bit."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import queue
import re
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import tomli_w

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from ddptui.run.evidence import kept as kept_dump
from ddptui.run.record import RunRecord, RunState
from tests.run.bed import PACED, Cli, held_until_asked_to_stop, processes_marked
from tests.testbed import sshd
from tests.testbed.cluster import BED_TORCH_IMPORT_TIMEOUT_S
from tests.testbed.slurm import PARTITION, SlurmBed

NODES, PROCS = 3, 2
# Past the step (15) where the interrupted runs are held until asked to stop, and no more: each
# step is paid three times over, by three runs at once on two cores.
STEPS = 150
SMALL = ("--width", "64", "--depth", "2", *PACED)
"""A model whose steps are quick on two shared cores, paced: the bed runs 18 ranks at once."""


def _hosts_file(tmp_path: Path, *args: str) -> Path:
    document = {
        "cluster": {
            "python": sys.executable,
            "workdir": str(tmp_path / "shared"),
            "torch_import_timeout": BED_TORCH_IMPORT_TIMEOUT_S,
        },
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


def _submitted(cli: Cli, hosts_file: Path) -> tuple[str, str, Path]:
    """A run launched with --detach: its id, its first job's and its files."""
    done = cli.run("launch", str(hosts_file), "--detach")
    assert done.returncode == 0, done.stderr
    said = re.search(r": Slurm job (\d+); its files are in (/\S+)\. ", done.stderr)
    assert said is not None, done.stderr
    return done.stdout.strip(), said.group(1), Path(said.group(2))


def _wait_state(cli: Cli, run_id: str, states: set[str], timeout: float) -> dict[str, Any]:
    return cli.status_once(
        f"the run {' or '.join(sorted(states))}",
        run_id,
        lambda run: run.state.value in states,
        timeout,
    )


def _wait_step(run_root: Path, step: int, timeout: float = 180) -> None:
    """Until rank 0 has written a step event past ``step``."""
    deadline = time.monotonic() + timeout
    while max(_losses(_events(run_root).get(0, [])), default=0) < step:
        assert time.monotonic() < deadline, f"no step {step} in {timeout:g} s"
        time.sleep(0.3)


def _check_trained(run_root: Path, events: dict[int, list[dict[str, Any]]]) -> None:
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


def _check_resumed(
    run_root: Path, uninterrupted: dict[int, list[dict[str, Any]]], attempts: int
) -> None:
    """Rank 0 stopped once with a checkpoint and its next attempt resumed from it; after the
    stop every rank's losses equal the uninterrupted run's, bit for bit."""
    events = _events(run_root)
    stopped = next(e for e in events[0] if e["type"] == "done")
    assert stopped["reason"] == "stopped" and 15 <= stopped["step"] < STEPS
    starts = [e for e in events[0] if e["type"] == "start"]
    assert [s["start_step"] for s in starts] == [0, stopped["step"]]
    assert starts[1]["resumed_from"].endswith(f"ckpt-{stopped['step']:09d}.pt")
    for node in range(NODES):
        exits = run_root / f"node{node}" / "node"
        assert (exits / "attempt-1.exit").read_text() == "0\n"
        assert (exits / f"attempt-{attempts}.exit").read_text() == "0\n"
    for rank in range(NODES * PROCS):
        resumed = _losses(events[rank], after=stopped["step"])
        assert len(resumed) == STEPS - stopped["step"]
        assert resumed == _losses(uninterrupted[rank], after=stopped["step"]), rank


def test_runs_are_followed_stopped_and_resumed_through_slurm_bit_for_bit(
    slurm_bed: SlurmBed, tmp_path: Path, cli: Cli
) -> None:
    cli = _slurm_cli(cli, slurm_bed)
    # Three runs at once (each node has room for all): one uninterrupted; one stopped and
    # resumed with ddptui; one warned by Slurm as its time limit nears.
    reference_id, _, reference = _submitted(
        cli, _hosts_file(tmp_path / "reference", "--max-steps", str(STEPS))
    )
    stopped_id, first_job, stopped_root = _submitted(
        cli, _hosts_file(tmp_path / "stopped", "--max-steps", str(STEPS))
    )
    warned_id, warned_job, warned_root = _submitted(
        cli, _hosts_file(tmp_path / "warned", "--max-steps", str(STEPS))
    )
    with contextlib.ExitStack() as held:
        for run_root in (stopped_root, warned_root):
            _wait_step(run_root, 15)
            nodes = [run_root / f"node{node}" for node in range(NODES)]
            held.enter_context(held_until_asked_to_stop(nodes, NODES * PROCS))
        # What --signal=B:USR1@90 sends 90 s before the time limit: to the batch script alone.
        slurm_bed.run("scancel", "--batch", "--signal=USR1", warned_job)
        stopping = cli.start("stop", stopped_id)
    said, _ = stopping.communicate(timeout=240)
    assert stopping.returncode == 0, said
    assert "every node stopped on its own after checkpointing" in said
    assert slurm_bed.job(first_job)["JobState"] == "COMPLETED"

    resumed = cli.run("resume", stopped_id)
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(r"attempt 2: Slurm job (\d+)", resumed.stderr), resumed.stderr
    # The check inside the new allocation: the probe on every node, through srun.
    assert "checking the allocation's 3 node(s) (the probe on each, through srun)" in resumed.stderr
    assert re.search(r"the allocation's nodes(: nothing to report| can run it)", resumed.stderr)
    record = tomllib.loads((cli.store / stopped_id / "run.toml").read_text())
    torch_version = importlib.metadata.version("torch")
    assert [node["versions"]["torch"] for node in record["nodes"]] == [torch_version] * NODES
    for run_id in (reference_id, stopped_id, warned_id):
        ended = _wait_state(cli, run_id, {"completed", "failed", "stopped"}, 300)
        assert ended["state"] == "completed", (run_id, ended)
    uninterrupted = _events(reference)
    _check_trained(reference, uninterrupted)
    _check_resumed(stopped_root, uninterrupted, attempts=2)
    _check_resumed(warned_root, uninterrupted, attempts=2)

    stopped = cli.json("status", stopped_id, "--json")
    jobs = [attempt["scheduler"]["job"] for attempt in stopped["attempts"]]
    assert jobs[0] == first_job and jobs[1] not in (None, first_job), stopped["attempts"]
    warned = cli.json("status", warned_id, "--json")
    assert [a["scheduler"]["job"] for a in warned["attempts"]] == [warned_job, warned_job]
    assert [a["outcome"] for a in warned["attempts"]] == ["stopped", "completed"]
    assert "Slurm requeued job" in warned["attempts"][0]["detail"]
    # The run's files, read back once its jobs have ended: every rank's steps of both attempts.
    logs = cli.run("logs", stopped_id, "--events")
    assert logs.returncode == 0, logs.stderr
    stepped: dict[int, set[int]] = {}
    for line in logs.stdout.splitlines():
        said = re.match(r"node\d rank (\d) event \| (.*)$", line)
        if said and json.loads(said.group(2))["type"] == "step":
            stepped.setdefault(int(said.group(1)), set()).add(json.loads(said.group(2))["step"])
    assert stepped == {rank: set(range(1, STEPS + 1)) for rank in range(NODES * PROCS)}
    listed = {run["id"]: run for run in cli.json("runs", "--json")}
    assert [job["job"] for job in listed[stopped_id]["scheduler_jobs"]] == jobs
    assert listed[stopped_id]["scheduler_jobs"][-1]["state"] == "COMPLETED"
    table = cli.run("runs").stdout
    assert re.search(rf"{stopped_id} +completed .*jobs {first_job}, {jobs[1]} ", table), table
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


def test_a_node_whose_slurmd_dies_fails_the_run_naming_it_and_the_check_names_it(
    slurm_bed: SlurmBed, tmp_path: Path, cli: Cli
) -> None:
    cli = _slurm_cli(cli, slurm_bed)
    hosts_file = _hosts_file(tmp_path, "--max-steps", "100000")
    run_id, job_id, run_root = _submitted(cli, hosts_file)
    _wait_step(run_root, 5)
    # Every rank's loss, followed live through srun steps.
    live = cli.json("status", run_id, "--json")
    assert live["state"] == "running", live
    assert [node["host"] for node in live["nodes"]] == ["node0", "node1", "node2"]
    assert all(node["alive"] for node in live["nodes"]), live["nodes"]
    assert [rank["rank"] for rank in live["ranks"]] == list(range(NODES * PROCS))
    assert all(isinstance(rank["loss"], float) for rank in live["ranks"]), live["ranks"]
    # Every rank's stacks, through srun steps and the handler the batch script put in place.
    dumped = cli.run("dump", run_id)
    assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    saved = Path(dumped.stdout.splitlines()[-1].rpartition(": ")[2])
    names = [f"node{node}.txt" for node in range(NODES)] + [kept_dump.STACKS_INDEX]
    assert sorted(path.name for path in saved.iterdir()) == names, dumped.stdout
    kept = {stack.rank: stack.text for stack in kept_dump.load(saved).stacks}
    assert sorted(kept) == list(range(NODES * PROCS))
    assert "most recent call first" in kept[2]
    slurm_bed.kill_node(slurm_bed.bed.host("node1"))
    killed = time.monotonic()
    # Slurm notices the silent node (SlurmdTimeout, 10 s here) and ends the job on the others;
    # the run's supervisor says so, naming the node.
    failed = _wait_state(cli, run_id, {"failed", "stopped", "completed"}, 30)
    assert time.monotonic() - killed < 30
    assert failed["state"] == "failed", failed
    assert re.search(r"Slurm lost node1 \(down\S*: Not responding\)", failed["detail"]), failed
    while _run_processes(run_root, (0, 2)):
        assert time.monotonic() - killed < 30, _run_processes(run_root, (0, 2))
        time.sleep(0.5)
    # The job Slurm requeued after the node failed was cancelled: it never starts again. Slurm
    # shows it COMPLETING until the dead node's part is given up, then CANCELLED (a requeue
    # would show it PENDING or RUNNING instead, and time out here).
    slurm_bed.wait_for_job(job_id, ["CANCELLED"], 30)
    checked = cli.run("check", str(hosts_file))
    assert checked.returncode == 1, checked.stdout
    assert re.search(r"node1: node1 is (down|idle)\S* in Slurm", checked.stdout), checked.stdout
    assert 'exclude = ["node1"] in [slurm]' in checked.stdout


class _Lines:
    """A process's output lines, read by a thread of their own so that waiting for one can
    give up (a launch that waits for good would hold the test until pytest's timeout)."""

    def __init__(self, stream: IO[str]) -> None:
        self.said: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def until(self, wanted: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.said.append(line)
            if wanted in line:
                return
        raise AssertionError(f"never said {wanted!r}: {''.join(self.said)}")

    def rest(self) -> str:
        lines = []
        while (line := self._lines.get(timeout=120)) is not None:
            lines.append(line)
        return "".join(lines)


def test_a_waiting_launch_says_why_and_rides_out_a_controller_restart(
    slurm_bed: SlurmBed, tmp_path: Path, cli: Cli
) -> None:
    cli = _slurm_cli(cli, slurm_bed)
    slurm_bed.drain("node1", "bad_gpu_ecc")
    hosts_file = _hosts_file(tmp_path, "--max-steps", "3")
    launcher = cli.start("launch", str(hosts_file), "--force")
    assert launcher.stdout is not None
    lines = _Lines(launcher.stdout)
    lines.until("pending: a node it may use is down, drained or reserved")
    slurm_bed.stop_controller()
    lines.until("; asking again in 2 s")
    slurm_bed.start_controller()
    slurm_bed.resume("node1")
    text = "".join(lines.said) + lines.rest()
    launcher.wait(timeout=120)
    assert launcher.returncode == 0, text
    assert "node1: node1 is drained in Slurm (bad_gpu_ecc)" in text
    assert re.search(r"job \d+ running on node\[0-2\]", text), text
    assert "completed: every node exited 0" in text


def test_a_node_whose_slurmd_dies_is_set_aside_and_the_run_resumes_on_the_spare_node(
    slurm_bed: SlurmBed, tmp_path: Path, cli: Cli
) -> None:
    cli = _slurm_cli(cli, slurm_bed)
    # Paced, 1,500 steps take 75 s: the run still trains when Slurm notices the node is gone
    # (its slurmd silent for SlurmdTimeout, 10 s).
    steps = 1500
    path = _hosts_file(tmp_path, "--max-steps", str(steps), "--checkpoint-every", "10")
    document = tomllib.loads(path.read_text())
    document["slurm"] |= {"nodes": 2, "spare_nodes": 1}
    document["recovery"] = {"mode": "resume"}
    path.write_text(tomli_w.dumps(document))
    run_id, job_id, run_root = _submitted(cli, path)
    assert slurm_bed.job(job_id)["NumNodes"] in ("3", "3-3")
    _wait_step(run_root, 25)
    slurm_bed.kill_node(slurm_bed.bed.host("node1"))

    # Slurm takes the silent node out of the job's allocation, not the job away: recovery
    # blames the node Slurm lost and runs the next attempt on the spare, node ranks kept.
    def resumed(run: RunRecord) -> bool:
        gave_up = [each for each in run.incidents if "not recovered" in each.action]
        assert not gave_up and run.state is not RunState.COMPLETED, run.to_toml()
        return run.state is RunState.RUNNING and len(run.attempts) >= 2

    status = cli.status_once("the run resumed on the spare node", run_id, resumed, 150)
    assert [node["host"] for node in status["nodes"]] == ["node0", "node2"]
    (incident,) = status["incidents"]
    assert incident["blamed"] == ["node1"], incident
    assert "the scheduler lost node1 (" in incident["why"], incident
    assert incident["action"] == "resuming on node2 in place of node1", incident
    assert incident["resumed_attempt"] == 2
    assert [aside["host"] for aside in status["set_aside"]] == ["node1"]
    assert [a["scheduler"] for a in status["attempts"]] == [
        {"job": job_id, "state": None, "in_allocation": False},
        {"job": job_id, "state": None, "in_allocation": True},
    ]
    ended = _wait_state(cli, run_id, {"completed", "failed", "stopped"}, 300)
    assert ended["state"] == "completed", ended
    # One job throughout: Slurm ran the run's second attempt in the first's allocation.
    assert slurm_bed.job(job_id)["JobState"] == "COMPLETED"
    events = _events(run_root)
    assert sorted(events) == [0, 1, 2, 3]
    for rank, seen in events.items():
        starts = [e for e in seen if e["type"] == "start"]
        assert [s["node_rank"] for s in starts] == [rank // PROCS] * 2, rank
        resumed_from = starts[1]["start_step"]
        assert resumed_from >= 20, starts
        first = [e for e in seen[: seen.index(starts[1])] if e["type"] == "step"]
        again = [e for e in seen[seen.index(starts[1]) :] if e["type"] == "step"]
        # The steps redone from the checkpoint (none where the ranks checkpointed as Slurm
        # ended their step) give the first attempt's losses, bit for bit.
        before = {e["step"]: e["loss"] for e in first if e["step"] > resumed_from}
        after = {e["step"]: e["loss"] for e in again}
        assert min(after) == resumed_from + 1, rank
        assert all(after[step] == loss for step, loss in before.items()), rank
        assert max(after) == steps and seen[-1]["type"] == "done", rank
    assert (run_root / "slurm" / "attempt-2.nodes").read_text() == "node0 node2\n"
    (incident,) = cli.json("status", run_id, "--json")["incidents"]
    assert incident["checkpoint_step"] == resumed_from, incident
    assert incident["steps_redone"] == incident["last_step"] - resumed_from, incident
