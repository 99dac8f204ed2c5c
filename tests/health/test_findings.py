"""Findings: each fires on its input and stays quiet on a healthy cluster; how evaluate
orders them and leaves hosts it could not probe out of comparisons."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from ipaddress import ip_address
from typing import Any

import pytest

from ddptui.config.model import ClusterConfig, JobConfig
from ddptui.health import Code, Finding, ProbeFailure, Severity
from ddptui.probe.facts import (
    NA,
    DiskFacts,
    GpuHealth,
    GpuProcess,
    KernelLog,
    PathEntry,
    PortFacts,
    TorchFacts,
    WorkdirSafety,
    XidEvent,
)
from ddptui.remote.status import TRUST_ADVICE, Reach
from tests.helpers import (
    A,
    B,
    C,
    Scenario,
    cpu_host,
    gpu,
    interfaces,
    master_resolves,
    master_unresolvable,
)


def test_healthy_cluster_has_only_information() -> None:
    findings = Scenario().run()
    assert {(f.code, f.host) for f in findings} == {
        (Code.BACKEND_AUTO, None),
        (Code.SOCKET_IFNAME_CHOSEN, A),
        (Code.SOCKET_IFNAME_CHOSEN, B),
        (Code.SOCKET_IFNAME_CHOSEN, C),
    }
    assert all(f.severity is Severity.INFO for f in findings)
    backend = next(f for f in findings if f.code is Code.BACKEND_AUTO)
    assert "nccl" in backend.message


def _world_writable_workdir() -> WorkdirSafety:
    root = PathEntry("/", 0, 0, 0o755, "directory")
    work = PathEntry("/w", 1000, 1000, 0o777, "directory")
    return WorkdirSafety("/w", 1000, 1000, True, (root, work), work)


def _busy(s: Scenario) -> None:
    held = gpu(1, used=30817, processes=(GpuProcess(48213, "/opt/conda/bin/python", 30806),))
    s.part(B, "gpus", devices=(gpu(0), held))


def _off_subnet(s: Scenario) -> None:
    s.edit(B, interfaces=interfaces("lo=127.0.0.1/8", "eth0=192.168.7.2/24"))


def _conda_drift(s: Scenario) -> None:
    # numpy differs everywhere but is also a pip package, so only nccl is conda drift.
    for name, version in ((A, "2.20.5"), (B, "2.20.5"), (C, "2.18.3")):
        s.edit(name, conda_packages={"nccl": version, "numpy": name})


def _nccl_with_cpu_host(s: Scenario) -> None:
    cpu_host(s)
    s.cluster = ClusterConfig(backend="nccl")


def _slow_torch(s: Scenario) -> None:
    s.edit(C, torch=TorchFacts("timeout"))
    s.cluster = ClusterConfig(torch_import_timeout=45)


def _busy_but_enough(s: Scenario) -> None:
    _busy(s)
    s.job = JobConfig(nproc_per_node=1)


def _more_processes_than_gpus(s: Scenario) -> None:
    s.host(C, gpus=1)
    s.job = JobConfig(nproc_per_node=2)


def _loopback_off_subnet(s: Scenario) -> None:
    _off_subnet(s)
    s.edit(B, resolved=(ip_address("127.0.1.1"),))


def _ifname_off_subnet(s: Scenario) -> None:
    s.host(B, socket_ifname="eth1")
    s.edit(B, interfaces=interfaces("eth0=10.0.0.2/24", "eth1=172.16.0.2/16"))


def _head_master_loopback_with_ifname(s: Scenario) -> None:
    master_resolves(A, "127.0.1.1")(s)
    s.host(A, socket_ifname="eth0")


def _probe_crashed(s: Scenario) -> None:
    s.facts[C] = None
    s.probe_failures[C] = ProbeFailure(
        "it exited with an error", 1, 'File "<stdin>", line 9\nSyntaxError: bad'
    )


def _cpu_host_with_more_processes_than_cpus(s: Scenario) -> None:
    s.part(C, "gpus", devices=())
    s.edit(C, cpu_count=2)
    s.job = JobConfig(nproc_per_node=4)


@dataclass(frozen=True)
class Case:
    code: Code
    host: str | None
    severity: Severity
    breaks: Callable[[Scenario], None]
    says: str = ""


def _gpu_health(s: Scenario, **changes: Any) -> None:
    """gpu-b's GPU 1 with its health counters changed."""
    facts = s.facts[B]
    assert facts is not None
    first, second = facts.gpus.devices
    s.part(B, "gpus", devices=(first, replace(second, health=GpuHealth(**changes))))


CASES = [
    Case(
        Code.HOST_UNREACHABLE,
        B,
        Severity.ERROR,
        lambda s: s.unreached(B, Reach.TIMEOUT),
        "detail from ssh",
    ),
    Case(
        Code.HOST_UNREACHABLE,
        B,
        Severity.ERROR,
        lambda s: s.unreached(B, Reach.TIMEOUT, detail=""),
        "no answer within 10 s",
    ),
    Case(Code.HOST_UNREACHABLE, B, Severity.ERROR, lambda s: s.unreached(B, Reach.DNS_FAILED)),
    Case(Code.HOST_UNREACHABLE, B, Severity.ERROR, lambda s: s.unreached(B, Reach.REFUSED)),
    Case(
        Code.HOST_UNREACHABLE,
        B,
        Severity.ERROR,
        lambda s: s.unreached(B, Reach.ERROR),
        "checking gpu-b (10.0.0.2:22) failed: detail from ssh",
    ),
    Case(Code.SSH_AUTH_FAILED, B, Severity.ERROR, lambda s: s.unreached(B, Reach.AUTH_FAILED)),
    Case(
        Code.SSH_KEY_UNUSABLE,
        B,
        Severity.ERROR,
        lambda s: s.unreached(B, Reach.KEY_UNUSABLE, "cannot use identity_file /k: no such file"),
        "this machine cannot use identity_file /k: no such file",
    ),
    Case(Code.HOST_KEY_UNKNOWN, B, Severity.ERROR, lambda s: s.unreached(B, Reach.HOSTKEY_UNKNOWN)),
    Case(Code.HOST_KEY_CHANGED, B, Severity.ERROR, lambda s: s.unreached(B, Reach.HOSTKEY_CHANGED)),
    Case(Code.HOST_KEY_REVOKED, B, Severity.ERROR, lambda s: s.unreached(B, Reach.HOSTKEY_REVOKED)),
    Case(Code.PYTHON_MISSING, C, Severity.ERROR, lambda s: s.unreached(C, Reach.PYTHON_MISSING)),
    Case(Code.PROBE_FAILED, C, Severity.ERROR, lambda s: s.facts.update({C: None})),
    Case(
        Code.PROBE_FAILED,
        C,
        Severity.ERROR,
        _probe_crashed,
        "failed under python3: it exited with an error (exit status 1); its stderr ends:\n"
        'File "<stdin>", line 9\nSyntaxError: bad',
    ),
    Case(
        Code.PROBE_INCOMPLETE,
        B,
        Severity.WARNING,
        lambda s: s.edit(B, section_errors={"disk": "PermissionError: /w"}),
        "PermissionError",
    ),
    Case(Code.TORCH_MISSING, C, Severity.ERROR, lambda s: s.edit(C, torch=TorchFacts("missing"))),
    Case(
        Code.TORCH_IMPORT_TIMEOUT,
        C,
        Severity.ERROR,
        _slow_torch,
        "import torch did not finish within 45 s on gpu-c",
    ),
    Case(
        Code.TORCH_BROKEN,
        C,
        Severity.ERROR,
        lambda s: s.edit(C, torch=TorchFacts("error", "ImportError: libcudart.so.12")),
        "libcudart.so.12",
    ),
    Case(
        Code.DRIVER_MISMATCH,
        C,
        Severity.WARNING,
        lambda s: s.part(C, "gpus", driver_version="535.104.05"),
        "gpu-c has NVIDIA driver 535.104.05; gpu-a and gpu-b have 550.54.15",
    ),
    Case(
        Code.CUDA_DRIVER_MISMATCH,
        B,
        Severity.WARNING,
        lambda s: s.part(B, "gpus", cuda_driver_version="12.2"),
    ),
    Case(
        Code.TORCH_MISMATCH,
        C,
        Severity.ERROR,
        lambda s: s.part(C, "torch", version="2.3.0+cu121"),
        "gpu-c has torch 2.3.0; gpu-a and gpu-b have 2.4.1",
    ),
    Case(
        Code.TORCH_CUDA_MISMATCH, C, Severity.ERROR, lambda s: s.part(C, "torch", cuda_build="11.8")
    ),
    Case(
        Code.NCCL_MISMATCH, C, Severity.ERROR, lambda s: s.part(C, "torch", nccl_version="2.18.1")
    ),
    Case(
        Code.PYTHON_MISMATCH, B, Severity.WARNING, lambda s: s.part(B, "python", version="3.10.14")
    ),
    Case(
        Code.PACKAGE_DRIFT,
        B,
        Severity.WARNING,
        lambda s: s.edit(B, pip_packages={"torch": "2.4.1+cu121", "numpy": "2.0.1", "tqdm": "4.6"}),
        "numpy 2.0.1 (others: 1.26.4), tqdm 4.6 (others: not installed)",
    ),
    Case(
        Code.CONDA_PACKAGE_DRIFT,
        C,
        Severity.WARNING,
        _conda_drift,
        "1 conda package: nccl 2.18.3 (others: 2.20.5)",
    ),
    Case(
        Code.NCCL_WITHOUT_GPUS,
        C,
        Severity.ERROR,
        _nccl_with_cpu_host,
    ),
    Case(
        Code.TORCH_CUDA_UNAVAILABLE,
        B,
        Severity.WARNING,
        lambda s: s.part(B, "torch", cuda_build=None, cuda_available=False),
        "CPU-only build",
    ),
    Case(
        Code.GPU_SELECTION_MISSING,
        B,
        Severity.ERROR,
        lambda s: s.host(B, gpus=(0, 5)),
        "gpus = [0, 5] on gpu-b, but it has GPUs 0, 1",
    ),
    Case(Code.NPROC_GPUS_WITHOUT_GPUS, C, Severity.ERROR, cpu_host),
    Case(
        Code.NOT_ENOUGH_FREE_GPUS,
        B,
        Severity.ERROR,
        _busy,
        "GPU 1 is held by /opt/conda/bin/python (pid 48213, 30806 MiB)",
    ),
    Case(
        Code.NOT_ENOUGH_FREE_GPUS,
        C,
        Severity.ERROR,
        _more_processes_than_gpus,
        "gpu-c needs 2 free GPUs but only 1 of its 1 selected GPU is free",
    ),
    Case(
        Code.GPU_BUSY,
        B,
        Severity.WARNING,
        _busy_but_enough,
    ),
    Case(
        Code.GPU_XID,
        B,
        Severity.WARNING,
        lambda s: s.edit(
            B,
            kernel_log=KernelLog(
                True, xids=(XidEvent("0000:86:00", 79, "GPU has fallen off the bus."),), xid_count=1
            ),
        ),
        "gpu-b: the kernel logged Xid 79, the GPU fell off the bus, for the GPU at PCI 0000:86:00",
    ),
    Case(
        Code.GPU_MEMORY_PENDING_RESET,
        B,
        Severity.ERROR,
        lambda s: _gpu_health(s, remapped_rows_pending=True, remapped_rows_uncorrectable=1),
        "gpu-b GPU 1: 1 row remapped after uncorrectable errors, waiting for a GPU reset",
    ),
    Case(
        Code.GPU_ECC_UNCORRECTED,
        B,
        Severity.WARNING,
        lambda s: _gpu_health(s, ecc_uncorrected=3),
        "gpu-b GPU 1: 3 uncorrected ECC errors since the driver last loaded",
    ),
    Case(
        Code.GPU_THROTTLED,
        B,
        Severity.WARNING,
        lambda s: _gpu_health(s, throttle_reasons=0x80 | 0x8),
        "gpu-b GPU 1 is slowed by a power brake from the system",
    ),
    Case(
        Code.GPU_PCIE_DEGRADED,
        B,
        Severity.WARNING,
        lambda s: _gpu_health(s, pcie_width=4, pcie_width_max=16),
        "gpu-b GPU 1's PCIe link runs at x4 of x16",
    ),
    Case(
        Code.GPU_NVLINK,
        B,
        Severity.WARNING,
        lambda s: _gpu_health(s, nvlinks=18, nvlinks_down=(0, 1)),
        "gpu-b GPU 1: NVLink links 0 and 1 of 18 down",
    ),
    Case(
        Code.KERNEL_LOG_UNREADABLE,
        A,
        Severity.INFO,
        lambda s: s.edit(A, kernel_log=KernelLog(False, "dmesg: Operation not permitted")),
        "gpu-a's kernel log could not be read: dmesg: Operation not permitted",
    ),
    Case(
        Code.GPU_COUNT_IMPLAUSIBLE,
        B,
        Severity.ERROR,
        lambda s: s.part(B, "gpus", devices=(), listed=65),
        "gpu-b claims 65 GPUs (nvidia-smi), more than any host can have (64)",
    ),
    Case(
        Code.HOSTNAME_LOOPBACK,
        B,
        Severity.ERROR,
        _loopback_off_subnet,
        "its own hostname resolves to 127.0.1.1 on gpu-b, so gloo/NCCL peers will try to connect "
        "to loopback",
    ),
    Case(
        Code.HOSTNAME_LOOPBACK,
        B,
        Severity.WARNING,
        lambda s: s.edit(B, resolved=(ip_address("127.0.1.1"),)),
        "harmless for ddptui runs",
    ),
    Case(
        Code.HOSTNAME_UNRESOLVABLE,
        C,
        Severity.WARNING,
        lambda s: s.edit(C, resolved=(), resolve_error="gaierror: [Errno -2] Name or service"),
    ),
    Case(
        Code.SOCKET_IFNAME_UNDETERMINED, B, Severity.WARNING, _off_subnet, "eth0 (192.168.7.2/24)"
    ),
    Case(
        Code.SOCKET_IFNAME_MISSING,
        B,
        Severity.ERROR,
        lambda s: s.host(B, socket_ifname="ib0"),
        "has no interface ib0",
    ),
    Case(
        Code.SOCKET_IFNAME_OFF_SUBNET,
        B,
        Severity.WARNING,
        _ifname_off_subnet,
        'use socket_ifname = "eth0"',
    ),
    Case(
        Code.MASTER_UNRESOLVABLE,
        B,
        Severity.ERROR,
        master_unresolvable,
        "gpu-b cannot resolve node 0's address gpu-a (gaierror: [Errno -2] Name or service not "
        "known), so torchrun there cannot reach the rendezvous store / add gpu-a to DNS or to "
        "/etc/hosts on gpu-b (e.g. 10.0.0.1 gpu-a, as the other hosts resolve it)",
    ),
    Case(
        Code.MASTER_RESOLVES_TO_LOOPBACK,
        B,
        Severity.ERROR,
        master_resolves(B, "127.0.1.1"),
        "node 0's address gpu-a resolves to 127.0.1.1 on gpu-b, so torchrun there would connect "
        "to itself instead of node 0",
    ),
    Case(
        Code.MASTER_RESOLVES_TO_LOOPBACK,
        C,
        Severity.WARNING,
        master_resolves(C, "127.0.1.1", "10.0.0.1"),
        "tries itself before node 0",
    ),
    Case(
        Code.MASTER_RESOLVES_TO_LOOPBACK,
        A,
        Severity.WARNING,
        _head_master_loopback_with_ifname,
        "harmless for ddptui runs",
    ),
    Case(
        Code.MASTER_ADDRESS_MISMATCH,
        None,
        Severity.WARNING,
        master_resolves(C, "10.0.0.99"),
        "10.0.0.1 on gpu-a and gpu-b; 10.0.0.99 on gpu-c",
    ),
    Case(
        Code.MASTER_PORT_IN_USE,
        A,
        Severity.ERROR,
        lambda s: s.edit(A, port=PortFacts(29500, in_use=True)),
        "port 29500 is already in use on gpu-a",
    ),
    Case(
        Code.MASTER_PORT_UNUSABLE,
        A,
        Severity.ERROR,
        lambda s: s.edit(A, port=PortFacts(80, in_use=NA, detail="PermissionError: denied")),
        "PermissionError",
    ),
    Case(
        Code.MASTER_PORT_UNREACHABLE,
        C,
        Severity.ERROR,
        lambda s: s.port_reachable.update({C: False}),
        "10.0.0.1:29500",
    ),
    Case(
        Code.LOW_DISK,
        B,
        Severity.ERROR,
        lambda s: s.edit(B, disk=DiskFacts(checked_path="/home", free_bytes=2 * 10**9)),
        "only 2.0 GB free at /home",
    ),
    Case(
        Code.CLOCK_SKEW,
        C,
        Severity.WARNING,
        lambda s: s.offsets.update({C: -7.5}),
        "-7.5 s",
    ),
    Case(
        Code.NPROC_OVER_MEMORY,
        B,
        Severity.ERROR,
        lambda s: s.edit(B, memory_total_bytes=512 * 2**20),
        "2 processes on gpu-b need about 0.7 GB of memory (a rank with torch loaded takes about "
        "320 MiB), and it has 0.5 GB / lower job.nproc_per_node to 1 or less",
    ),
    Case(
        Code.NPROC_OVER_MEMORY,
        A,
        Severity.ERROR,
        lambda s: (
            setattr(s, "job", JobConfig(memory_per_process_gb=40.0)),
            s.edit(A, memory_total_bytes=64 * 10**9),
        ),
        "2 processes on gpu-a need about 80 GB of memory (job.memory_per_process_gb = 40), and "
        "it has 64 GB / lower job.nproc_per_node to 1 or less",
    ),
    Case(
        Code.NPROC_OVER_FREE_MEMORY,
        A,
        Severity.WARNING,
        lambda s: s.edit(A, memory_total_bytes=64 * 10**9, memory_available_bytes=int(0.5 * 10**9)),
        "2 processes on gpu-a need about 0.7 GB of memory (a rank with torch loaded takes about "
        "320 MiB), and only 0.5 of its 64 GB is available now: other processes hold the rest",
    ),
    Case(
        Code.NPROC_OVER_CPUS,
        C,
        Severity.WARNING,
        _cpu_host_with_more_processes_than_cpus,
        "4 processes on gpu-c's 2 CPU(s)",
    ),
    Case(
        Code.WORKDIR_SHARED,
        C,
        Severity.INFO,
        lambda s: s.shared_workdirs.update({C: (A,)}),
        "the workdir /w on gpu-c is on storage that 1 other host(s) share",
    ),
    Case(
        Code.WORKDIR_UNSAFE,
        B,
        Severity.ERROR,
        lambda s: s.edit(B, workdir=_world_writable_workdir()),
        "/w (the workdir) is writable by every other user (mode 0777)",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.code.value}-{case.severity.value}")
def test_finding_fires(case: Case) -> None:
    scenario = Scenario()
    case.breaks(scenario)
    matching = [f for f in scenario.run() if f.code is case.code]
    assert [(f.host, f.severity) for f in matching] == [(case.host, case.severity)]
    assert matching[0].hint
    assert case.says in f"{matching[0].message} / {matching[0].hint}"


def test_every_code_is_tested() -> None:
    healthy = {Code.BACKEND_AUTO, Code.SOCKET_IFNAME_CHOSEN}
    # A Slurm cluster's codes: tests/health/test_slurm.py finds each.
    slurm = {code for code in Code if code.value.startswith("slurm_")}
    assert {case.code for case in CASES} | healthy | slurm == set(Code)


def test_unreached_hosts_are_left_out_of_comparisons() -> None:
    scenario = Scenario()
    scenario.unreached(C, Reach.TIMEOUT)
    scenario.part(B, "torch", version="2.3.0")
    codes = {(f.code, f.host) for f in scenario.run()}
    # Two hosts tie, so node 0's version is the reference and gpu-b is the odd one out.
    assert (Code.TORCH_MISMATCH, B) in codes
    assert (Code.SOCKET_IFNAME_CHOSEN, C) not in codes
    assert Code.BACKEND_AUTO not in {code for code, _ in codes}


def test_a_failed_probe_is_reachable_and_its_host_left_out_of_comparisons() -> None:
    scenario = Scenario()
    _probe_crashed(scenario)
    scenario.part(B, "torch", version="2.3.0")
    findings = scenario.run()
    codes = {(f.code, f.host) for f in findings}
    assert (Code.PROBE_FAILED, C) in codes
    assert Code.HOST_UNREACHABLE not in {code for code, _ in codes}
    # Two probed hosts tie, so node 0's version is the reference: gpu-c took no part.
    assert (Code.TORCH_MISMATCH, B) in codes
    (failed,) = [f for f in findings if f.code is Code.PROBE_FAILED]
    assert failed.message.startswith("gpu-c answered over SSH, but the probe failed under python3")
    assert "Python 3.8 or newer" in failed.hint


def test_errors_come_first() -> None:
    scenario = Scenario()
    scenario.offsets[C] = 9.0
    scenario.edit(A, port=PortFacts(29500, in_use=True))
    severities = [f.severity for f in scenario.run()]
    assert severities == sorted(
        severities, key=[Severity.ERROR, Severity.WARNING, Severity.INFO].index
    )
    assert severities[0] is Severity.ERROR


def test_backend_auto_with_a_cpu_host_says_why() -> None:
    scenario = Scenario()
    cpu_host(scenario)
    scenario.job = JobConfig(nproc_per_node=2)
    findings = scenario.run()
    backend = next(f for f in findings if f.code is Code.BACKEND_AUTO)
    assert backend.message == "backend = auto resolves to gloo: gpu-c has no GPU torch can use"
    assert not [f for f in findings if f.severity is not Severity.INFO]


def test_finding_to_json() -> None:
    finding = Finding(Code.LOW_DISK, Severity.ERROR, "gpu-b", "low", "free some")
    assert finding.to_json() == {
        "code": "low_disk",
        "severity": "error",
        "host": "gpu-b",
        "message": "low",
        "hint": "free some",
    }


def test_an_unknown_host_key_is_said_once_with_what_to_run() -> None:
    scenario = Scenario()
    detail = "the host key of gpu-b (10.0.0.2) is not in /k (ssh-ed25519 SHA256:abc)"
    scenario.unreached(B, Reach.HOSTKEY_UNKNOWN, detail + TRUST_ADVICE)
    [finding] = [f for f in scenario.run() if f.code is Code.HOST_KEY_UNKNOWN]
    assert finding.message == detail
    assert "ddptui trust" in finding.hint
