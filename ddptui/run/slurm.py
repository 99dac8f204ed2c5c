"""Slurm's commands, run on the head (a login node): submit a run's batch script, ask after its
job. The run's workdir is shared with the nodes, so the head stages the code there itself.

:mod:`ddptui.plan.slurm` writes the script; :mod:`ddptui.run.slurm_job` reads Slurm's answers.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ddptui.errors import DdptuiError, UsageError
from ddptui.plan.slurm import BatchPlan
from ddptui.run import layout
from ddptui.run.code import CodeTree, stage_tree
from ddptui.run.slurm_job import MAX_JOB_TEXT, SlurmAnswerError, SlurmJob, parse_job, parse_job_id
from ddptui.untrusted import plain

COMMAND_TIMEOUT_S = 30.0
"""sbatch and scontrol answer in well under a second; a busy controller takes seconds."""
_ERROR_CHARS = 400


class SlurmError(DdptuiError):
    """Slurm refused or did not answer; the message quotes what it said."""


def submit(plan: BatchPlan, code: CodeTree) -> str:
    """Stage ``code`` in the run's directory, write ``plan``'s script beside it and submit it;
    the job's id."""
    _require("sbatch")
    root = Path(plan.run_root)
    script = Path(plan.script_path)
    try:
        script.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"cannot create {script.parent}: {error.strerror or error} (is [cluster] workdir on "
            "a filesystem this machine and the nodes share?)"
        ) from None
    code_dir = Path(layout.root_code_dir(plan.run_root))
    if not code_dir.exists():
        stage_tree(code, code_dir)
    script.write_text(plan.script, encoding="utf-8")
    answer = _slurm(["sbatch", "--parsable", str(script)], cwd=root)
    try:
        return parse_job_id(answer)
    except SlurmAnswerError as error:
        raise SlurmError(str(error)) from None


def job(job_id: str) -> SlurmJob | None:
    """The job as Slurm knows it now; None once Slurm has forgotten it (``MinJobAge`` after it
    ended)."""
    try:
        answer = _slurm(["scontrol", "show", "job", "-o", job_id])
    except SlurmError as error:
        if "Invalid job id" in str(error):
            return None
        raise
    try:
        return parse_job(answer)
    except SlurmAnswerError as error:
        raise SlurmError(str(error)) from None


def _require(command: str) -> None:
    if shutil.which(command) is None:
        raise UsageError(
            f"{command} is not on PATH: run ddptui on a machine that submits Slurm jobs "
            "(a login node)"
        )


def _slurm(argv: Sequence[str], cwd: Path | None = None) -> str:
    _require(argv[0])
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:g} s (is slurmctld up?)"
        ) from None
    if done.returncode != 0:
        said = plain(done.stderr.strip()[:_ERROR_CHARS]) or f"exit status {done.returncode}"
        raise SlurmError(f"{argv[0]}: {said}")
    return done.stdout[:MAX_JOB_TEXT]
