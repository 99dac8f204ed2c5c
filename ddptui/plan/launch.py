"""The launch plan (pure): config + check report → one launch spec per host.

Static rendezvous (``--nnodes/--node-rank/--master-addr/--master-port``), so nothing depends on
hostnames resolving; ``--max-restarts 0``, so a failure surfaces instead of looping; torchrun's
``--log-dir`` with ``--redirects 3`` inside the run directory, so every local rank's stdout and
stderr land in files of their own with torchrun's error files beside them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ddptui import layout
from ddptui.config.model import AUTO, Config, HostConfig, JobConfig
from ddptui.errors import DdptuiError, UsageError
from ddptui.health.findings import HostCheck
from ddptui.health.resources import (
    choose_socket_ifname,
    is_free,
    one_machine,
    procs_per_node,
    resolve_backend,
    selected_gpus,
)
from ddptui.plan.run_plan import RunPlan
from ddptui.probe.facts import HostFacts
from ddptui.remote.commands import posix_script, python_argv
from ddptui.untrusted import plain

RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[a-z0-9]{4}")
"""``YYYYMMDD-HHMMSS-xxxx``: sortable by start time, unique enough, safe in any path or shell."""

DEBUG_ENV: Mapping[str, str] = {
    "NCCL_DEBUG": "INFO",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}
"""What ``--debug`` adds to every rank's environment."""

STACKS_ENV = "DDPTUI_STACKS_DIR"
"""Where a rank's stack handler writes (the node agent's ``STACKS_MARK``)."""
ATTEMPT_ENV = "DDPTUI_ATTEMPT"
"""The attempt a process of the run belongs to (the node agent's ``ATTEMPT_MARK``): its start
sets it on SSH hosts, the batch script on Slurm's nodes."""
INSTRUMENT_ENV = "DDPTUI_INSTRUMENT"
"""``0``: the ranks' stack handler installs no framework events (``[job] instrument``)."""
UNINSTRUMENTED_ENV = {INSTRUMENT_ENV: "0", "TTY_COMPATIBLE": "1"}
"""A rank without framework events: its loss is read from its output, and rich's live display
(Lightning's default progress bar) writes nothing into a pipe until it ends unless told that
the pipe takes terminal output."""
FLIGHT_RECORDER_ENTRIES = 2000
"""Collectives each rank's flight recorder keeps: a few steps of a large model's, about a MiB."""
"""Every rank's environment names its node's run directory, for scripts that write events."""

Entry = Literal["trainer", "script", "module"]
AUTO_PORT_PLACEHOLDER = "<auto>"
"""Stands for the port in ``--dry-run`` output when ``master_port = "auto"``."""


class PlanError(DdptuiError):
    """The cluster cannot be planned (no facts for a host, no process to start…)."""


@dataclass(frozen=True)
class Rendezvous:
    """Where torchrun's nodes meet: numbers, or words a batch script fills in
    (:func:`ddptui.plan.slurm.shell`); a port ``"auto"`` is found at launch."""

    nnodes: int | str
    master_addr: str
    master_port: int | str


@dataclass(frozen=True)
class NodeLaunch:
    """What one host runs: its torchrun command line, environment and directories."""

    host: HostConfig
    node_rank: int
    nproc: int
    run_dir: str
    """The run's directory on the host: absolute, ``~`` already expanded there."""
    env: Mapping[str, str]
    """Set for torchrun and every rank (on top of the login environment)."""
    argv: tuple[str, ...]
    """The full command: the host's Python running ``torch.distributed.run`` with its flags."""
    cuda_visible_devices: str | None = None
    socket_ifname: str | None = None

    @property
    def code_dir(self) -> str:
        return layout.code_dir(self.run_dir)


@dataclass(frozen=True)
class LaunchPlan(RunPlan):
    """Every node's launch for one attempt of a run. Node 0 comes first."""

    run_id: str
    attempt: int
    backend: Literal["nccl", "gloo"]
    master_addr: str
    master_port: int | Literal["auto"]
    entry: Entry
    args: tuple[str, ...]
    nodes: tuple[NodeLaunch, ...]
    debug: bool = False
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return sum(node.nproc for node in self.nodes)

    @property
    def head(self) -> NodeLaunch:
        return self.nodes[0]

    def node(self, host_name: str) -> NodeLaunch:
        for node in self.nodes:
            if node.host.name == host_name:
                return node
        raise KeyError(host_name)

    @property
    def heading(self) -> str:
        """``2 host(s), 4 ranks, backend nccl, master 192.0.2.2:29500, interface eth0``."""
        interfaces = {node.socket_ifname or "default" for node in self.nodes}
        return (
            f"{len(self.nodes)} host(s), {self.world_size} ranks, backend {self.backend}, "
            f"master {self.master_addr}:{self.master_port}, "
            f"interface {plain(', '.join(sorted(interfaces)), one_line=True)}"
        )

    @property
    def queues(self) -> bool:
        return False

    def text(self, upload: Sequence[str]) -> str:
        """What is uploaded, then per host the exact directory, environment and command that
        run there, as shell lines a person can paste into a terminal on that host or a bug
        report.

        The workdir and the interface names come from the hosts' probes: every line goes
        through the sanitiser on its own, so a control character shows as its escape (that
        line is then no longer the exact command) and a newline cannot start a line of its
        own, such as another node's."""
        lines = [
            f"run {self.run_id}: {len(self.nodes)} node(s), world size {self.world_size}, "
            f"backend {self.backend}, master {self.master_addr}:{self.master_port}",
        ]
        if self.master_port == AUTO:
            lines.append(f"  ({AUTO_PORT_PLACEHOLDER} is a port found free on node 0 at launch)")
        lines += upload
        for node in self.nodes:
            exports, _, command = posix_script(node.argv, node.env).partition("; ")
            lines += [
                "",
                f"# node {node.node_rank}: {node.host.name} ({node.host.address}), "
                f"{node.nproc} process(es)",
                f"cd {shlex.quote(node.code_dir)}",
                exports,
                command,
            ]
        return "\n".join(plain(line, one_line=True) for line in lines)

    def dry_run(self, upload: Sequence[str]) -> tuple[str, str | None]:
        """:meth:`text` alone, on stdout."""
        return self.text(upload) + "\n", None

    def started(self, job_id: str | None) -> str:
        return f"run {self.run_id} started."


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def trainer_args(config: Config, extra_args: Sequence[str]) -> tuple[str, ...]:
    """``[job] args`` then the arguments given after ``--``, which may hold no control
    character: a newline would end the batch script's here-document early, and what follows
    it would run as the script (the hosts file's values are checked as they are read)."""
    for arg in extra_args:
        if _CONTROL.search(arg):
            raise UsageError(
                f"the trainer argument '{plain(arg, limit=80, one_line=True)}' after -- holds a "
                "control character (a newline, a tab or an escape): give it without one"
            )
    return (*config.job.args, *extra_args)


def plan_launch(
    config: Config,
    checks: Sequence[HostCheck],
    *,
    run_id: str,
    attempt: int = 1,
    master_port: int | None = None,
    extra_args: Sequence[str] = (),
    debug: bool = False,
) -> LaunchPlan:
    """The plan for ``config`` on the hosts as ``checks`` found them.

    ``master_port`` replaces an ``"auto"`` port (found free on node 0 at launch); without it an
    auto port shows as :data:`AUTO_PORT_PLACEHOLDER`. ``extra_args`` follow ``[job] args``.
    """
    if not RUN_ID.fullmatch(run_id):
        raise PlanError(f"not a run id: {run_id!r}")
    facts = _facts_by_host(config, checks)
    backend = resolve_backend(config, facts)
    port: int | Literal["auto"] = (
        master_port if master_port is not None else config.cluster.master_port
    )
    hosts = config.ordered_hosts
    lone = len(hosts) == 1
    master_addr = "127.0.0.1" if one_machine(config) else config.head.address
    entry = job_entry(config)
    args = trainer_args(config, extra_args)
    rendezvous = Rendezvous(len(hosts), master_addr, port)
    counts = [procs_per_node(config, host, facts[host.name]) for host in hosts]
    for host, count in zip(hosts, counts, strict=True):
        if count < 1:
            raise PlanError(
                f"{host.name} would start no process: give it GPUs or set job.nproc_per_node"
            )
    nodes = []
    for rank, (host, nproc) in enumerate(zip(hosts, counts, strict=True)):
        host_facts = facts[host.name]
        devices = _visible_devices(host, host_facts, nproc) if backend == "nccl" else None
        ifname = None if lone else _socket_ifname(host, host_facts, config.head.address)
        run_dir = layout.host_run_dir(_workdir(host, host_facts), run_id, rank)
        env = rank_environment(host, config.job, backend, devices, ifname, run_dir, debug)
        env |= _flight_recorder(host, host_facts, backend, run_dir)
        argv = torchrun_argv(host, config, rendezvous, rank, nproc, run_dir, attempt, args)
        nodes.append(
            NodeLaunch(
                host=host,
                node_rank=rank,
                nproc=nproc,
                run_dir=run_dir,
                env=env,
                argv=argv,
                cuda_visible_devices=devices,
                socket_ifname=ifname,
            )
        )
    return LaunchPlan(
        run_id=run_id,
        attempt=attempt,
        backend=backend,
        master_addr=master_addr,
        master_port=port,
        entry=entry,
        args=args,
        nodes=tuple(nodes),
        debug=debug,
    )


def job_entry(config: Config) -> Entry:
    """What every rank runs: the user's script or module, else the bundled trainer."""
    return "script" if config.job.script else "module" if config.job.module else "trainer"


def with_master_port(plan: LaunchPlan, port: int) -> LaunchPlan:
    """``plan`` with an ``"auto"`` master port replaced by ``port`` in every command line."""
    nodes = tuple(
        replace(node, argv=tuple(torchrun_flag(node.argv, "--master-port", str(port))))
        for node in plan.nodes
    )
    return replace(plan, master_port=port, nodes=nodes)


SOCKET_IFNAME_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
"""The interface each library's sockets use: the one that reaches node 0, chosen per host."""


def torchrun_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """``argv`` with torchrun's ``flag=…`` set to ``value``.

    Only the first occurrence is torchrun's: the same flag further on belongs to the script.
    """
    updated = list(argv)
    for index, arg in enumerate(updated):
        if arg.startswith(f"{flag}="):
            updated[index] = f"{flag}={value}"
            return updated
    raise ValueError(f"{flag} is not in the command")


def _facts_by_host(config: Config, checks: Sequence[HostCheck]) -> dict[str, HostFacts]:
    facts = {check.host.name: check.facts for check in checks if check.facts is not None}
    missing = [host.name for host in config.ordered_hosts if host.name not in facts]
    if missing:
        raise PlanError(
            f"no facts for {', '.join(missing)}: the check could not probe "
            f"{'it' if len(missing) == 1 else 'them'}"
        )
    return facts


def _workdir(host: HostConfig, facts: HostFacts) -> str:
    """The workdir as an absolute path on the host: the probe expanded ``~`` there."""
    expanded = facts.disk.path
    if isinstance(expanded, str) and expanded.startswith("/"):
        return expanded
    if host.workdir.startswith("/"):
        return host.workdir
    raise PlanError(
        f"{host.name}: workdir {host.workdir!r} is not an absolute path on the host; "
        "use an absolute path or one starting with ~/"
    )


def _visible_devices(host: HostConfig, facts: HostFacts, nproc: int) -> str | None:
    """The host's selected GPUs, free ones first, as many as it runs processes."""
    selected = selected_gpus(host, facts)
    if not selected:
        return None
    ordered = sorted(selected, key=lambda gpu: (not is_free(gpu), gpu.index))
    return ",".join(str(gpu.index) for gpu in ordered[:nproc])


def _socket_ifname(host: HostConfig, facts: HostFacts, master_address: str) -> str | None:
    if host.socket_ifname != AUTO:
        return host.socket_ifname
    return choose_socket_ifname(facts, master_address)


def rank_environment(
    host: HostConfig,
    job: JobConfig,
    backend: str,
    devices: str | None,
    ifname: str | None,
    run_dir: str,
    debug: bool,
) -> dict[str, str]:
    env: dict[str, str] = {}
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = devices
    if ifname is not None:
        gloo, nccl = SOCKET_IFNAME_ENV
        env[gloo] = ifname
        if backend == "nccl":
            env[nccl] = ifname
    # Without it every rank of a CPU node spawns a thread per core and they fight for them.
    env["OMP_NUM_THREADS"] = "1"
    env[layout.RUN_DIR_ENV] = run_dir
    if not job.instrument:
        env |= UNINSTRUMENTED_ENV
    env.update(host.env)
    if debug:
        env.update(DEBUG_ENV)
    return env


def _flight_recorder(
    host: HostConfig, facts: HostFacts, backend: str, run_dir: str
) -> dict[str, str]:
    """torch's flight recorder on, under the names the host's torch reads (its probe found
    them)."""
    found = facts.torch.flight_recorder
    return flight_recorder_environment(
        host, {role: (name,) for role, name in found.items()}, backend, run_dir
    )


FLIGHT_RECORDER_NAMES: Mapping[str, tuple[str, ...]] = {
    "buffer": ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
    "dump_on_timeout": ("TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"),
    "file": ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
}
"""Each flight-recorder setting under every name torch has read it by (the probe script's
``FLIGHT_RECORDER``, which looks for them in a host's libraries): a batch script, written
before any node is probed, sets them all; a torch ignores the names it does not read."""


def flight_recorder_environment(
    host: HostConfig, names: Mapping[str, Sequence[str]], backend: str, run_dir: str
) -> dict[str, str]:
    """torch's flight recorder on under ``names`` (role → the names to set): each rank's last
    collectives, dumped into the run directory (by NCCL's watchdog on a timeout, by ``ddptui
    dump`` otherwise). A setting the host's own environment gives, under any of its names,
    is left to it."""
    wanted = {
        "buffer": str(FLIGHT_RECORDER_ENTRIES),
        "file": layout.flight_prefix(run_dir),
        **({"dump_on_timeout": "1"} if backend == "nccl" else {}),
    }
    return {
        name: value
        for role, value in wanted.items()
        if not any(name in host.env for name in FLIGHT_RECORDER_NAMES.get(role, ()))
        for name in names.get(role, ())
    }


def torchrun_argv(
    host: HostConfig,
    config: Config,
    rendezvous: Rendezvous,
    node_rank: int | str,
    nproc: int,
    run_dir: str,
    attempt: int | str,
    args: Sequence[str],
) -> tuple[str, ...]:
    """The command line that starts torchrun on ``host`` as node ``node_rank`` of attempt
    ``attempt``, running the job's entry with ``args`` (:func:`trainer_args`); a master port
    ``"auto"`` shows as :data:`AUTO_PORT_PLACEHOLDER` until it is known."""
    port = rendezvous.master_port
    torchrun = [
        "-m",
        "torch.distributed.run",
        f"--nnodes={rendezvous.nnodes}",
        f"--node-rank={node_rank}",
        f"--nproc-per-node={nproc}",
        f"--master-addr={rendezvous.master_addr}",
        f"--master-port={AUTO_PORT_PLACEHOLDER if port == AUTO else port}",
        "--max-restarts=0",
        f"--log-dir={layout.log_dir(run_dir, attempt)}",
        "--redirects=3",
    ]
    entry = job_entry(config)
    if entry == "trainer":
        target = [
            "-m",
            "trainer",
            f"--run-dir={run_dir}",
            f"--checkpoint-every={config.job.checkpoint_every}",
        ]
    elif entry == "module":
        assert config.job.module is not None
        target = ["-m", config.job.module]
    else:
        # Relative to the code directory, the ranks' working directory.
        assert config.job.script_target is not None
        target = [config.job.script_target]
    return tuple(python_argv(host, *torchrun, *target, *args))
