"""The commented starter hosts file that ``ddptui init`` writes.

It documents every key, so the repository's ``hosts.example.toml`` is this same text
(regenerate it with ``ddptui init hosts.example.toml --force``; a test keeps them equal).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from ddptui.config.model import MAX_PARALLEL_CONNECTS
from ddptui.config.render import assignment

_WIDTH = 96


@dataclass(frozen=True)
class _Key:
    """One documented key; an inactive one is written commented out, showing its syntax."""

    name: str
    value: object
    doc: str
    active: bool = True


@dataclass(frozen=True)
class _Table:
    header: str
    doc: str
    keys: tuple[_Key, ...]


_INTRO = """\
ddptui hosts file. `ddptui config FILE` checks it and prints every host's effective settings.

Paths: identity_file and known_hosts are files on this machine (the head node, where ddptui
runs): `~` and $VARIABLES are expanded here, and a relative path is relative to this file's
directory. python and workdir are paths on each host: they are used as written, so a leading
`~` means that host's home directory."""

_CLUSTER = _Table(
    "[cluster]",
    "Defaults for every host. Each of user, port, identity_file, known_hosts, python or "
    "conda_env, workdir, env, gpus and socket_ifname can be overridden in a [[hosts]] entry.",
    (
        _Key(
            "user",
            "alice",
            "SSH user name. Unset: the User from ~/.ssh/config, else your local user name.",
            active=False,
        ),
        _Key(
            "port",
            22,
            "SSH port. A host is reached as `ssh` reaches it otherwise: ~/.ssh/config's "
            "HostName, HostKeyAlias and ProxyJump apply (a jump host is logged in to once for "
            "all the hosts behind it, with its own settings from ~/.ssh/config).",
        ),
        _Key(
            "identity_file",
            "~/.ssh/id_ed25519",
            "Private key to log in with (keys only: ddptui never asks for a password). "
            "Unset: the keys from ~/.ssh/config and your ssh-agent.",
            active=False,
        ),
        _Key(
            "known_hosts",
            "~/.ssh/known_hosts",
            "Where the hosts' public keys are recorded; a host whose key is neither there nor "
            "in /etc/ssh/ssh_known_hosts is refused until `ddptui trust FILE` adds it here.",
        ),
        _Key(
            "python",
            "python3",
            "Python on each host, with torch installed: a path or a command on the remote "
            "PATH, e.g. ~/miniconda3/envs/pytorch-dist/bin/python.",
        ),
        _Key(
            "conda_env",
            "pytorch-dist",
            "Or the name of a conda environment on each host to run in, instead of python. "
            "A table sets one of the two; a host that sets either replaces the cluster's choice.",
            active=False,
        ),
        _Key(
            "workdir",
            "~/ddptui-runs",
            "Directory on each host for the trainer's code, logs and checkpoints.",
        ),
        _Key(
            "env",
            {"NCCL_DEBUG": "WARN"},
            "Environment variables for the trainer. A host's env is merged over this one.",
        ),
        _Key(
            "gpus",
            "all",
            'Which GPUs to use: "all", a number (the first N; 0 on a CPU-only host), or a '
            "list of indices such as [0, 2].",
        ),
        _Key(
            "socket_ifname",
            "auto",
            "Network interface for NCCL and Gloo traffic (NCCL_SOCKET_IFNAME, "
            'GLOO_SOCKET_IFNAME), e.g. "eth0"; "auto" lets ddptui choose.',
        ),
        _Key(
            "master_port",
            29500,
            'Cluster-wide: the rendezvous port on node 0 (1–65535), or "auto" for a free one.',
        ),
        _Key(
            "backend",
            "auto",
            'Cluster-wide: "nccl", "gloo", or "auto" (nccl when the hosts have GPUs, '
            "gloo otherwise).",
        ),
        _Key("connect_timeout", 10.0, "Cluster-wide: seconds to wait for an SSH connection."),
        _Key(
            "torch_import_timeout",
            20.0,
            "Cluster-wide: seconds the check waits for `import torch` on a host; raise it "
            "where torch lives on a slow network filesystem.",
        ),
        _Key(
            "max_parallel_connects",
            MAX_PARALLEL_CONNECTS,
            "Cluster-wide: at most this many SSH connections are opened at once. Each host sees "
            "one, a jump host (ProxyJump) one for all behind it; lower it to 10 if a "
            "ProxyCommand sends every connection through one bastion, whose MaxStartups "
            "(10:30:100 by default) drops handshakes past 10.",
        ),
        _Key(
            "min_free_disk_gb",
            5.0,
            "Cluster-wide: the check flags a host whose workdir has less free space (GB).",
        ),
        _Key(
            "max_clock_skew_s",
            2.0,
            "Cluster-wide: the check flags a host whose clock differs from this machine's by "
            "more than this many seconds.",
        ),
    ),
)

_HOSTS_DOC = (
    "One [[hosts]] entry per machine. Node ranks follow this list, except that the host "
    "marked rank0 is node 0, the rendezvous host, and that a spare (below) has none until it "
    "takes a failed host's place."
)
_NAME_DOC = "Unique short name for the console and run records: letters, digits, '.', '_', '-'."
_ADDRESS_DOC = "Hostname or IP address to connect to; no two hosts share an address and port."

_HOSTS = (
    _Table(
        "[[hosts]]",
        _HOSTS_DOC,
        (
            _Key("name", "gpu-a", _NAME_DOC),
            _Key("address", "192.168.1.10", _ADDRESS_DOC),
            _Key(
                "rank0",
                True,
                "Make this host node 0 (at most one host). Unset: the first host listed.",
                active=False,
            ),
        ),
    ),
    _Table(
        "[[hosts]]",
        "Any machine key from [cluster] can be set here for this host alone.",
        (
            _Key("name", "gpu-b", _NAME_DOC),
            _Key("address", "192.168.1.11", _ADDRESS_DOC),
            _Key("port", 2222, "This host's SSH port, instead of [cluster]'s.", active=False),
            _Key("gpus", [0, 1], "Only GPUs 0 and 1 of this host.", active=False),
            _Key(
                "env",
                {"NCCL_IB_DISABLE": "1"},
                "Added to [cluster]'s env; a variable set in both takes this value.",
                active=False,
            ),
        ),
    ),
)

_SPARE_HOST = _Table(
    "[[hosts]]",
    "A spare host, for [recovery] below: checked with the others, and idle until a run needs it "
    "in place of a host at fault.",
    (
        _Key("name", "gpu-c", _NAME_DOC),
        _Key("address", "192.168.1.12", _ADDRESS_DOC),
        _Key(
            "spare",
            True,
            "Start no run on this host: it waits to take a failed host's place. Node 0 is never "
            "a spare: it holds the rendezvous and the bundled trainer's checkpoints.",
        ),
    ),
)

_JOB = _Table(
    "[job]",
    "What to run: the bundled trainer unless script or module is set.",
    (
        _Key(
            "nproc_per_node",
            "gpus",
            'Processes per host: "gpus" (one per selected GPU) or a number (CPU-only hosts '
            "need one).",
        ),
        _Key("checkpoint_every", 200, "Save a checkpoint every this many steps."),
        _Key(
            "args",
            ["--batch-size", "32"],
            "Extra arguments for the trainer (or for your script or module).",
        ),
        _Key(
            "script",
            "train.py",
            "Your own entry point instead of the bundled trainer: a file, or a directory with "
            "__main__.py, on this machine (relative to this file). Its directory is uploaded "
            "with every run (see dir) and the ranks run it from there. Every rank gets "
            "DDPTUI_RUN_DIR in its environment; write events there to see per-rank loss "
            "(docs/events.md).",
            active=False,
        ),
        _Key(
            "module",
            "mypkg.train",
            "Or a module, run as python -m MODULE: one installed on every host, or a package "
            "inside dir.",
            active=False,
        ),
        _Key(
            "dir",
            ".",
            "The directory uploaded with every run (default: the one holding script): your "
            "project, less what its .gitignore files and exclude leave out. A relaunch sends "
            "only the files that changed.",
            active=False,
        ),
        _Key(
            "exclude",
            ["data/", "*.pt"],
            "More paths to leave out of the upload, as .gitignore lines.",
            active=False,
        ),
        _Key(
            "max_upload_mb",
            100.0,
            "Nothing is uploaded above this many MiB: the error names the largest files.",
        ),
        _Key(
            "memory_per_process_gb",
            4.0,
            "Host memory one process needs, for the check (default: about 0.3, a rank that has "
            "imported torch): it says when a host has too little for nproc_per_node of them.",
            active=False,
        ),
        _Key(
            "checkpoint_files",
            ["snapshot.pt", "ckpt/*.pt"],
            "Checkpoints your script writes where it runs (globs relative to its directory): "
            "on resume, the newest copy is copied to every host that lacks it. Hosts that share "
            "the workdir (an NFS home) need none of it.",
            active=False,
        ),
        _Key(
            "loss_pattern",
            r"epoch \d+ it (?P<step>\d+): (?P<loss>\S+)",
            "For a script that writes no step events: how its output says the loss, a regular "
            "expression with groups named loss and (optionally) step. Without it the common "
            "shapes are read ({'loss': …}, loss=…, loss: …, step N … loss X).",
            active=False,
        ),
        _Key(
            "instrument",
            False,
            "A script that trains with Lightning, Hugging Face's Trainer or Accelerate writes "
            "ddptui's events with no change to it (every rank's loss, speed, memory, its "
            "evaluations and checkpoint saves); false leaves the script alone, and the loss is "
            "read from its output (TTY_COMPATIBLE=1 lets rich, Lightning's progress bar, write "
            "it as it goes).",
            active=False,
        ),
        _Key(
            "resume_args",
            ["--resume", "latest"],
            "Arguments added when a stopped run is resumed.",
        ),
        _Key(
            "stop_grace_s",
            60.0,
            "Seconds a graceful stop waits for the checkpoint and a clean exit before SIGTERM, "
            "and SIGTERM waits before SIGKILL (torchrun left behind once every rank has ended: "
            "20 s, then 10 s).",
        ),
        _Key(
            "hang_timeout_s",
            600.0,
            "A run is hung when no rank on any host that answers has made a step for this many "
            "seconds. Unset: the larger of 20 s and 10 of the slowest rank's step-event intervals; "
            "a rank's phase events (a checkpoint save…) stretch it. A script without step "
            "events: no output for this long while every rank sits idle (unset: 300 s).",
            active=False,
        ),
        _Key(
            "on_hang",
            "stop",
            'What to do with a hung run: "wait" (the default) records the hang and leaves the run '
            'for you to look at or stop; "stop" stops the run once it has been hung for the window '
            'above and records it failed ("hung at step N").',
            active=False,
        ),
    ),
)


_RECOVERY = _Table(
    "[recovery]",
    "What happens when a host fails a run (its processes killed, it stopped answering, its GPU "
    "or network failed): ddptui can resume the run by itself from its checkpoint, with a spare "
    "host in place of that one. A failure in the code itself is left for you: it would fail "
    "again on any host.",
    (
        _Key(
            "mode",
            "off",
            '"off" (the default) records the run failed and leaves it for you; "resume" '
            "resumes it as above.",
        ),
        _Key(
            "max_restarts",
            5,
            "At most this many resumes in any window_s; one more and the run is recorded failed, "
            "every incident listed: a run that keeps failing needs a person.",
        ),
        _Key("window_s", 3600.0, "The window, in seconds, that max_restarts counts in."),
        _Key(
            "min_nodes",
            2,
            "With no spare left, go on without the host at fault, down to this many nodes "
            "(unset: never with fewer). The bundled trainer keeps its global batch and its "
            "sample order; your own script only with elastic = true.",
            active=False,
        ),
        _Key(
            "elastic",
            False,
            "Your script can go on with fewer nodes (it reads WORLD_SIZE and keeps its global "
            "batch itself): min_nodes applies to it too.",
        ),
        _Key(
            "notify",
            ["/usr/local/bin/page-me", "--team", "ml"],
            "A command run on this machine for every incident, which it reads as JSON on its "
            "stdin: the program and its arguments, run as they are, without a shell.",
            active=False,
        ),
    ),
)


_SLURM = _Table(
    "[slurm]",
    "Or a Slurm cluster: a [slurm] table instead of the [[hosts]] entries, and Slurm picks "
    "the nodes of every run. [cluster]'s python (or conda_env), workdir, env and "
    "socket_ifname apply to every node; workdir must be on a filesystem this machine shares "
    "with the nodes. Every key but nodes is passed to sbatch as its option of the same name; "
    "unset, the site's default holds.",
    (
        _Key("nodes", 2, "How many nodes each run takes."),
        _Key(
            "spare_nodes",
            1,
            "Nodes allocated with the job beyond those and left idle: with [recovery] on, a "
            "node that fails is set aside and the run resumes on a spare in the same "
            "allocation, without queueing again.",
        ),
        _Key(
            "gpus_per_node",
            8,
            'GPUs per node (--gpus-per-node); [job] nproc_per_node = "gpus" starts one process '
            "per GPU. Unset: no GPUs, and nproc_per_node must be a number.",
        ),
        _Key("partition", "gpu", "The partition to submit to."),
        _Key("time", "1-00:00:00", 'The time limit: "MINUTES", "HH:MM:SS" or "DAYS-HH:MM:SS".'),
        _Key("account", "my-lab", "The account to charge."),
        _Key("qos", "normal", "The quality of service."),
        _Key("constraint", "a100&ib", "Node features to require."),
        _Key(
            "exclude",
            ["gpu[07-08]"],
            "Nodes never to use, as Slurm node lists; `ddptui check` names the lines to add.",
        ),
        _Key(
            "sbatch_args",
            ["--mem=0"],
            "Any other sbatch options, one word each (not those above, nor --output, --signal, "
            "--requeue or --ntasks-per-node, which ddptui sets).",
        ),
    ),
)


def starter_text(job: Mapping[str, object] | None = None) -> str:
    """The starter hosts file: valid as written, every key explained by a comment; ``job``:
    ``[job]`` keys written with these values, active (``ddptui init --job``)."""
    chosen = dict(job or {})
    unknown = set(chosen) - {key.name for key in _JOB.keys}
    if unknown:
        raise ValueError(f"not [job] keys: {sorted(unknown)}")
    blocks = [_comment(_INTRO)]
    blocks += (_table(table) for table in (_CLUSTER, *_HOSTS))
    blocks.append(_table(_SPARE_HOST, active=False))
    blocks.append(_table(_JOB, chosen=chosen))
    blocks.append(_table(_RECOVERY))
    blocks.append(_table(_SLURM, active=False))
    return "\n\n".join(blocks) + "\n"


def _table(
    table: _Table, *, active: bool = True, chosen: Mapping[str, object] | None = None
) -> str:
    """``table`` with every key explained; all of it commented out unless ``active``; the
    ``chosen`` keys active with their values."""
    chosen = chosen or {}
    lines = [_comment(table.doc), table.header if active else f"# {table.header}"]
    for key in table.keys:
        line = assignment(key.name, chosen.get(key.name, key.value))
        written = active and (key.active or key.name in chosen)
        lines += [_comment(key.doc), line if written else f"# {line}"]
    return "\n".join(lines)


def _comment(text: str) -> str:
    return "\n".join(
        f"# {line}".rstrip()
        for paragraph in text.split("\n")
        for line in (textwrap.wrap(paragraph, _WIDTH) or [""])
    )
