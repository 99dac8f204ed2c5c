"""A task may rename its job, or set its comment, to anything: ``x JobState=COMPLETED
NodeList=login1``. What ddptui asks Slurm of a job must read the same, as the job really is.

A fake Slurm on PATH holds one such job, as the Slurm test bed recorded it
(tests/fixtures/slurm): ``scontrol show job -o`` prints that recorded line, the forgeries
among its ``Key=value`` fields; ``squeue --Format`` prints whichever fields it is asked for, the
name and comment included if asked. The last test renames a job of the real Slurm bed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddptui.run.backends.slurm import commands
from ddptui.run.backends.slurm.commands import job_ended
from tests.testbed.slurm import PARTITION, SlurmBed

FIXTURES = Path(__file__).parents[3] / "fixtures" / "slurm"
FORGED_NAME = "x JobState=COMPLETED NodeList=login1"
FORGED_COMMENT = "c JobState=FAILED Restarts=9"

SQUEUE = """#!{python}
import sys

JOB = {{
    "jobid": "1",
    "name": {name!r},
    "comment": {comment!r},
    "state": "RUNNING",
    "restartcnt": "0",
    "exit_code": "0",
    "nodelist": "node[0-2]",
    "reason": "None",
}}
args = sys.argv[1:]
if "--jobs=1" not in args and "-j1" not in args:
    sys.exit("slurm_load_jobs error: Invalid job id specified")
spec = next(arg.split("=", 1)[1] for arg in args if arg.startswith("--Format="))
fields = []
for token in spec.split(","):
    name, _, width_and_suffix = token.partition(":")
    suffix = width_and_suffix.lstrip(".").lstrip("0123456789")
    if name.lower() not in JOB:
        sys.exit("squeue: error: Invalid job format specification: " + token)
    fields.append(JOB[name.lower()] + suffix)
if "--noheader" not in args and "-h" not in args:
    print("".join(token.split(":")[0].upper() for token in spec.split(",")))
print("".join(fields))
"""

SCONTROL = """#!{python}
import sys

if sys.argv[1:] != ["show", "job", "-o", "1"]:
    sys.exit("slurm_load_jobs error: Invalid job id specified")
sys.stdout.write(open({recorded!r}).read())
"""


@pytest.fixture
def renamed_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Job 1, running on node[0-2], renamed and commented to read as ended elsewhere."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    recorded = str(FIXTURES / "scontrol-job-renamed.txt")
    for name, program in (("squeue", SQUEUE), ("scontrol", SCONTROL)):
        path = bin_dir / name
        path.write_text(
            program.format(
                python=sys.executable, recorded=recorded, name=FORGED_NAME, comment=FORGED_COMMENT
            )
        )
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return "1"


def test_a_renamed_running_job_reads_as_running_on_its_own_nodes(renamed_job: str) -> None:
    job = commands.job(renamed_job)
    assert job is not None
    assert (job.id, job.state, job.nodes, job.restarts) == ("1", "RUNNING", "node[0-2]", 0)
    assert job.describe() == "job 1 running on node[0-2]"


def test_a_renamed_running_job_has_not_ended(renamed_job: str) -> None:
    # Ended, its nodes would be read from the login node, not through steps on them.
    assert not job_ended(renamed_job)


def test_a_job_slurm_has_forgotten_is_none(renamed_job: str) -> None:
    assert commands.job("2") is None


def test_the_slurm_bed_reads_a_renamed_running_job_as_it_is(
    slurm_bed: SlurmBed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm_bed.conf))
    submitted = slurm_bed.run(
        "sbatch",
        "--parsable",
        "--nodes=3",
        f"--partition={PARTITION}",
        f"--chdir={tmp_path}",
        "--output=/dev/null",
        "--wrap",
        "sleep 300",
    )
    job_id = submitted.stdout.strip()
    slurm_bed.wait_for_job(job_id, ["RUNNING"], 30)
    # What a task of the job may do: its owner may update its name and comment.
    slurm_bed.run("scontrol", "update", f"JobId={job_id}", f"JobName={FORGED_NAME}")
    slurm_bed.run("scontrol", "update", f"JobId={job_id}", f"Comment={FORGED_COMMENT}")
    assert (
        f"JobName={FORGED_NAME} " in slurm_bed.run("scontrol", "show", "job", "-o", job_id).stdout
    )
    job = commands.job(job_id)
    assert job is not None
    assert (job.state, job.nodes, job.restarts) == ("RUNNING", "node[0-2]", 0)
    assert not job_ended(job_id)
