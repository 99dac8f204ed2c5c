"""What Slurm says of a job (pure): ``sbatch --parsable`` and ``scontrol show job -o`` parsed,
and the queue's reasons in plain words.

Slurm's commands run on the head, but their text is still read defensively: capped, matched
key by key, and shown only through :func:`ddptui.untrusted.plain`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddptui.untrusted import plain, whole

MAX_JOB_TEXT = 64 * 1024
"""``scontrol show job -o`` prints one line of a few hundred characters per job."""
_JOB_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?", re.ASCII)
_STATE = re.compile(r"[A-Z][A-Z_]{0,31}", re.ASCII)
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
"""A node name as Slurm prints one; anything else in its answers is not used as one."""
_ADDRESS = re.compile(r"[A-Za-z0-9:.%_-]{1,255}", re.ASCII)
_FIELDS = {
    key: re.compile(rf"(?:^|\s){key}=(\S*)")
    for key in ("JobId", "JobState", "Reason", "NodeList", "Restarts", "ExitCode")
}
"""``Key=value`` of ``scontrol show job -o``; a key such as ``NodeList`` must not match inside
``ReqNodeList``."""

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
    """One job as ``scontrol show job`` tells it."""

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
    """The job ``scontrol show job -o ID`` describes."""
    text = text[:MAX_JOB_TEXT]

    def field(key: str) -> str | None:
        found = _FIELDS[key].search(text)
        return None if found is None else found.group(1)

    job_id, state = field("JobId"), field("JobState")
    if (
        job_id is None
        or not _JOB_ID.fullmatch(job_id)
        or state is None
        or not _STATE.fullmatch(state)
    ):
        raise SlurmAnswerError(f"not a job as scontrol shows one: {plain(text[:200])!r}")
    reason, nodes, restarts = field("Reason"), field("NodeList"), field("Restarts")
    return SlurmJob(
        id=job_id,
        state=state,
        reason=None if reason in (None, "", "None") else reason,
        nodes=None if nodes in (None, "", "(null)") else nodes,
        restarts=whole(restarts) or 0,
        exit_code=field("ExitCode"),
    )


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
    """Slurm's reason in plain words, its own name kept: ``ReqNodeNotAvail,_UnavailableNodes:n1``
    → ``a node it may use is down, drained or reserved (ReqNodeNotAvail: UnavailableNodes:n1)``.
    Slurm writes spaces in a reason as ``_``."""
    name, _, detail = reason.partition(",")
    detail = detail.replace("_", " ").strip()
    meaning = REASONS.get(name)
    if meaning is None:
        return reason.replace("_", " ")
    return f"{meaning} ({name}{': ' + detail if detail else ''})"
