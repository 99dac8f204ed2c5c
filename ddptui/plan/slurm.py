"""The batch script of a Slurm run (pure): a ``[slurm]`` config → what ``sbatch`` runs.

One ``srun --ntasks-per-node=1 --kill-on-bad-exit=1`` step starts one ``torchrun`` per node,
as Slurm's users write it by hand: static rendezvous on node 0 of the allocation (its
``NodeAddr``: node names need not resolve), ``--node-rank=$SLURM_NODEID``, a master port
derived from the job id so that two jobs sharing a node do not collide. Every node writes the
run directory layout of an SSH run (:mod:`ddptui.layout`) under the shared ``workdir``:
its own ``node<N>/``, torchrun's console in ``node/attempt-<N>.out`` and its exit status in
``node/attempt-<N>.exit``.

Slurm's ``--signal=B:USR1@90`` reaches the script before the time limit (or a preemption
with a grace time): it asks the ranks to checkpoint and stop (``control/stop``) and requeues
the job, whose next start resumes from that checkpoint as the next attempt.

Values the script only knows on the nodes (the node rank, node 0's address…) are written into
the shared planning functions as :func:`shell` references and become ``"$NAME"`` when the
script is rendered, every other word quoted as it is.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ddptui import layout
from ddptui.config.model import AUTO, Config
from ddptui.plan.launch import (
    FLIGHT_RECORDER_NAMES,
    RUN_ID,
    PlanError,
    Rendezvous,
    flight_recorder_environment,
    rank_environment,
    torchrun_argv,
    trainer_args,
)
from ddptui.plan.run_plan import RunPlan
from ddptui.remote.commands import python_argv

PORT_BASE = 15000
PORT_SPAN = 15000
"""Master ports 15000–29999: below Linux's ephemeral range (32768–60999), so no outgoing
connection holds one by chance."""
SIGNAL_LEAD_S = 90
"""How long before its time limit Slurm warns the job: time to checkpoint a large model."""
RECOVERY_WAIT_S = 600
"""How long a failed attempt's job waits for its supervisor to name the next attempt's nodes:
recovery checks the spare first; a supervisor gone for longer is not coming back soon."""
NODE_RANK = "node_rank"
"""The shell variable holding the node's rank: its place in the attempt's nodes."""
_MARK = "\x00"
"""Delimits a shell reference inside a word; no hosts-file value may hold it."""


def master_port(job_id: str) -> int:
    """The master port the batch script of job ``job_id`` derives (``SLURM_JOB_ID``: the part
    before an array index)."""
    return PORT_BASE + int(job_id.split("_", 1)[0]) % PORT_SPAN


def shell(name: str) -> str:
    """A reference to the shell variable ``name``, to place inside a word of the script."""
    return f"{_MARK}{name}{_MARK}"


def shell_word(word: str) -> str:
    """``word`` as one shell word: its text quoted, its :func:`shell` references expanded."""
    parts = word.split(_MARK)
    quoted = [
        f'"${{{part}}}"' if odd else shlex.quote(part)
        for odd, part in ((index % 2 == 1, part) for index, part in enumerate(parts))
        if odd or part
    ]
    return "".join(quoted) or "''"


@dataclass(frozen=True)
class BatchPlan(RunPlan):
    """One Slurm job of a run: its script and where its files go."""

    run_id: str
    attempt: int
    """The attempt the job's first start is; a requeued start is the next one."""
    nodes: int
    nproc: int
    backend: Literal["nccl", "gloo"]
    run_root: str
    """``<workdir>/runs/<run id>``: the run's directory on the shared filesystem."""
    script: str
    debug: bool = False
    """NCCL's and torch.distributed's debug output asked for (``--debug``)."""
    extra_args: tuple[str, ...] = ()
    """The arguments given at launch beyond ``[job] args`` (the run's record keeps them)."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc

    @property
    def script_path(self) -> str:
        """Where the launch keeps the script it submitted, beside the run's node directories."""
        return layout.slurm_script(self.run_root, self.attempt)

    @property
    def heading(self) -> str:
        """``run ID: 2 node(s) × 4 = 8 ranks, backend nccl``."""
        return (
            f"run {self.run_id}: {self.nodes} node(s) × {self.nproc} = {self.world_size} ranks, "
            f"backend {self.backend}"
        )

    @property
    def queues(self) -> bool:
        return True

    def text(self, upload: Sequence[str]) -> str:
        """What the dry run says, then the batch script."""
        return f"{self._where_it_runs(upload)}\n\n{self.script}"

    def dry_run(self, upload: Sequence[str]) -> tuple[str, str | None]:
        """The batch script alone on stdout, ready for sbatch."""
        return self.script, self._where_it_runs(upload)

    def started(self, job_id: str | None) -> str:
        return f"run {self.run_id}: Slurm job {job_id}; its files are in {self.run_root}."

    def _where_it_runs(self, upload: Sequence[str]) -> str:
        """The heading, where the ranks run from and what is uploaded there."""
        return (
            f"{self.heading}; the ranks run from {layout.root_code_dir(self.run_root)}, where "
            f"the code goes: {upload[0]}"
        )


def plan_batch(
    config: Config,
    *,
    run_id: str,
    workdir: str,
    attempt: int = 1,
    extra_args: Sequence[str] = (),
    debug: bool = False,
    set_aside: Sequence[str] = (),
) -> BatchPlan:
    """The batch script for ``config`` (a ``[slurm]`` one); ``workdir`` is the shared workdir as
    an absolute path (``~`` expanded on the head, whose home the nodes share); ``set_aside``:
    the nodes the run's recovery set aside, never allocated again."""
    slurm, node = config.slurm, config.node
    if slurm is None or node is None:
        raise PlanError(f"{config.path}: not a Slurm cluster (no [slurm] table)")
    if not RUN_ID.fullmatch(run_id):
        raise PlanError(f"not a run id: {run_id!r}")
    if not workdir.startswith("/"):
        raise PlanError(f"workdir {workdir!r} is not an absolute path")
    wanted = config.job.nproc_per_node
    nproc = slurm.gpus_per_node if wanted == "gpus" else wanted
    if not nproc:
        raise PlanError("no process to start on a node: set [job] nproc_per_node")
    backend: Literal["nccl", "gloo"] = (
        ("nccl" if slurm.gpus_per_node else "gloo")
        if config.cluster.backend == AUTO
        else config.cluster.backend
    )
    run_root = layout.run_root(workdir, run_id)
    run_dir = layout.node_dir(run_root, shell(NODE_RANK))
    rendezvous = Rendezvous(shell("SLURM_NNODES"), shell("MASTER_ADDR"), shell("MASTER_PORT"))
    args = trainer_args(config, extra_args)
    argv = torchrun_argv(
        node, config, rendezvous, shell(NODE_RANK), nproc, run_dir, shell("attempt"), args
    )
    env = rank_environment(node, config.job, backend, None, None, run_dir, debug)
    env |= flight_recorder_environment(node, FLIGHT_RECORDER_NAMES, backend, run_dir)
    text = _script(
        config,
        run_root,
        run_dir,
        env,
        argv,
        run_id=run_id,
        attempt=attempt,
        nproc=nproc,
        backend=backend,
        set_aside=set_aside,
    )
    return BatchPlan(
        run_id, attempt, slurm.nodes, nproc, backend, run_root, text, debug, tuple(extra_args)
    )


def _sbatch_lines(
    config: Config, run_id: str, run_root: str, set_aside: Sequence[str]
) -> list[str]:
    slurm = config.slurm
    assert slurm is not None
    options = [
        f"--job-name=ddptui-{run_id}",
        f"--nodes={slurm.nodes + slurm.spare_nodes}",
        "--ntasks-per-node=1",
    ]
    if slurm.gpus_per_node:
        options.append(f"--gpus-per-node={slurm.gpus_per_node}")
    for key in ("partition", "time", "account", "qos", "constraint"):
        value = getattr(slurm, key)
        if value is not None:
            options.append(f"--{key}={value}")
    if slurm.exclude or set_aside:
        options.append(f"--exclude={','.join((*slurm.exclude, *set_aside))}")
    options += [
        f"--output={layout.slurm_output(run_root)}",
        "--open-mode=append",
        f"--signal=B:USR1@{SIGNAL_LEAD_S}",
        "--requeue",
    ]
    if config.recovery.on:
        # A node that fails leaves the allocation, not the job: recovery runs the next attempt
        # on the others and a spare.
        options.append("--no-kill")
    options += slurm.sbatch_args
    # The values hold no whitespace or quotes (the hosts file's validation): each option is
    # one word as sbatch splits an #SBATCH line.
    return [f"#SBATCH {option}" for option in options]


def _script(
    config: Config,
    run_root: str,
    run_dir: str,
    env: Mapping[str, str],
    argv: Sequence[str],
    *,
    run_id: str,
    attempt: int,
    nproc: int,
    backend: str,
    set_aside: Sequence[str],
) -> str:
    slurm, node = config.slurm, config.node
    assert slurm is not None and node is not None
    stop = layout.control_request(layout.node_dir(run_root, 0), "stop")
    per_node = f"{nproc} process{'es' if nproc != 1 else ''} per node"
    spares = f" and {slurm.spare_nodes} spare(s)" if slurm.spare_nodes else ""
    exports = [f"export {key}={shell_word(value)}" for key, value in env.items()]
    ifname_set = node.socket_ifname != AUTO or "GLOO_SOCKET_IFNAME" in node.env
    if node.socket_ifname != AUTO:
        exports.insert(0, f"export GLOO_SOCKET_IFNAME={shlex.quote(node.socket_ifname)}")
        if backend == "nccl":
            exports.insert(1, f"export NCCL_SOCKET_IFNAME={shlex.quote(node.socket_ifname)}")
    command = " ".join(shell_word(word) for word in argv)
    resume = " ".join(shlex.quote(arg) for arg in config.job.resume_args)
    code_dir = layout.root_code_dir(run_root)
    agent = python_argv(node, layout.node_agent(run_root), "run", run_dir, code_dir)
    lines = [
        "#!/bin/bash",
        f"# ddptui run {run_id}: {slurm.nodes} node(s){spares}, {per_node}, backend {backend}.",
        *_sbatch_lines(config, run_id, run_root, set_aside),
        "",
        f"run={shlex.quote(run_root)}",
        f'nodes_of() {{ echo "{layout.slurm_nodes("$run", "$1")}"; }}',
        "# A requeued job starts over as the run's next attempt, from its newest checkpoint:",
        "# past every attempt that named its nodes, those recovery ran in this allocation too.",
        f"export attempt=$(( {attempt} + ${{SLURM_RESTART_COUNT:-0}} ))",
        'while [ -e "$(nodes_of "$attempt")" ]; do attempt=$(( attempt + 1 )); done',
        "# The attempt's nodes, node 0 first: the allocation's first, but for any recovery set",
        "# aside (a requeued job may be given one again).",
        f'aside="{layout.slurm_set_aside("$run")}"',
        'export run_nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST"'
        ' | if [ -s "$aside" ]; then grep -vxF -f "$aside"; else cat; fi'
        f" | head -n {slurm.nodes} | tr '\\n' ' ')",
        "export PYTHONUNBUFFERED=1",
        f"export MASTER_PORT=$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN} ))",
        "",
        "# Slurm's warning before the time limit: checkpoint, stop, and come back requeued.",
        "requeue=0",
        "on_warning() {",
        "    requeue=1",
        f"    mkdir -p {shlex.quote(posixpath.dirname(stop))} && touch {shlex.quote(stop)}",
        "}",
        "trap on_warning USR1",
        "",
        "read -r -d '' node_script <<'NODE'",
        "# This node's rank: its place in the attempt's nodes.",
        f"{NODE_RANK}=0",
        'for name in $run_nodes; do [ "$name" = "$SLURMD_NODENAME" ] && break;'
        f" {NODE_RANK}=$(( {NODE_RANK} + 1 )); done",
        *(
            []
            if ifname_set
            else [
                "# The interface that holds node 0's address, or the one that reaches it.",
                'ifname=$(ip -o addr show to "$MASTER_ADDR" 2>/dev/null'
                " | awk '{print $2; exit}')",
                'if [ -z "$ifname" ]; then',
                '    ifname=$(ip -o route get "$MASTER_ADDR" 2>/dev/null'
                " | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')",
                "fi",
                'if [ -n "$ifname" ] && [ "$ifname" != lo ]; then',
                '    export GLOO_SOCKET_IFNAME="$ifname"'
                + (' NCCL_SOCKET_IFNAME="$ifname"' if backend == "nccl" else ""),
                "fi",
            ]
        ),
        *exports,
        f"resume=({resume})",
        "if (( attempt == 1 )); then resume=(); fi",
        "# The node agent starts the attempt as on an SSH host (the marks its processes are found",
        "# by, the ranks' stack handler, torchrun's exit status) and waits for it.",
        f'exec {" ".join(shell_word(word) for word in agent)} "$attempt" {command} '
        '"${resume[@]}"',
        "NODE",
        "",
        "while :; do",
        '    [ -e "$(nodes_of "$attempt")" ] || echo $run_nodes > "$(nodes_of "$attempt")"',
        "    head_node=${run_nodes%% *}",
        "    # Node 0's address as Slurm has it: node names need not resolve on the nodes.",
        "    MASTER_ADDR=$(scontrol show node \"$head_node\" | tr ' ' '\\n'"
        " | sed -n 's/^NodeAddr=//p')",
        "    export MASTER_ADDR=${MASTER_ADDR:-$head_node}",
        f"    srun --nodes={slurm.nodes} --ntasks={slurm.nodes} --ntasks-per-node=1"
        " --nodelist=\"$(echo $run_nodes | tr ' ' ,)\" --kill-on-bad-exit=1"
        ' bash -c "$node_script" &',
        "    step=$!",
        "    # A trapped signal ends a wait early: wait again until the step has ended.",
        '    while wait "$step"; status=$?; kill -0 "$step" 2>/dev/null; do :; done',
        *(_recovery_lines() if config.recovery.on else ["    break"]),
        "done",
        'if (( requeue )); then scontrol requeue "$SLURM_JOB_ID"; fi',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def _recovery_lines() -> list[str]:
    """A failed attempt's end in the loop of a run with ``[recovery]`` on: its supervisor
    names the next attempt's nodes in this allocation (a spare in place of the node at fault),
    or cancels the job; a supervisor that says neither in time ends the job as it failed."""
    return [
        "    if (( requeue || status == 0 )); then break; fi",
        '    next="$(nodes_of $(( attempt + 1 )))"',
        "    waited=0",
        f'    until [ -e "$next" ] || (( requeue || waited >= {RECOVERY_WAIT_S} )); do',
        "        sleep 1",
        "        waited=$(( waited + 1 ))",
        "    done",
        "    if (( requeue )); then break; fi",
        '    [ -e "$next" ] || break',
        "    attempt=$(( attempt + 1 ))",
        '    run_nodes=$(< "$next")',
    ]
