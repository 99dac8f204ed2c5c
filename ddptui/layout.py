"""Where a run's files are: its directory on each host, and its directory in the head's store.

One definition of every path and file-name pattern of a run, used by the plan, the launcher,
the follower, the judge and the commands. The node agent (:mod:`ddptui.onhost.agent`) is sent to
hosts alone and cannot import this module: it keeps its own copy of the patterns it needs, and
``tests/run/test_layout.py`` keeps the two in step.

On a host, ``<workdir>/code-cache/<sha256>``: every file of code staged there, by content, so
that a relaunch sends only what changed; ``<workdir>/runs/<run id>/code/``, the staged code
(verified, renamed into place), which hosts sharing the workdir (an NFS home) share; and each
node's part of the run in ``<workdir>/runs/<run id>/node<N>/``, its own even then::

    run.toml                  the run record as the head wrote it at launch
    events/rank{R}.jsonl      every rank's events, all attempts appended
    checkpoints/              node 0: the trainer's checkpoints and manifests
    control/stop, control/save
    logs/attempt-<N>/<torchrun id>/attempt_0/<local rank>/{stdout,stderr}.log, error.json
    node/attempt-<N>.{pgid,out,exit}   the wrapper's session, torchrun's console, its exit status
    node/flight_<R>           rank R's flight recorder, dumped by torch (NCCL's watchdog on a
                              timeout) or on ``ddptui dump``
    node/stacks/              the ranks' stack handler (site/sitecustomize.py), and per
                              process <pid>.ready (it is in place) and <pid>.txt (its stacks)

A Slurm run's workdir is shared by the login node and the nodes; beside the node directories
it has ``slurm/attempt-<N>.sh`` (the batch script of each attempt) and ``slurm/job-<id>.out``
(Slurm's output of each job).

On the head, ``$XDG_STATE_HOME/ddptui/runs/<run id>/`` (:class:`RunFiles`).
"""

from __future__ import annotations

import functools
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

RUN_DIR_ENV = "DDPTUI_RUN_DIR"
"""The node's run directory, in the environment of every process of the run (each inherits
it): where a rank writes its events, and how a process of the run is told on its host."""

# A number as torch and the agent write one: ASCII digits (`\d` alone also matches "٣"), no
# leading zero and `\Z`, not `$` (which matches before a final newline): each file has one
# name, so a host cannot make the follower keep one rank's file under many.
RECORD_NAME = "run.toml"
"""The run record's name: in the head node's store and in each host's run directory."""
_N = "(0|[1-9][0-9]{0,8})"
EVENTS = re.compile(rf"^events/rank{_N}\.jsonl\Z", re.ASCII)
"""A rank's events: group 1 is its global rank."""
RANK_LOG = re.compile(rf"^logs/attempt-{_N}/.+/{_N}/(stdout|stderr)\.log\Z", re.ASCII)
"""A local rank's output: attempt, local rank, stream."""
ERROR_FILE = re.compile(rf"^logs/attempt-{_N}/.+/{_N}/error\.json\Z", re.ASCII)
"""torchrun's error file of a local rank that failed: attempt, local rank."""
NODE_OUT = re.compile(rf"^node/attempt-{_N}\.out\Z", re.ASCII)
"""torchrun's own console of one attempt."""
NODE_EXIT = re.compile(rf"^node/attempt-{_N}\.exit\Z", re.ASCII)
"""torchrun's exit status of one attempt, written by the agent's wrapper as it ends."""
READ_FILES = (EVENTS, RANK_LOG, ERROR_FILE, NODE_OUT, NODE_EXIT)
"""The files of :data:`FOLLOWED` the head reads (:func:`run_path`): a line of any other file
is nobody's."""
MAX_PATH_CHARS = 256
"""A run file's path is far shorter (``logs/attempt-N/<torchrun id>/attempt_0/R/stderr.log``:
torchrun's id is its rendezvous id and 8 random characters)."""
FOLLOWED = re.compile(
    r"^(events/[^/]+\.jsonl"
    r"|logs/attempt-\d+/.+/(stdout|stderr)\.log"
    r"|logs/attempt-\d+/.+/error\.json"
    r"|node/attempt-\d+\.(out|exit))$"
)
"""Every file the follower streams (paths relative to the run directory)."""
ATTEMPT_FILE = re.compile(r"^attempt-(\d+)\.(pgid|exit)$")
"""The agent's per-attempt files in ``node/``."""


@dataclass(frozen=True)
class RunPath:
    """What the name of a run file the head reads says (:func:`run_path`)."""

    kind: Literal["events", "log", "error", "out", "exit"]
    number: int
    """``events``: the rank's global rank; the others: the attempt."""
    local: int | None = None
    """``log`` and ``error``: the local rank."""
    stream: str | None = None
    """``log``: ``stdout`` or ``stderr``."""


@functools.lru_cache(maxsize=4096)
def run_path(path: str) -> RunPath | None:
    """What ``path`` (as a host names it) is among the run files the head reads, whoever it
    belongs to; None for any other path, or one longer than :data:`MAX_PATH_CHARS`. Kept for
    the paths named last: every line of a run names one of a few, and matching is most of a
    line's cost here."""
    if len(path) > MAX_PATH_CHARS or not path.isascii():
        return None
    # Events first: nearly every line is one.
    if (match := EVENTS.match(path)) is not None:
        return RunPath("events", int(match.group(1)))
    if (match := RANK_LOG.match(path)) is not None:
        return RunPath("log", int(match.group(1)), int(match.group(2)), match.group(3))
    if (match := ERROR_FILE.match(path)) is not None:
        return RunPath("error", int(match.group(1)), int(match.group(2)))
    if (match := NODE_OUT.match(path)) is not None:
        return RunPath("out", int(match.group(1)))
    if (match := NODE_EXIT.match(path)) is not None:
        return RunPath("exit", int(match.group(1)))
    return None


@dataclass(frozen=True)
class HostFiles:
    """The files of one host's part of a run that the head reads, by name: its ranks' events
    files (every attempt appends to them), and for each attempt torchrun's console and exit
    status and each local rank's stdout, stderr and error file (``--max-restarts 0``: one
    ``attempt_0`` directory). A host's other files, or another host's, are nobody's."""

    ranks: range
    """The host's global ranks."""
    attempts: int
    """The attempts its files may belong to (the run's, and the one starting)."""

    @property
    def logs(self) -> int:
        """How many local ranks' log and error files the host can have: their names hold
        torchrun's id, which only the host knows, so they are counted rather than named."""
        return 3 * len(self.ranks) * self.attempts

    def of(self, path: str) -> RunPath | None:
        """What ``path`` is, if it is one of the host's files; else None."""
        named = run_path(path)
        if named is None:
            return None
        if named.kind == "events":
            return named if named.number in self.ranks else None
        if not 1 <= named.number <= self.attempts:
            return None
        return named if named.local is None or named.local < len(self.ranks) else None


NODE_DIR = re.compile(r"node\d+", re.ASCII)


TRAINER_CHECKPOINTS = "checkpoints"
"""The bundled trainer's checkpoints and their manifests, in node 0's directory (its rank 0
alone writes them; ``trainer/loop.py`` names it too, importing nothing of ddptui)."""


def code_dir(run_dir: str) -> str:
    """The run's staged code, the ranks' working directory: beside the node directories
    (``runs/<run id>/code``), so that hosts sharing the workdir share it, and what a rank writes
    there every node reads; inside the run directory of a run from before node directories."""
    parent, name = posixpath.split(run_dir)
    return posixpath.join(parent if NODE_DIR.fullmatch(name) else run_dir, "code")


def root_code_dir(root: str) -> str:
    """The staged code of the run in ``root`` (:func:`run_root`): :func:`code_dir` of each of
    its node directories."""
    return posixpath.join(root, "code")


FLIGHT_NAME = "flight_"
"""A rank's flight-recorder dump is this with its global rank appended (torch appends it)."""


def flight_prefix(run_dir: str) -> str:
    """Where a rank's flight recorder is dumped on its host."""
    return posixpath.join(run_dir, "node", FLIGHT_NAME)


def workdir_of(run_dir: str) -> str:
    """The workdir that holds ``run_dir`` (a :func:`host_run_dir`)."""
    return posixpath.dirname(posixpath.dirname(posixpath.dirname(run_dir)))


def code_cache_dir(run_dir: str) -> str:
    """The cache of code contents in the workdir that holds ``run_dir`` (a
    :func:`host_run_dir`), shared by its runs and by the hosts that share the workdir."""
    return posixpath.join(workdir_of(run_dir), "code-cache")


def bench_path(workdir: str) -> str:
    """The interconnect benchmark's script on a host (``check --bandwidth``)."""
    return posixpath.join(workdir, "bandwidth", "bench.py")


def log_dir(run_dir: str, attempt: int | str) -> str:
    """torchrun's ``--log-dir`` for one attempt (a number, or a batch script's reference to
    one)."""
    return posixpath.join(run_dir, "logs", f"attempt-{attempt}")


def run_root(workdir: str, run_id: str) -> str:
    """The run's directory in a workdir: its node directories, its staged code and, for a
    Slurm run, ``slurm/`` (the batch script of each attempt, Slurm's output of each job)."""
    return posixpath.join(workdir, "runs", run_id)


def host_run_dir(workdir: str, run_id: str, node_rank: int | str) -> str:
    """Node ``node_rank``'s directory of the run: a directory of its own, so that hosts sharing
    a workdir never write each other's files. ``node_rank`` may be a batch script's reference
    to the node's rank."""
    return node_dir(run_root(workdir, run_id), node_rank)


def node_dir(root: str, node_rank: int | str) -> str:
    """Node ``node_rank``'s directory of the run in ``root`` (:func:`run_root`)."""
    return posixpath.join(root, f"node{node_rank}")


def node_console(run_dir: str, attempt: int | str) -> str:
    """torchrun's console (stdout and stderr) of ``attempt`` on the node of ``run_dir``."""
    return posixpath.join(run_dir, "node", f"attempt-{attempt}.out")


def node_stacks(run_dir: str) -> str:
    """The ranks' stack handler on the node of ``run_dir``: ``site/sitecustomize.py``, and the
    stacks it writes."""
    return posixpath.join(run_dir, "node", "stacks")


def node_agent(run_root: str) -> str:
    """A Slurm run's node agent, as a program its nodes' Pythons run from the shared workdir."""
    return posixpath.join(run_root, "agent.py")


def node_session(run_dir: str, attempt: int | str) -> str:
    """The process group (session) that started ``attempt``'s torchrun on the node."""
    return posixpath.join(run_dir, "node", f"attempt-{attempt}.pgid")


def node_exit(run_dir: str, attempt: int | str) -> str:
    """torchrun's exit status of ``attempt``, written as it ends."""
    return posixpath.join(run_dir, "node", f"attempt-{attempt}.exit")


def control_request(run_dir: str, what: str) -> str:
    """The file that asks the trainer to ``stop`` or ``save``; only node 0's is read."""
    return posixpath.join(run_dir, "control", what)


def slurm_script(root: str, attempt: int) -> str:
    """The batch script submitted for ``attempt`` of the run in ``root`` (:func:`run_root`)."""
    return posixpath.join(root, "slurm", f"attempt-{attempt}.sh")


def slurm_nodes(root: str, attempt: int | str) -> str:
    """The nodes ``attempt`` of the run in ``root`` runs on, node 0 first, as the batch script
    reads them: the allocation's first (its script writes them), or those recovery named for an
    attempt in the same allocation (its supervisor writes them, and the waiting job starts it)."""
    return posixpath.join(root, "slurm", f"attempt-{attempt}.nodes")


def slurm_set_aside(root: str) -> str:
    """The nodes recovery set aside in the run in ``root``, a line each: a requeued job's
    script leaves them out of its attempt."""
    return posixpath.join(root, "slurm", "set-aside")


def slurm_output(root: str, job: str = "%j") -> str:
    """Slurm's output of job ``job`` of the run in ``root``; by default sbatch's ``--output``
    pattern (``%j``: each job's id)."""
    return posixpath.join(root, "slurm", f"job-{job}.out")


@dataclass(frozen=True)
class RunFiles:
    """One run's directory in the head node's store, and what lives in it."""

    directory: Path

    @property
    def record(self) -> Path:
        """``run.toml``: the run record (replaced atomically, under :attr:`lock`)."""
        return self.directory / RECORD_NAME

    @property
    def hosts(self) -> Path:
        """``hosts.toml``: the resolved hosts file the run was launched with."""
        return self.directory / "hosts.toml"

    @property
    def lock(self) -> Path:
        """Held (flock) for every change of the record."""
        return self.directory / ".lock"

    @property
    def supervisor_lock(self) -> Path:
        """Held (flock) by the run's supervisor for its whole life: at most one per run."""
        return self.directory / "supervisor.lock"

    @property
    def supervisor_pid(self) -> Path:
        return self.directory / "supervisor.pid"

    @property
    def socket(self) -> Path:
        """The supervisor's Unix socket (mode 0600): viewers attach, requests arrive."""
        return self.directory / "supervisor.sock"

    @property
    def supervisor_log(self) -> Path:
        return self.directory / "supervisor.log"

    @property
    def journal(self) -> Path:
        """The followed lines in the supervisor's order (segments: ``journal-<start>.jsonl``)."""
        return self.directory / "journal"

    @property
    def dumps(self) -> Path:
        """``ddptui dump``'s stacks as the hosts sent them: ``dumps/<time>/node<N>-rank<R>.txt``."""
        return self.directory / "dumps"

    @property
    def evidence(self) -> Path:
        """What the supervisor gathered about a hang or failure (``hang-<time>.json``…)."""
        return self.directory / "evidence"
