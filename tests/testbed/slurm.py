"""A real Slurm on test-bed hosts: ``munged``, one ``slurmctld`` in the root network namespace
under a hostname of its own, and one ``slurmd`` in each host's namespaces, each under its
host's hostname.

Debian's ``slurm-wlm`` as it installs: ``proctrack/linuxproc`` and ``task/none`` need no cgroup
set-up (``cgroup.conf`` still names ``cgroup/v1``, without which ``slurmd`` stops); jobs run as
root; no accounting. The hosts share this machine's filesystem, as a cluster's nodes share
their home directories. The controller's hostname lives in the bed's runtime directory, so the
bed's own teardown (:func:`tests.testbed.network.remove`) kills it with the hosts' processes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.testbed import sshd
from tests.testbed.cluster import TestBed
from tests.testbed.host import TestHost
from tests.testbed.network import RUNTIME_DIR, TestBedError

BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "scontrol", "munged", "munge")
NODE_PORT = 16818
"""slurmd's port, in each host's own network namespace."""
PARTITION = "debug"
CPUS_PER_NODE = 4
"""What each node says it has (``config_overrides``): more than this machine's two cores, so
that a node takes a job's task and the steps ddptui adds beside it."""
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_SOCKET_DIR = Path("/run/munge")
MUNGE_PID = MUNGE_SOCKET_DIR / "munged.pid"
READY_S = 30.0


def why_unavailable() -> str | None:
    """Why this machine cannot run the Slurm bed, or None."""
    missing = [name for name in BINARIES if shutil.which(name) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing): "
            "apt-get install slurm-wlm munge"
        )
    return None


class SlurmBed:
    """Slurm on every host of ``bed``; build with :meth:`start`, end with :meth:`stop`."""

    __test__ = False

    def __init__(self, bed: TestBed, directory: Path, started_munged: bool) -> None:
        self.bed = bed
        self.directory = directory
        self.conf = directory / "slurm.conf"
        self.controller_name = f"{bed.prefix}-ctl"
        self.controller_uts = RUNTIME_DIR / bed.prefix / "slurmctld.uts"
        self._started_munged = started_munged
        self._daemons: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def env(self) -> dict[str, str]:
        """This machine's environment with Slurm's commands pointed at the bed."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @classmethod
    def start(cls, bed: TestBed, directory: Path) -> SlurmBed:
        """Slurm on every host of ``bed``, its state in ``directory``; every node idle."""
        reason = why_unavailable()
        if reason is not None:
            raise TestBedError(reason)
        directory.mkdir(parents=True, exist_ok=True)
        # Nothing reaches these nodes over SSH: only Slurm's own daemons answer there.
        for host in bed.hosts:
            sshd.stop(host)
        slurm = cls(bed, directory, _ensure_munged())
        try:
            slurm._write_config()
            slurm._start_controller()
            for host in bed.hosts:
                slurm.start_node(host)
            slurm.wait_for_nodes("idle")
        except BaseException:
            slurm.stop()
            raise
        return slurm

    def _write_config(self) -> None:
        for sub in ("state", "spool", "log"):
            (self.directory / sub).mkdir(exist_ok=True)
        nodes = [
            f"NodeName={host.name} NodeAddr={host.address} NodeHostname={host.hostname} "
            f"CPUs={CPUS_PER_NODE} State=UNKNOWN"
            for host in self.bed.hosts
        ]
        names = ",".join(host.name for host in self.bed.hosts)
        lines = [
            f"ClusterName={self.bed.prefix}",
            f"SlurmctldHost={self.controller_name}({self.bed.gateway})",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"SlurmctldPort={_free_port(self.bed.gateway)}",
            f"SlurmdPort={NODE_PORT}",
            f"StateSaveLocation={self.directory / 'state'}",
            f"SlurmdSpoolDir={self.directory / 'spool'}/%n",
            f"SlurmctldPidFile={self.directory / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.directory / 'spool'}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.directory / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.directory / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            # Jobs start within a second or two of being startable, not at the next pass.
            "SchedulerParameters=sched_interval=2,bf_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "JobCompType=jobcomp/none",
            "AccountingStorageType=accounting_storage/none",
            # A requeued job waits out its credential's life before it starts again: 121 s
            # by default, more than a test should wait.
            "AuthInfo=cred_expire=10",
            "SlurmdParameters=config_overrides",
            # A lost slurmd is noticed within this (and ``KillWait`` later, its job's other
            # nodes are killed): the bed's tests wait for both.
            "SlurmdTimeout=10",
            "MessageTimeout=5",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=600",
            *nodes,
            f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        (self.directory / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")

    def _start_controller(self) -> None:
        self.controller_uts.touch()
        subprocess.run(
            ["unshare", f"--uts={self.controller_uts}", "hostname", self.controller_name],
            check=True,
        )
        self.start_controller()

    def start_controller(self) -> None:
        """Start slurmctld (again, after :meth:`stop_controller`), from its saved state."""
        self._daemons["slurmctld"] = self._spawn(
            ["nsenter", f"--uts={self.controller_uts}", "--"], "slurmctld", [], "slurmctld"
        )
        deadline = time.monotonic() + READY_S
        while self.run("scontrol", "ping", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TestBedError(f"slurmctld did not answer in {READY_S:g} s")
            time.sleep(0.2)

    def stop_controller(self) -> None:
        """Stop slurmctld as an administrator's restart does (SIGTERM: it saves its state)."""
        daemon = self._daemons.pop("slurmctld")
        daemon.terminate()
        daemon.wait(timeout=30)

    def start_node(self, host: TestHost) -> None:
        """Start ``host``'s slurmd (again, after :meth:`kill_node`)."""
        self._daemons[host.name] = self._spawn(
            host.exec_prefix(), "slurmd", ["-N", host.name], f"slurmd-{host.name}"
        )

    def kill_node(self, host: TestHost) -> None:
        """SIGKILL ``host``'s slurmd, as a crash would: its job steps go on until Slurm acts."""
        daemon = self._daemons.pop(host.name)
        daemon.kill()
        daemon.wait(timeout=10)

    def _spawn(
        self, prefix: Sequence[str], daemon: str, args: Sequence[str], name: str
    ) -> subprocess.Popen[bytes]:
        log = (self.directory / "log" / f"{name}.out").open("ab")
        with log:
            # -D: in the foreground, so the Popen is the daemon itself (nsenter and ip netns
            # exec both exec it).
            return subprocess.Popen(
                [*prefix, shutil.which(daemon) or daemon, "-D", "-f", str(self.conf), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
            )

    def run(
        self, *argv: str, timeout: float = 30, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm command on the head (this machine), as a user of the cluster runs it."""
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=self.env, check=check
        )

    def drain(self, name: str, reason: str) -> None:
        """Drain node ``name`` as an administrator does."""
        self.run("scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")

    def resume(self, name: str, timeout: float = READY_S) -> None:
        """Return node ``name`` to service, unless it is in service already (a controller that
        restarts may lose the drain); Slurm refuses while the node has not registered again,
        so this asks until it takes."""
        deadline = time.monotonic() + timeout
        update = ("scontrol", "update", f"NodeName={name}", "State=RESUME")
        while self.node_states().get(name, "").startswith(("drain", "drng", "down")):
            if self.run(*update, check=False).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TestBedError(f"Slurm did not return {name} to service in {timeout:g} s")
            time.sleep(0.3)

    def node_states(self) -> Mapping[str, str]:
        """Each node's state as ``sinfo`` says it (``idle``, ``alloc``, ``down*``…)."""
        answer = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout
        return dict(line.split() for line in answer.splitlines() if line.strip())

    def wait_for_nodes(self, state: str, timeout: float = READY_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if states and all(found == state for found in states.values()):
                return
            if time.monotonic() > deadline:
                raise TestBedError(f"Slurm's nodes are not all {state} in {timeout:g} s: {states}")
            time.sleep(0.3)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` of ``job_id``, key by key."""
        answer = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(word.split("=", 1) for word in answer.split() if "=" in word)

    def wait_for_job(self, job_id: str, states: Sequence[str], timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not {'/'.join(states)} in {timeout:g} s: {job}")
            time.sleep(0.5)

    def idle(self) -> None:
        """Cancel every job and wait for every node to be idle and answering: a test leaves the
        bed as it found it."""
        if "slurmctld" not in self._daemons:
            self.start_controller()
        self.run("scancel", "--full", "--partition", PARTITION, check=False)
        for host in self.bed.hosts:
            if host.name not in self._daemons:
                self.start_node(host)
        names = ",".join(host.name for host in self.bed.hosts)
        self.run("scontrol", "update", f"NodeName={names}", "State=RESUME", check=False)
        self.wait_for_nodes("idle", timeout=60)

    def stop(self) -> None:
        """Stop every daemon this bed started (the bed's hosts are the caller's to stop)."""
        for daemon in self._daemons.values():
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
        for daemon in self._daemons.values():
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=5)
        self._daemons.clear()
        if self._started_munged:
            _stop_munged()


def _free_port(address: str) -> int:
    """A port free on ``address`` now: slurmctld listens in the root namespace, which another
    bed's controller may share."""
    with socket.socket() as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


def _ensure_munged() -> bool:
    """A munged answering on this machine; True when this call started it."""
    if subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode == 0:
        return False
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_KEY.write_bytes(os.urandom(1024))
        shutil.chown(MUNGE_KEY, "munge", "munge")
        MUNGE_KEY.chmod(0o400)
    MUNGE_SOCKET_DIR.mkdir(exist_ok=True)
    shutil.chown(MUNGE_SOCKET_DIR, "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", shutil.which("munged") or "munged"], check=True)
    deadline = time.monotonic() + READY_S
    while subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise TestBedError("munged did not answer: see `munged --foreground` as user munge")
        time.sleep(0.1)
    return True


def _stop_munged() -> None:
    try:
        pid = int(MUNGE_PID.read_text().strip())
    except (OSError, ValueError):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
