"""Runs that heal themselves, on the test bed: three nodes in the run and a spare, recovery
on, the run followed by its supervisor alone (detached). A rank killed on one node: the
supervisor blames that node, sets it aside, resumes on the spare, and the run completes, its
incident recorded and told to ``notify``. A fault in the code is not a node's: no recovery."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from ddptui.layout import RunFiles
from ddptui.run.record import RunState
from tests.run.bed import (
    RUN_ID,
    Cli,
    host_run_dir,
    kill_supervisors,
    run_pid,
    run_processes,
    steps_of,
    wait_for_step,
    wait_until,
    write_hosts,
)
from tests.testbed import TestBed, TestHost, kill_whole, link_cut
from tests.trainer.launch import alive

# A group of their own, so that xdist can run them beside the other beds' (each worker
# brings its own bed up, in a tenth of a second).
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("recovery-bed")]

NOTIFY = """
import pathlib, sys
pathlib.Path(sys.argv[1]).open("a").write(sys.stdin.read())
"""
"""``[recovery] notify``: appends the incident's document to the file it is given."""


def _recovering_hosts_file(
    testbed: TestBed, tmp_path: Path, told: Path, job: dict[str, object] | None = None
) -> Path:
    script = tmp_path / "notify.py"
    script.write_text(NOTIFY)
    path = write_hosts(
        testbed,
        tmp_path,
        testbed.hosts[:4],
        job=job or {},
        host_overrides={testbed.hosts[3].name: {"spare": True}},
    )
    notify = json.dumps([sys.executable, str(script), str(told)])
    path.write_text(path.read_text() + f'\n[recovery]\nmode = "resume"\nnotify = {notify}\n')
    return path


BUGGY = """
import time
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(1000):
    dist.barrier()
    time.sleep(0.05)
    if step == 10:
        raise RuntimeError("a bug at step 10, on every rank")
"""
"""A user's script with a bug every rank meets at the same step."""


STEPS = ("--max-steps", "120", "--checkpoint-every", "20")
"""Each run's length: long enough to be past step 30 before its fault, short enough to be
waited for to its end."""


@pytest.fixture(scope="module")
def fault_free(testbed: TestBed, tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    """Every rank's last loss in a run of :data:`STEPS` on the bed's first three hosts with no
    fault: what a recovered run's must equal, bit for bit, its world size unchanged."""
    tmp_path = tmp_path_factory.mktemp("fault-free")
    cli = Cli(tmp_path / "state")
    run_id = _launched(cli, _recovering_hosts_file(testbed, tmp_path, tmp_path / "told"), *STEPS)
    try:
        wait_until(
            "the fault-free run", lambda: cli.record(run_id).state is RunState.COMPLETED, 180
        )
    finally:
        kill_supervisors(cli.store)
    return _final_losses(testbed, testbed.hosts[:3], run_id)


def _past_step_30(
    testbed: TestBed, tmp_path: Path, cli: Cli, job: dict[str, object] | None = None
) -> str:
    """A run of the trainer for :data:`STEPS` on the bed's first three hosts, the fourth its
    spare: launched detached, and past step 30 on every node."""
    hosts_file = _recovering_hosts_file(testbed, tmp_path, tmp_path / "told.jsonl", job=job)
    run_id = _launched(cli, hosts_file, *STEPS)
    wait_for_step(testbed, testbed.hosts[:3], run_id, 30)
    return run_id


def _resumed_on_the_spare(cli: Cli, run_id: str) -> dict[str, Any]:
    return cli.status_once(
        "the run resumed on the spare",
        run_id,
        lambda run: run.state is RunState.RUNNING and len(run.attempts) == 2,
        180,
    )


ENDED = (RunState.COMPLETED, RunState.FAILED)


def _ended_on_its_second_attempt(cli: Cli, run_id: str) -> dict[str, Any]:
    return cli.status_once(
        "the run's second attempt ended",
        run_id,
        lambda run: run.state in ENDED and len(run.attempts) == 2,
        300,
    )


def _assert_completed(cli: Cli, run_id: str, done: dict[str, Any]) -> None:
    """That the run completed; else the whole record and its supervisor's log, which say why."""
    if done["state"] != "completed":
        log = RunFiles(cli.store / run_id).supervisor_log
        told = log.read_text()[-8000:] if log.exists() else "(no supervisor log)"
        raise AssertionError(f"{json.dumps(done, indent=1)}\n--- supervisor.log ---\n{told}")


def _launched(cli: Cli, hosts_file: Path, *args: str) -> str:
    launched = cli.run("launch", str(hosts_file), "--detach", "--", *args)
    assert launched.returncode == 0, launched.stderr
    found = RUN_ID.search(launched.stderr)
    assert found, launched.stderr
    return found.group(1)


def test_a_rank_killed_on_one_node_is_recovered_on_the_spare_and_the_run_completes(
    testbed: TestBed, tmp_path: Path, cli: Cli, fault_free: dict[int, float]
) -> None:
    told = tmp_path / "told.jsonl"
    hosts_file = _recovering_hosts_file(testbed, tmp_path, told)
    node0, node1, node2, spare = testbed.hosts[:4]
    run_id = _launched(cli, hosts_file, *STEPS)
    wait_for_step(testbed, [node0, node1, node2], run_id, 30)
    assert not run_processes([spare], run_id), "the spare runs nothing until it is needed"

    rank_0 = run_pid(node0, run_id, b"LOCAL_RANK=0", b"trainer")
    os.kill(run_pid(node1, run_id, b"LOCAL_RANK=0", b"trainer"), signal.SIGKILL)
    # Rank 0's collective fails with the peer's connection: it writes a rescue checkpoint of
    # the last step it finished (none when a periodic one holds that step), the attempt's last
    # on node 0. The newest damaged once rank 0 has ended (a disk that filled, a copy cut
    # short): the resume passes over it to the one before.
    wait_until("rank 0 ended", lambda: not alive(rank_0), 60)
    checkpoints = host_run_dir(node0, run_id) / "checkpoints"
    *_, before, newest = sorted(checkpoints.glob("ckpt-*.pt"))
    with newest.open("r+b") as damaged:
        damaged.truncate(newest.stat().st_size // 2)
    recovered = _resumed_on_the_spare(cli, run_id)
    assert [node["host"] for node in recovered["nodes"]] == [node0.name, spare.name, node2.name]
    done = cli.status_once("the run ended", run_id, lambda run: run.state in ENDED, 300)
    _assert_completed(cli, run_id, done)
    (incident,) = done["incidents"]
    assert incident["blamed"] == [node1.name], incident
    assert f"rank 1 on {node1.name}" in incident["cause"] or node1.name in incident["cause"]
    assert incident["action"] == f"resuming on {spare.name} in place of {node1.name}"
    assert incident["resumed_attempt"] == 2
    assert incident["first_step_at"] is not None and incident["checkpoint_step"] is not None
    assert incident["steps_redone"] is not None and incident["steps_redone"] >= 0
    step = int(before.stem.removeprefix("ckpt-"))
    assert incident["checkpoint_step"] == step, (incident, newest)
    starts = (host_run_dir(node0, run_id) / "events" / "rank0.jsonl").read_text().splitlines()
    (resumed,) = [start for line in starts if (start := json.loads(line)).get("resumed_from")]
    assert [skipped["path"] for skipped in resumed["skipped_checkpoints"]] == [str(newest)]
    assert [aside["host"] for aside in done["set_aside"]] == [node1.name]
    documents = [json.loads(line) for line in told.read_text().splitlines()]
    assert [document["incident"]["number"] for document in documents] == [1]
    assert done["incidents"][0]["notified"] == "ok"
    assert not run_processes(testbed.hosts[:4], run_id)
    # The world size never changed: the resume from the checkpoint repeats the steps after it
    # as they were, to the last step's loss on every rank, bit for bit.
    assert _final_losses(testbed, [node0, spare, node2], run_id) == fault_free


def test_a_rank_killed_on_node_0_is_recovered_on_the_spare_which_takes_its_checkpoints(
    testbed: TestBed, tmp_path: Path, cli: Cli, fault_free: dict[int, float]
) -> None:
    node0, node1, node2, spare = testbed.hosts[:4]
    run_id = _past_step_30(testbed, tmp_path, cli)

    os.kill(run_pid(node0, run_id, b"LOCAL_RANK=0", b"trainer"), signal.SIGKILL)
    done = _ended_on_its_second_attempt(cli, run_id)
    _assert_completed(cli, run_id, done)
    (incident,) = done["incidents"]
    assert incident["blamed"] == [node0.name], incident
    assert incident["action"] == f"resuming on {spare.name} in place of {node0.name}"
    # The spare is node 0 now, the rendezvous with it, and it resumed from the checkpoint
    # node 0 held (rank 0, killed, alone kept them), handed to it before the resume.
    assert [node["host"] for node in done["nodes"]] == [spare.name, node1.name, node2.name]
    assert done["master_addr"] == spare.address
    assert incident["checkpoint_step"] is not None and incident["checkpoint_step"] >= 20
    assert list((host_run_dir(spare, run_id) / "checkpoints").glob("ckpt-*.pt"))
    assert not run_processes(testbed.hosts[:4], run_id)
    assert _final_losses(testbed, [spare, node1, node2], run_id) == fault_free


def _final_losses(testbed: TestBed, hosts: list[TestHost], run_id: str) -> dict[int, float]:
    return {rank: events[-1]["loss"] for rank, events in steps_of(testbed, hosts, run_id).items()}


def test_a_rank_stopped_on_one_node_hangs_the_run_which_is_recovered_on_the_spare(
    testbed: TestBed, tmp_path: Path, cli: Cli, fault_free: dict[int, float]
) -> None:
    node0, node1, node2, spare = testbed.hosts[:4]
    run_id = _past_step_30(testbed, tmp_path, cli, job={"hang_timeout_s": 10})

    # SIGSTOP: the rank holds every other up in its next collective, and never says why.
    os.kill(run_pid(node1, run_id, b"LOCAL_RANK=0", b"trainer"), signal.SIGSTOP)
    done = _ended_on_its_second_attempt(cli, run_id)
    _assert_completed(cli, run_id, done)
    (incident,) = done["incidents"]
    assert incident["blamed"] == [node1.name], incident
    assert incident["cause"].startswith("hung: no step for"), incident
    assert f"rank 1 on {node1.name}: its process is stopped" in incident["why"]
    assert incident["action"] == f"resuming on {spare.name} in place of {node1.name}"
    assert [node["host"] for node in done["nodes"]] == [node0.name, spare.name, node2.name]
    assert not run_processes(testbed.hosts[:4], run_id)
    assert _final_losses(testbed, [node0, spare, node2], run_id) == fault_free


def test_a_fault_in_the_code_is_no_node_s_and_is_not_recovered(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    told = tmp_path / "told.jsonl"
    script = tmp_path / "buggy.py"
    script.write_text(BUGGY)
    hosts_file = _recovering_hosts_file(
        testbed, tmp_path, told, job={"script": str(script), "args": []}
    )
    run_id = _launched(cli, hosts_file)
    # The failure is recorded first (status says failed at once); recovery's word on it, the
    # incident, once the others are ended and the last lines taken.
    done = cli.status_once(
        "the run failed and recovery's word on it",
        run_id,
        lambda run: run.state is RunState.FAILED and run.incidents and run.incidents[-1].action,
        180,
    )
    assert len(done["attempts"]) == 1, done
    (incident,) = done["incidents"]
    assert incident["blamed"] == []
    assert incident["action"].startswith("not recovered: your code raised "), incident
    assert "RuntimeError: a bug at step 10, on every rank" in incident["action"], incident
    assert incident["action"].endswith("no host is to blame, and it would fail the same on any")
    assert done["set_aside"] == []
    assert not run_processes(testbed.hosts[:4], run_id)


def test_with_no_spare_left_the_run_goes_on_with_fewer_nodes_seeing_each_sample_once(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    node0, node1, node2 = testbed.hosts[:3]
    hosts_file = write_hosts(testbed, tmp_path, [node0, node1, node2])
    hosts_file.write_text(hosts_file.read_text() + '\n[recovery]\nmode = "resume"\nmin_nodes = 2\n')
    # Three epochs of 42 steps (2,048 samples, a global batch of 3 × 16): the fault lands in
    # one, past a checkpoint that is not at an epoch's end.
    steps = ("--max-steps", "126", "--checkpoint-every", "10", "--log-samples")
    run_id = _launched(cli, hosts_file, *steps)
    wait_for_step(testbed, [node0, node1, node2], run_id, 12)

    os.kill(run_pid(node1, run_id, b"LOCAL_RANK=0", b"trainer"), signal.SIGKILL)
    done = _ended_on_its_second_attempt(cli, run_id)
    _assert_completed(cli, run_id, done)
    assert [(node["host"], node["node_rank"]) for node in done["nodes"]] == [
        (node0.name, 0),
        (node2.name, 1),
    ]
    (incident,) = done["incidents"]
    assert incident["blamed"] == [node1.name], incident
    assert incident["action"] == f"resuming on 2 node(s), without {node1.name}"
    assert [aside["host"] for aside in done["set_aside"]] == [node1.name]

    first, resumed = _attempts(testbed, [node0, node1, node2], run_id)
    assert resumed["start"][0]["global_batch"] == first["start"][0]["global_batch"] == 48
    since = resumed["start"][0]["start_step"]
    kept = [step for step in first["steps"] if step["step"] <= since] + resumed["steps"]
    # The resume starts from the survivors' rescue, at the last step they finished; the killed
    # rank's events of its last steps (written every 0.25 s) went with it, 16 samples a step.
    logged = {step["step"] for step in kept if step["rank"] == 1 and step["step"] <= since}
    unlogged = set(range(1, since + 1)) - logged
    assert not unlogged or unlogged == set(range(min(unlogged), since + 1)), unlogged
    by_step: dict[int, list[int]] = {}
    for step in kept:
        by_step.setdefault(step["step"], []).extend(step["samples"])
    assert sorted(by_step) == list(range(1, 127))
    assert all(len(by_step[step]) == (32 if step in unlogged else 48) for step in by_step)
    for epoch in (0, 1, 2):
        seen = [index for step in kept if step["epoch"] == epoch for index in step["samples"]]
        lost = 16 * sum(1 for step in unlogged if _epoch_of(kept, step) == epoch)
        assert len(seen) == len(set(seen)) == 42 * 48 - lost, f"epoch {epoch}"
    # The loss goes on from where the checkpoint left it (the trainer's own tests pin the
    # steps after it to the fault-free ones).
    before = _losses(first, since)
    after = _losses(resumed, since + 1)
    assert len(before) == (2 if since in unlogged else 3) and len(after) == 2
    mean = sum(before) / len(before)
    assert mean / 3 < sum(after) / 2 < mean * 3, (before, after)
    assert sum(_losses(resumed, 126)) < sum(_losses(first, 1)) / 10
    # A torchrun that outlived its ranks is ended once the run is judged completed: soon after.
    wait_until("nothing of the run left", lambda: not run_processes(testbed.hosts[:3], run_id), 30)


def _epoch_of(steps: list[dict[str, Any]], number: int) -> int:
    """The epoch step ``number`` belongs to, as the ranks that logged it say."""
    return next(step["epoch"] for step in steps if step["step"] == number)


def _attempts(
    testbed: TestBed, hosts: list[TestHost], run_id: str
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The start and step events of a run's two attempts, every host's, in one list each (a
    host's events of one rank may be another's in the next attempt: told by the start)."""
    attempts: list[dict[str, list[dict[str, Any]]]] = [
        {"start": [], "steps": []},
        {"start": [], "steps": []},
    ]
    for host in hosts:
        for path in (host_run_dir(host, run_id) / "events").glob("rank*.jsonl"):
            attempt = 0
            for line in path.read_text().splitlines():
                event = json.loads(line)
                if event["type"] == "start":
                    attempt = 0 if event["resumed_from"] is None else 1
                    attempts[attempt]["start"].append(event)
                elif event["type"] == "step":
                    attempts[attempt]["steps"].append(event)
    return attempts[0], attempts[1]


def _losses(attempt: dict[str, list[dict[str, Any]]], number: int) -> list[float]:
    return [step["loss"] for step in attempt["steps"] if step["step"] == number]


def test_a_host_cut_off_is_replaced_by_the_spare_and_its_leftovers_ended_once_it_answers(
    testbed: TestBed, tmp_path: Path, cli: Cli, fault_free: dict[int, float]
) -> None:
    node0, node1, node2, spare = testbed.hosts[:4]
    run_id = _past_step_30(testbed, tmp_path, cli)

    with link_cut(node1):
        recovered = _resumed_on_the_spare(cli, run_id)
        (aside,) = recovered["set_aside"]
        assert aside["host"] == node1.name and aside["leftovers"], aside
        # Cut off, its ranks live on: nothing could reach them.
        assert run_processes([node1], run_id)
    (incident,) = recovered["incidents"]
    assert incident["blamed"] == [node1.name] and "stopped answering" in incident["why"]
    assert [node["host"] for node in recovered["nodes"]] == [node0.name, spare.name, node2.name]

    # The link mended, the supervisor's sweep ends what the run left there, whether the run
    # has ended by then or not: the supervisor outlives it for that.
    done = _ended_on_its_second_attempt(cli, run_id)
    _assert_completed(cli, run_id, done)
    wait_until(
        "the set-aside host's leftovers ended",
        lambda: not cli.record(run_id).set_aside[0].leftovers,
        90,
    )
    assert not run_processes(testbed.hosts[:4], run_id)
    assert _final_losses(testbed, [node0, spare, node2], run_id) == fault_free


@pytest.mark.parametrize("killed", [1, 0], ids=["node-1", "node-0"])
def test_a_host_killed_whole_is_replaced_by_the_spare_and_the_run_completes(
    testbed: TestBed, tmp_path: Path, cli: Cli, fault_free: dict[int, float], killed: int
) -> None:
    spare, host = testbed.hosts[3], testbed.hosts[killed]
    run_id = _past_step_30(testbed, tmp_path, cli)

    # Every process of the host, its sshd too: a host that died under the run, node 0 with
    # every checkpoint it held. The others' collectives fail as its ranks go, and each node's
    # rank writes a rescue of the last step it finished.
    kill_whole(host)
    done = _ended_on_its_second_attempt(cli, run_id)
    _assert_completed(cli, run_id, done)
    (incident,) = done["incidents"]
    # Its peers say no more than that they lost one; it refuses SSH when they are ended. On a
    # loaded machine its silence may be judged first: the same host, blamed for it.
    assert incident["blamed"] == [host.name], incident
    assert f"{host.name} could not be reached when the run failed" in incident["why"] or (
        f"{host.name} stopped answering" in incident["why"]
        and "refused the connection" in incident["why"]
    ), incident
    assert incident["action"] == f"resuming on {spare.name} in place of {host.name}"
    placed = [spare if node == killed else testbed.hosts[node] for node in range(3)]
    assert [node["host"] for node in done["nodes"]] == [node.name for node in placed]
    if killed == 0:
        assert done["master_addr"] == spare.address
        rescues = [
            path
            for other in testbed.hosts[1:3]
            for path in (host_run_dir(other, run_id) / "checkpoints").glob("ckpt-*.pt")
        ]
        newest = max(int(path.stem.removeprefix("ckpt-")) for path in rescues)
        assert incident["checkpoint_step"] == newest > 30, (incident, rescues)
        told = RunFiles(cli.store / run_id).supervisor_log.read_text()
        assert f"node 0 does not answer: copied the checkpoint of step {newest} " in told
    assert not run_processes(testbed.hosts[:4], run_id)
    assert _final_losses(testbed, placed, run_id) == fault_free
