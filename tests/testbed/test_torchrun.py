"""torchrun rendezvous and gloo collectives really cross the test bed's namespaces."""

from __future__ import annotations

import subprocess

import pytest

from tests.testbed import TestBed

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# Self-contained on purpose: what runs on the hosts imports torch, never ddptui.
ALL_REDUCE = """
import os
import socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
# One write per line: the ranks of a node share stdout, and print() writes the newline apart.
line = f"rank={dist.get_rank()} host={socket.gethostname()} sum={value.item():g}\\n"
os.write(1, line.encode())
dist.destroy_process_group()
"""


def test_all_reduce_over_two_hosts_by_two_processes(testbed: TestBed) -> None:
    node0, node1 = testbed.hosts[:2]
    launches = []
    for rank, host in enumerate((node0, node1)):
        script = host.workdir / "all_reduce.py"
        script.write_text(ALL_REDUCE)
        argv = [
            "env",
            f"GLOO_SOCKET_IFNAME={host.ifname}",
            "OMP_NUM_THREADS=1",
            testbed.python,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            f"--node_rank={rank}",
            "--nproc-per-node=2",
            f"--master_addr={node0.address}",
            "--master_port=29500",
            str(script),
        ]
        launches.append(
            subprocess.Popen(
                testbed.ssh_argv(host, argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [launch.communicate(timeout=180) for launch in launches]
    for launch, (_, err) in zip(launches, outputs, strict=True):
        assert launch.returncode == 0, err[-3000:]
    lines = sorted(
        line for out, _ in outputs for line in out.splitlines() if line.startswith("rank=")
    )
    assert lines == [
        f"rank=0 host={node0.hostname} sum=10",
        f"rank=1 host={node0.hostname} sum=10",
        f"rank=2 host={node1.hostname} sum=10",
        f"rank=3 host={node1.hostname} sum=10",
    ]
