"""Slurm's commands, run on the head (a login node): submit a run's batch script, ask after its
job. The run's workdir is shared with the nodes, so the head stages the code there itself.

:mod:`ddptui.plan.slurm` writes the script; :mod:`ddptui.run.backends.slurm.job` reads Slurm's
answers.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ddptui import layout
from ddptui.atomic import WORKDIR_DIR, WORKDIR_FILE, make_dirs, write_atomic
from ddptui.config.model import Config
from ddptui.errors import DdptuiError, UsageError
from ddptui.health.slurm import SINFO_FORMAT, SlurmCheck, SlurmNode, evaluate_slurm, parse_sinfo
from ddptui.plan.slurm import BatchPlan
from ddptui.remote.programs import agent_program
from ddptui.run.backends.slurm.job import (
    MAX_JOB_TEXT,
    NODE_NAME,
    SQUEUE_FIELDS,
    SlurmAnswerError,
    SlurmJob,
    parse_job,
    parse_job_id,
    parse_node_addresses,
    parse_sacct,
)
from ddptui.run.code.contents import CodeTree, stage_tree
from ddptui.untrusted import plain

COMMAND_TIMEOUT_S = 30.0
"""Slurm's commands answer in well under a second; a busy controller takes seconds."""
_ERROR_CHARS = 400
MAX_LIST_TEXT = 8 << 20
"""What a list of nodes may take: a line each, for the largest clusters' hundred thousand."""


class SlurmError(DdptuiError):
    """Slurm refused or did not answer; the message quotes what it said."""


def submit(plan: BatchPlan, code: CodeTree | None) -> str:
    """Stage ``code`` in the run's directory (None: a later attempt's, staged already), write
    ``plan``'s script beside it and submit it; the job's id."""
    _require("sbatch")
    root = Path(plan.run_root)
    script = Path(plan.script_path)
    try:
        make_dirs(script.parent, WORKDIR_DIR)
    except OSError as error:
        raise UsageError(
            f"cannot create {script.parent}: {error.strerror or error} (is [cluster] workdir on "
            "a filesystem this machine and the nodes share?)"
        ) from None
    if code is not None:
        stage_tree(code, Path(layout.root_code_dir(plan.run_root)))
    # Each node's step runs the node agent from the shared workdir (its `run` command).
    write_atomic(Path(layout.node_agent(plan.run_root)), agent_program(), WORKDIR_FILE)
    # Private: it exports the hosts' env, which may carry tokens.
    write_atomic(script, plan.script)
    answer = _slurm(["sbatch", "--parsable", str(script)], cwd=root)
    try:
        return parse_job_id(answer)
    except SlurmAnswerError as error:
        raise SlurmError(str(error)) from None


def job(job_id: str) -> SlurmJob | None:
    """The job as Slurm knows it now; None once Slurm has forgotten it (``MinJobAge`` after it
    ended)."""
    try:
        answer = _slurm(
            [
                "squeue",
                "--noheader",
                f"--jobs={job_id}",
                # An ended job too, while the controller remembers it: not only queued ones.
                "--states=all",
                f"--Format={SQUEUE_FIELDS}",
            ]
        )
    except SlurmError as error:
        if "Invalid job id" in str(error):
            return None
        raise
    try:
        return parse_job(answer)
    except SlurmAnswerError as error:
        raise SlurmError(str(error)) from None


def job_ended(job_id: str) -> bool:
    """Whether Slurm says job ``job_id`` no longer runs (its steps can start no more)."""
    try:
        found = job(job_id)
    except SlurmError:
        # A controller that does not answer (restarting) has not ended the job: its steps
        # still run, and whether they can be reached is for srun to say.
        return False
    return found is None or found.state != "RUNNING"


def cancel(job_id: str, signal: str | None = None) -> None:
    """``scancel`` the job; with ``signal``, send it to the job's steps instead (their tasks:
    the nodes' torchrun, which passes it on to its ranks)."""
    _slurm(["scancel", *([f"--signal={signal}"] if signal else []), job_id])


def accounted_states(job_ids: Sequence[str]) -> dict[str, str]:
    """Each job's state as Slurm's accounting has it (``sacct``), for jobs the controller has
    forgotten; :class:`SlurmError` where the site keeps no accounting."""
    answer = _slurm(
        ["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State"],
        limit=MAX_LIST_TEXT,
    )
    return parse_sacct(answer)


def hostnames(node_list: str) -> list[str]:
    """The node names of a Slurm node list (``node[0-2]``) in Slurm's order: the order of
    ``$SLURM_NODEID``."""
    answer = _slurm(["scontrol", "show", "hostnames", node_list], limit=MAX_LIST_TEXT)
    return [name for name in answer.split() if NODE_NAME.fullmatch(name)]


def addresses(names: Sequence[str]) -> dict[str, str]:
    """Each node's ``NodeAddr``, as Slurm has it (the address its batch script uses)."""
    answer = _slurm(["scontrol", "show", "node", "-o", ",".join(names)], limit=MAX_LIST_TEXT)
    return parse_node_addresses(answer)


def node_states(names: Sequence[str]) -> list[SlurmNode]:
    """``names`` as ``sinfo`` lists them now."""
    answer = _slurm(
        ["sinfo", "-h", "-N", "-n", ",".join(names), "-o", SINFO_FORMAT], limit=MAX_LIST_TEXT
    )
    return parse_sinfo(answer)


def check(config: Config) -> SlurmCheck:
    """Which nodes Slurm would give ``config``'s runs (a ``[slurm]`` config), and what stands in
    their way."""
    assert config.slurm is not None
    return evaluate_slurm(config.slurm, nodes(), node_names(config.slurm.exclude))


def nodes() -> list[SlurmNode]:
    """Every node of every partition, as ``sinfo`` lists them now."""
    return parse_sinfo(_slurm(["sinfo", "-h", "-N", "-o", SINFO_FORMAT], limit=MAX_LIST_TEXT))


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
