"""What Slurm says of a job, read from its real answers (tests/fixtures/slurm) and from
answers it never gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.plan.slurm import master_port
from ddptui.run.backends.slurm.job import (
    SlurmAnswerError,
    SlurmJob,
    parse_job,
    parse_job_id,
    parse_node_addresses,
    parse_sacct,
    reason_words,
)
from ddptui.run.record import SchedulerJob

FIXTURES = Path(__file__).parents[3] / "fixtures" / "slurm"


def _recorded(name: str) -> SlurmJob:
    return parse_job((FIXTURES / f"squeue-job-{name}.txt").read_text())


def test_a_running_job_names_its_nodes_and_not_what_a_task_renamed_it_to() -> None:
    job = _recorded("running")
    assert (job.id, job.state, job.reason, job.nodes, job.restarts) == (
        "1",
        "RUNNING",
        None,
        "node[0-2]",
        0,
    )
    assert not job.ended and not job.pending
    assert job.describe() == "job 1 running on node[0-2]"


def test_scontrol_s_line_of_a_renamed_job_is_not_taken_for_squeue_s() -> None:
    with pytest.raises(SlurmAnswerError):
        parse_job((FIXTURES / "scontrol-job-renamed.txt").read_text())


def test_a_completed_job_has_ended_cleanly() -> None:
    job = _recorded("completed")
    assert job.ended and job.state == "COMPLETED" and job.exit_code == "0:0"
    assert job.describe() == "job 2 completed on node[0-2]"


def test_a_run_s_record_keeps_how_slurm_ended_a_job_and_nothing_of_one_that_goes_on() -> None:
    assert _recorded("completed").scheduler_job == SchedulerJob("2", "COMPLETED")
    assert _recorded("running").scheduler_job == SchedulerJob("1")
    assert _recorded("requeued").scheduler_job == SchedulerJob("1")


def test_a_requeued_job_counts_its_restart() -> None:
    job = _recorded("requeued")
    assert (job.state, job.restarts, job.nodes) == ("PENDING", 1, None)
    assert (
        job.describe()
        == "job 1 pending: its start time has not come (a requeued job waits a little) (BeginTime)"
    )


def test_a_pending_job_says_why_in_plain_words() -> None:
    job = _recorded("pending")
    assert job.pending and job.nodes is None
    assert job.describe() == (
        "job 5 pending: Nodes required for job are DOWN, DRAINED or reserved for jobs in higher "
        "priority partitions"
    )
    # squeue writes the reason's spaces, scontrol writes them as "_".
    for reason in (
        "ReqNodeNotAvail, UnavailableNodes:node1",
        "ReqNodeNotAvail,_UnavailableNodes:n1",
    ):
        assert reason_words(reason).startswith(
            "a node it may use is down, drained or reserved (ReqNodeNotAvail: UnavailableNodes:n"
        )
    assert reason_words("Priority") == "other jobs come first (Priority)"
    assert reason_words("launch failed requeued held") == (
        "it failed to start and is held (launch failed requeued held)"
    )


def test_a_failed_job_gives_its_exit_code_as_scontrol_and_sacct_write_it() -> None:
    assert _recorded("failed").describe() == (
        "job 3 failed: NonZeroExitCode on node0, exit code 3:0"
    )
    assert _recorded("killed").describe() == (
        "job 4 failed: JobLaunchFailure on node0, exit code 0:9"
    )
    assert parse_job("7|FAILED|0|-2|n1|None").exit_code is None


@pytest.mark.parametrize("answer", ["42\n", "42;cluster-a\n", "7_3"])
def test_sbatch_s_parsable_answer_is_the_job_id(answer: str) -> None:
    assert parse_job_id(answer) == answer.strip().split(";")[0]


@pytest.mark.parametrize("answer", ["", "Submitted batch job 42", "42\n43", "\x1b[31m42"])
def test_anything_else_from_sbatch_is_refused_without_its_escapes(answer: str) -> None:
    with pytest.raises(SlurmAnswerError) as raised:
        parse_job_id(answer)
    assert "\x1b" not in str(raised.value)


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "JobId=1 JobState=RUNNING",
        "1|RUNNING",
        "x|RUNNING|0|0|n1|None",
        "1|running|0|0|n1|None",
        "1|RUNNING|many|0|n1|None",
        "1|RUNNING|0|0|n 1|None",
        "1|\x1b[2J|0|0|n1|None",
        "\x1b[31m1|RUNNING|0|0|n1|None",
    ],
)
def test_anything_else_from_squeue_is_refused_without_its_escapes(answer: str) -> None:
    with pytest.raises(SlurmAnswerError) as raised:
        parse_job(answer)
    assert "\x1b" not in str(raised.value)


def test_node_addresses_are_read_field_by_field_and_odd_names_are_left_out() -> None:
    answer = (
        "NodeName=node0 Arch=x86_64 CPUTot=4 NodeAddr=10.213.0.10 NodeHostName=ddpx-node0\n"
        "NodeName=gpu07 NodeAddr=gpu07-ib\n"
        "NodeName=bad\x1b[2J NodeAddr=10.0.0.9\n"
        "NodeName=node3 NodeAddr=$(reboot)\n"
        "garbage\n"
    )
    assert parse_node_addresses(answer) == {"node0": "10.213.0.10", "gpu07": "gpu07-ib"}


def test_a_job_s_master_port_is_what_its_batch_script_derives() -> None:
    assert master_port("4") == 15004
    assert master_port("15004") == 15004
    assert master_port("123_7") == 15123


def test_sacct_s_states_are_read_per_job_and_odd_lines_skipped() -> None:
    answer = "41|COMPLETED\n43|CANCELLED by 0\n44_2|NODE_FAIL\nbatch|COMPLETED\n45|\x1b[31mX\n"
    assert parse_sacct(answer) == {"41": "COMPLETED", "43": "CANCELLED", "44_2": "NODE_FAIL"}
