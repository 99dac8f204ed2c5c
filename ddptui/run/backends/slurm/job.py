"""What Slurm says of a job (pure): ``sbatch --parsable`` and ``squeue`` parsed, and the
queue's reasons in plain words.

Slurm's commands run on the head, but their text is still read defensively: capped, matched
field by field, and shown only through :func:`ddptui.untrusted.plain`. A job's own words (its
name, its comment) are never asked for: a task in the job may set them to anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddptui.run.record import SchedulerJob
from ddptui.untrusted import plain, whole

MAX_JOB_TEXT = 64 * 1024
"""What a Slurm command may print of a job: ``squeue``'s line is a hundred characters or so."""
_JOB_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?", re.ASCII)
_STATE = re.compile(r"[A-Z][A-Z_]{0,31}", re.ASCII)
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
"""A node name as Slurm prints one; anything else in its answers is not used as one."""
_ADDRESS = re.compile(r"[A-Za-z0-9:.%_-]{1,255}", re.ASCII)
SQUEUE_FIELDS = "JobId:|,State:|,RestartCnt:|,exit_code:|,NodeList:|,Reason:"
"""What ``squeue --Format`` prints of a job: each field whole (no size after its ``:``) and
ended by ``|``. Only fields Slurm sets itself, the one free text (the reason) last. Not the
name: ``scontrol show job`` prints it among the ``Key=value`` fields, so a task that renamed
its job ``x JobState=COMPLETED NodeList=login1`` (or set such a comment) made a running job
read as ended on the login node; here nothing a task writes is printed at all."""
_FIELDS = re.compile(
    rf"(?P<id>{_JOB_ID.pattern})\|(?P<state>{_STATE.pattern})\|(?P<restarts>[0-9]{{1,9}})\|"
    r"(?P<exit_status>-?[0-9]{1,10})\|(?P<nodes>[^|\s]*)\|(?P<reason>[^\n]*)",
    re.ASCII,
)
"""A job's line as :data:`SQUEUE_FIELDS` asks for it."""

ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
"""States after which the job runs no more (unless requeued: it is then PENDING again)."""

REASONS: dict[str, str] = {
    "Priority": "other jobs come first",
    "Resources": "waiting for free nodes",
    "ReqNodeNotAvail": "a node it may use is down, drained or reserved",
    "BeginTime": "its start time has not come (a requeued job waits a little)",
    "Dependency": "waiting for another job",
    "DependencyNeverSatisfied": "a job it depends on failed: it will never start",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows",
    "PartitionTimeLimit": "it asks for more time than its partition allows",
    "JobHeldUser": "held by its owner (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "QOSMaxJobsPerUserLimit": "its QOS limits how many jobs you may run",
    "AssocGrpGRES": "your account's GPU limit is reached",
    "AssocMaxJobsLimit": "your account's job limit is reached",
    "Reservation": "waiting for its reservation",
    "launch_failed_requeued_held": "it failed to start and is held",
}


class SlurmAnswerError(ValueError):
    """Slurm answered something this module does not read."""


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue`` lists it."""

    id: str
    state: str
    reason: str | None
    """Why a pending job waits (``Priority``, ``Resources``…); None when it says ``None``."""
    nodes: str | None
    """The allocation as a Slurm node list (``node[0-2]``); None before it has one."""
    restarts: int
    """How often it was requeued: its attempt is the run's first one plus this."""
    exit_code: str | None

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def scheduler_job(self) -> SchedulerJob:
        """The job as a run's record keeps it: its state once it ended."""
        return SchedulerJob(self.id, self.state if self.ended else "")

    def describe(self) -> str:
        """The job in a line: ``job 42 pending: waiting for free nodes (Resources)``."""
        words = f"job {self.id} {self.state.lower()}"
        if self.reason is not None:
            words += f": {reason_words(self.reason)}"
        if self.nodes and not self.pending:
            words += f" on {self.nodes}"
        if self.ended and self.exit_code not in (None, "0:0"):
            words += f", exit code {self.exit_code}"
        return plain(words)


def parse_job_id(text: str) -> str:
    """The id ``sbatch --parsable`` printed (``42``, or ``42;cluster``)."""
    line = text.strip().split(";", 1)[0]
    if not _JOB_ID.fullmatch(line):
        raise SlurmAnswerError(f"sbatch printed no job id: {plain(text.strip()[:200])!r}")
    return line


def parse_job(text: str) -> SlurmJob:
    """The job ``squeue --noheader --Format`` :data:`SQUEUE_FIELDS` lists first."""
    line = text[:MAX_JOB_TEXT].split("\n", 1)[0].rstrip()
    fields = _FIELDS.fullmatch(line)
    if fields is None:
        raise SlurmAnswerError(f"not a job as squeue lists one: {plain(line[:200])!r}")
    reason, nodes = fields["reason"], fields["nodes"]
    return SlurmJob(
        id=fields["id"],
        state=fields["state"],
        reason=None if reason in ("", "None") else reason,
        nodes=None if nodes in ("", "(null)") else nodes,
        restarts=int(fields["restarts"]),
        exit_code=_exit_code(fields["exit_status"]),
    )


def _exit_code(status: str) -> str | None:
    """squeue's exit code (a wait status: 256 for ``exit 1``, 9 for SIGKILL) as ``scontrol``
    and ``sacct`` write it, ``code:signal``; None for a figure that is no wait status."""
    number = whole(status, digits=10)
    if number is None or number > 0xFFFF:
        return None
    return f"{number >> 8}:{number & 0x7F}"


def parse_node_addresses(text: str) -> dict[str, str]:
    """Node name → ``NodeAddr`` from ``scontrol show node -o``, a line per node."""
    found = {}
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        name, address = fields.get("NodeName", ""), fields.get("NodeAddr", "")
        if NODE_NAME.fullmatch(name) and _ADDRESS.fullmatch(address):
            found[name] = address
    return found


def parse_sacct(text: str) -> dict[str, str]:
    """Job id → its state, from ``sacct -n -P -X -o JobID,State`` (``CANCELLED by 0`` is
    ``CANCELLED``); lines that are not a job's are skipped."""
    found = {}
    for line in text.splitlines():
        job_id, _, state = line.strip().partition("|")
        state = state.split(" ", 1)[0]
        if _JOB_ID.fullmatch(job_id) and _STATE.fullmatch(state):
            found[job_id] = state
    return found


def reason_words(reason: str) -> str:
    """Slurm's reason in plain words, its own name kept: ``ReqNodeNotAvail, UnavailableNodes:n1``
    → ``a node it may use is down, drained or reserved (ReqNodeNotAvail: UnavailableNodes:n1)``.
    ``scontrol`` writes a reason's spaces as ``_`` and ``squeue`` does not: both read the same."""
    name, _, detail = reason.replace("_", " ").partition(",")
    meaning = REASONS.get(name.strip().replace(" ", "_"))
    if meaning is None:
        return reason.replace("_", " ")
    detail = detail.strip()
    return f"{meaning} ({name.strip()}{': ' + detail if detail else ''})"
