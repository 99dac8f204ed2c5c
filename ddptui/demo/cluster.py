"""A demo cluster: N loopback SSH hosts and the hosts file that describes them, in a private
temporary directory that is gone when the cluster closes."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from ddptui.demo.sshd import LOOPBACK, LoopbackHost, LoopbackSshd, write_key_pair

TRAINER_ARGS = (
    "--width",
    "64",
    "--depth",
    "2",
    "--samples",
    "2048",
    "--batch-size",
    "16",
    "--lr",
    "1e-2",
    "--epochs",
    "100",
)
"""A model small enough that 2 hosts × 2 processes take about a minute on 2 CPU cores for
:data:`STEPS` steps: long enough to stop and resume it in the console."""
STEPS = 3000
CHECKPOINT_EVERY = 100
"""A second or two of steps on 2 CPU cores: what a resume redoes after the demo kills a node
(``--spare``), so that the run heals in seconds."""
SPARE = "demo-spare"
CONNECT_TIMEOUT_S = 10
"""Generous: on a busy small machine the hosts share the CPU with torch importing."""
TORCH_IMPORT_TIMEOUT_S = 60
"""Every demo host imports torch at once on this machine's cores, often beside a running demo."""


@dataclass(frozen=True)
class DemoCluster:
    root: Path
    """The private directory (0700) holding keys, the hosts file and every host's home."""
    hosts_file: Path
    hosts: Sequence[LoopbackHost]


@contextmanager
def demo_cluster(
    nodes: int, procs: int, steps: int = STEPS, *, spare: bool = False
) -> Iterator[DemoCluster]:
    """Serve ``nodes`` hosts on 127.0.0.1, each to run ``procs`` trainer processes for
    ``steps`` steps; with ``spare``, one more host, :data:`SPARE`, that recovery resumes the run
    on when a node fails."""
    root = Path(tempfile.mkdtemp(prefix="ddptui-demo-"))
    try:
        client = root / "client"
        client.mkdir(mode=0o700)
        identity = client / "id_ed25519"
        servers = LoopbackSshd(root, write_key_pair(identity, "ddptui-demo-client"))
        try:
            names = [f"demo-{index}" for index in range(nodes)] + ([SPARE] if spare else [])
            hosts = [servers.add_host(name) for name in names]
            known_hosts = client / "known_hosts"
            known_hosts.write_text("".join(host.known_hosts_line() + "\n" for host in hosts))
            hosts_file = root / "hosts.toml"
            hosts_file.write_text(
                hosts_toml(servers.user, identity, known_hosts, hosts, procs, steps, spare=spare)
            )
            yield DemoCluster(root, hosts_file, hosts)
        finally:
            servers.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def hosts_toml(
    user: str,
    identity: Path,
    known_hosts: Path,
    hosts: Sequence[LoopbackHost],
    procs: int,
    steps: int = STEPS,
    *,
    spare: bool = False,
) -> str:
    """The hosts file of ``hosts``; with ``spare``, the last of them is a spare and recovery is
    on."""
    document: dict[str, object] = {
        "cluster": {
            "user": user,
            "identity_file": str(identity),
            "known_hosts": str(known_hosts),
            "python": sys.executable,
            "backend": "gloo",
            # Found free at launch, so demos running side by side never collide.
            "master_port": "auto",
            "connect_timeout": CONNECT_TIMEOUT_S,
            "torch_import_timeout": TORCH_IMPORT_TIMEOUT_S,
        },
        "hosts": [
            {
                "name": host.name,
                "address": LOOPBACK,
                "port": host.port,
                "workdir": str(host.home / "ddptui-runs"),
                **({"spare": True} if spare and host is hosts[-1] else {}),
            }
            for host in hosts
        ],
        "job": {
            "nproc_per_node": procs,
            "checkpoint_every": CHECKPOINT_EVERY,
            "args": [*TRAINER_ARGS, "--max-steps", str(steps)],
        },
    }
    if spare:
        document["recovery"] = {"mode": "resume"}
    return tomli_w.dumps(document)
