"""Slurm's commands, run on the head (a login node): submit a run's batch script, ask after its
job. The run's workdir is shared with the nodes, so the head stages the code there itself.

:mod:`ddptui.plan.slurm` writes the script; :mod:`ddptui.run.slurm_job` reads Slurm's answers.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ddptui.config.model import Config
from ddptui.errors import DdptuiError, UsageError
from ddptui.health.slurm import SlurmCheck, SlurmNode, evaluate_slurm, parse_sinfo
from ddptui.plan.slurm import BatchPlan
from ddptui.run import layout
from ddptui.run.code import CodeTree, stage_tree
from ddptui.run.slurm_job import MAX_JOB_TEXT, SlurmAnswerError, SlurmJob, parse_job, parse_job_id
from ddptui.untrusted import plain

COMMAND_TIMEOUT_S = 30.0
"""sbatch and scontrol answer in well under a second; a busy controller takes seconds."""
_ERROR_CHARS = 400
MAX_LIST_TEXT = 8 << 20
"""What a list of nodes may take: a line each, for the largest clusters' hundred thousand."""


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
    stage_tree(code, Path(layout.root_code_dir(plan.run_root)))
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


def check(config: Config) -> SlurmCheck:
    """Which nodes Slurm would give ``config``'s runs (a ``[slurm]`` config), and what stands in
    their way."""
    assert config.slurm is not None
    return evaluate_slurm(config.slurm, nodes(), node_names(config.slurm.exclude))


def nodes() -> list[SlurmNode]:
    """Every node of every partition, as ``sinfo`` lists them now."""
    return parse_sinfo(_slurm(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%E"], limit=MAX_LIST_TEXT))


def node_names(expressions: Sequence[str]) -> set[str]:
    """The node names that Slurm node lists (``gpu[07-09]``) stand for."""
    if not expressions:
        return set()
    answer = _slurm(["scontrol", "show", "hostnames", ",".join(expressions)], limit=MAX_LIST_TEXT)
    return {name for name in answer.split() if name}


def _require(command: str) -> None:
    if shutil.which(command) is None:
        raise UsageError(
            f"{command} is not on PATH: run ddptui on a machine that submits Slurm jobs "
            "(a login node)"
        )


def _slurm(argv: Sequence[str], cwd: Path | None = None, limit: int = MAX_JOB_TEXT) -> str:
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
    return done.stdout[:limit]
