"""The resolved hosts file: frozen dataclasses every other layer reads.

Loading and validation live in :mod:`ddptui.config.load`; nothing here does I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypeAlias

Backend: TypeAlias = Literal["auto", "nccl", "gloo"]
GpuSelection: TypeAlias = Literal["all"] | int | tuple[int, ...]
"""Which GPUs of a host a run may use: every one, the first N, or these indices."""
ProcsPerNode: TypeAlias = Literal["gpus"] | int
"""``"gpus"``: one process per selected GPU; an integer: that many (CPU hosts need one)."""
MasterPort: TypeAlias = Literal["auto"] | int
OnHang: TypeAlias = Literal["wait", "stop"]
"""``"wait"``: record a hung run and leave it to a person; ``"stop"``: stop it, record a failure."""
RecoveryMode: TypeAlias = Literal["off", "resume"]
"""``"off"``: a failed run stays failed; ``"resume"``: the supervisor resumes it by itself."""

AUTO: Literal["auto"] = "auto"


@dataclass(frozen=True)
class HostConfig:
    """One machine, with every cluster default already applied.

    Local paths (``identity_file``, ``known_hosts``) are expanded on the head node.
    Remote paths (``python``, ``workdir``) keep a leading ``~``: it names the remote
    user's home and is expanded on the host itself.
    """

    name: str
    address: str
    port: int = 22
    user: str | None = None
    identity_file: Path | None = None
    known_hosts: Path | None = None
    python: str = "python3"
    conda_env: str | None = None
    workdir: str = "~/ddptui-runs"
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: GpuSelection = "all"
    socket_ifname: str = AUTO
    rank0: bool = False
    spare: bool = False
    """Checked with the others but given no rank: it waits to take a node's place."""


@dataclass(frozen=True)
class JobConfig:
    """What to run: the bundled trainer by default, or the user's ``script`` or ``module``.

    ``script`` is a file or directory on the head node; ``module`` is a module installed on the
    hosts or inside ``dir``. At most one of the two is set. ``dir`` (default: the directory
    holding ``script``, or ``script`` itself when it is a directory) is uploaded with every run,
    less what its ``.gitignore`` files and ``exclude`` leave out, and the ranks run from it.

    ``hang_timeout_s`` unset: the hang window is the larger of 30 s and 20 × the slowest rank's
    median step time, worked out during the run so that it scales with the model.
    """

    nproc_per_node: ProcsPerNode = "gpus"
    checkpoint_every: int = 200
    args: tuple[str, ...] = ()
    script: Path | None = None
    module: str | None = None
    dir: Path | None = None
    exclude: tuple[str, ...] = ()
    max_upload_mb: float = 100.0
    loss_pattern: str | None = None
    instrument: bool = True
    checkpoint_files: tuple[str, ...] = ()
    memory_per_process_gb: float | None = None
    resume_args: tuple[str, ...] = ("--resume", "latest")
    stop_grace_s: float = 60.0
    hang_timeout_s: float | None = None
    on_hang: OnHang = "wait"

    @property
    def code_dir(self) -> Path | None:
        """The directory uploaded with every run; None runs the bundled trainer (or an
        installed module) with nothing of the user's uploaded."""
        if self.dir is not None:
            return self.dir
        if self.script is None:
            return None
        return self.script if _names_directory(self.script) else self.script.parent

    @property
    def script_target(self) -> str | None:
        """What the ranks run, relative to the uploaded directory (their working directory): a
        directory's ``__main__.py`` as ``python DIR`` would; None without a script."""
        script, code = self.script, self.code_dir
        if script is None or code is None:
            return None
        target = script / "__main__.py" if _names_directory(script) else script
        return target.relative_to(code).as_posix()


def _names_directory(script: Path) -> bool:
    # Decided without looking at the disk, so that a plan is the same wherever it is made: an
    # entry point is a file with a suffix, a package directory has none.
    return script.suffix == ""


MAX_PARALLEL_CONNECTS = 128
"""SSH handshakes at once, by default. Each host's sshd sees one connection from ddptui, and a
jump host one for all the hosts behind it, so no sshd's ``MaxStartups`` is at stake; handshakes
in waves wait out each other's round trips (``benchmarks/check_scale.py``: ``check`` of 128 hosts
took 7% longer in waves of 32)."""


@dataclass(frozen=True)
class ClusterConfig:
    """Cluster-wide settings that are not per-machine defaults."""

    master_port: MasterPort = 29500
    backend: Backend = AUTO
    connect_timeout: float = 10.0
    torch_import_timeout: float = 20.0
    max_parallel_connects: int = MAX_PARALLEL_CONNECTS
    min_free_disk_gb: float = 5.0
    max_clock_skew_s: float = 2.0


@dataclass(frozen=True)
class SlurmConfig:
    """A cluster whose nodes come from a Slurm allocation (``[slurm]``) instead of a host list.

    Every value is passed to ``sbatch`` as its option of the same name; ``None`` leaves the
    site's default. ``[cluster]``'s machine settings (``python``, ``workdir``, ``env``…) apply
    to every node, and ``workdir`` must be on a filesystem the login node shares with them.
    ``spare_nodes`` more are allocated with the job and left idle, for ``[recovery]`` to run
    the next attempt on in the same allocation when one of ``nodes`` fails.
    """

    nodes: int
    spare_nodes: int = 0
    gpus_per_node: int | None = None
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclude: tuple[str, ...] = ()
    sbatch_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecoveryConfig:
    """What the supervisor does about a run that fails by itself (``[recovery]``).

    ``max_restarts`` resumes in any ``window_s`` seconds; one more fails the run for good, with
    every incident listed, since a run that keeps failing needs a person. With no spare left,
    the run goes on without the host at fault down to ``min_nodes`` nodes (None: never with
    fewer): the bundled trainer keeps its global batch and sample order; a script only when it
    says it can (``elastic``). ``notify``: a command run on the head for each incident, its
    JSON on stdin.
    """

    mode: RecoveryMode = "off"
    max_restarts: int = 5
    window_s: float = 3600.0
    min_nodes: int | None = None
    elastic: bool = False
    notify: tuple[str, ...] = ()

    @property
    def on(self) -> bool:
        return self.mode == "resume"


@dataclass(frozen=True)
class Config:
    """A validated hosts file. ``hosts`` keeps file order, spares included; ``head`` is node 0.

    With ``slurm`` set the hosts are Slurm's to choose: ``hosts`` is empty and ``node``, every
    node's settings (``[cluster]``'s), stands for each of them.
    """

    path: Path
    cluster: ClusterConfig
    hosts: tuple[HostConfig, ...]
    job: JobConfig
    slurm: SlurmConfig | None = None
    node: HostConfig | None = None
    recovery: RecoveryConfig = RecoveryConfig()

    @functools.cached_property
    def head(self) -> HostConfig:
        """Node 0: the host marked ``rank0 = true``, else the first one listed that is not a
        spare (never a spare: loading refuses one marked rank0). Kept once found: a check asks
        for it for every host, which went through all 512 hosts each time."""
        runs_on = [host for host in self.hosts if not host.spare]
        return next((host for host in runs_on if host.rank0), runs_on[0])

    @property
    def ordered_hosts(self) -> tuple[HostConfig, ...]:
        """The hosts a run starts on, in node-rank order: node 0 first, the rest in file
        order; spares are left out."""
        head = self.head
        return (head, *(host for host in self.hosts if host is not head and not host.spare))

    @property
    def spares(self) -> tuple[HostConfig, ...]:
        """The hosts kept to take a failed node's place, in file order."""
        return tuple(host for host in self.hosts if host.spare)

    @property
    def checked_hosts(self) -> tuple[HostConfig, ...]:
        """What a check reaches: the run's hosts in node-rank order, then the spares (a spare
        is checked with the others, so that it is known fit when a node fails)."""
        return (*self.ordered_hosts, *self.spares)

    def host(self, name: str) -> HostConfig:
        """The host called ``name``; ``KeyError`` if there is none. On a Slurm cluster every
        node Slurm names is one, with :attr:`node`'s settings."""
        for host in self.hosts:
            if host.name == name:
                return host
        if self.node is not None:
            return replace(self.node, name=name, address=name)
        raise KeyError(name)
