"""Findings: each fires on its input and stays quiet on a healthy cluster; grid, ifname, backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Interface, ip_address
from pathlib import Path
from typing import Any

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import (
    Code,
    Finding,
    HostCheck,
    ProbeFailure,
    Severity,
    evaluate,
    parity_rows,
)
from ddptui.health.groups import group_findings
from ddptui.plan.resources import choose_socket_ifname, is_free, resolve_backend
from ddptui.probe.facts import (
    NA,
    DiskFacts,
    GpuFacts,
    GpuInventory,
    GpuProcess,
    HostFacts,
    Interface,
    MasterResolution,
    PathEntry,
    PortFacts,
    PythonFacts,
    TorchFacts,
    WorkdirSafety,
)
from ddptui.remote.status import TRUST_ADVICE, Reach, Reachability

A, B, C = "gpu-a", "gpu-b", "gpu-c"
ADDRESSES = {A: "10.0.0.1", B: "10.0.0.2", C: "10.0.0.3"}


def gpu(index: int, used: int = 1, processes: tuple[GpuProcess, ...] = ()) -> GpuFacts:
    return GpuFacts(
        index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA H100 80GB HBM3",
        memory_total_mib=81559,
        memory_used_mib=used,
        utilization_pct=0,
        processes=processes,
    )


def interfaces(*specs: str) -> tuple[Interface, ...]:
    """``"eth0=10.0.0.2/24"`` → an interface with that address."""
    pairs = [spec.split("=") for spec in specs]
    return tuple(Interface(name, (IPv4Interface(net),)) for name, net in pairs)


def healthy_facts(name: str) -> HostFacts:
    address = ADDRESSES[name]
    return HostFacts(
        hostname=name,
        fqdn=name,
        resolved=(ip_address(address),),
        interfaces=interfaces("lo=127.0.0.1/8", f"eth0={address}/24"),
        python=PythonFacts(version="3.11.9", executable="/usr/bin/python3", is_conda=False),
        torch=TorchFacts(
            status="ok",
            version="2.4.1+cu121",
            cuda_build="12.1",
            cuda_available=True,
            device_count=2,
            nccl_version="2.20.5",
            gloo_available=True,
        ),
        gpus=GpuInventory("nvidia-smi", "550.54.15", "12.4", (gpu(0), gpu(1))),
        disk=DiskFacts(path="/w", checked_path="/w", free_bytes=200 * 10**9),
        pip_packages={"torch": "2.4.1+cu121", "numpy": "1.26.4"},
        port=PortFacts(29500, in_use=False) if name == A else None,
        time=1700000000.0,
    )


@dataclass
class Scenario:
    """A healthy three-host cluster that each test case breaks in one way."""

    hosts: dict[str, HostConfig] = field(
        default_factory=lambda: {name: HostConfig(name, ADDRESSES[name]) for name in (A, B, C)}
    )
    facts: dict[str, HostFacts | None] = field(
        default_factory=lambda: {name: healthy_facts(name) for name in (A, B, C)}
    )
    reach: dict[str, Reachability] = field(
        default_factory=lambda: {name: Reachability(Reach.OK) for name in (A, B, C)}
    )
    offsets: dict[str, float] = field(default_factory=lambda: {A: 0.0, B: 0.2, C: -0.3})
    port_reachable: dict[str, bool | None] = field(
        default_factory=lambda: {A: None, B: True, C: True}
    )
    probe_failures: dict[str, ProbeFailure] = field(default_factory=dict)
    shared_workdirs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    job: JobConfig = field(default_factory=JobConfig)

    @property
    def config(self) -> Config:
        return Config(Path("hosts.toml"), self.cluster, tuple(self.hosts.values()), self.job)

    def run(self) -> list[Finding]:
        checks = [
            HostCheck(
                host,
                self.reach[name],
                self.facts[name],
                self.offsets[name],
                self.port_reachable[name],
                self.probe_failures.get(name),
                self.shared_workdirs.get(name, ()),
            )
            for name, host in self.hosts.items()
        ]
        return evaluate(self.config, checks)

    def host(self, name: str, **changes: Any) -> None:
        self.hosts[name] = replace(self.hosts[name], **changes)

    def edit(self, name: str, **changes: Any) -> None:
        facts = self.facts[name]
        assert facts is not None
        self.facts[name] = replace(facts, **changes)

    def part(self, name: str, part: str, **changes: Any) -> None:
        facts = self.facts[name]
        assert facts is not None
        self.edit(name, **{part: replace(getattr(facts, part), **changes)})

    def unreached(self, name: str, reach: Reach, detail: str = "detail from ssh") -> None:
        self.reach[name] = Reachability(reach, detail)
        self.facts[name] = None


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


def _cpu_host(s: Scenario) -> None:
    s.part(C, "gpus", source="none", driver_version=NA, cuda_driver_version=NA, devices=())
    s.part(C, "torch", cuda_build=None, cuda_available=False, device_count=0, nccl_version=NA)


def _off_subnet(s: Scenario) -> None:
    s.edit(B, interfaces=interfaces("lo=127.0.0.1/8", "eth0=192.168.7.2/24"))


def _conda_drift(s: Scenario) -> None:
    # numpy differs everywhere but is also a pip package, so only nccl is conda drift.
    for name, version in ((A, "2.20.5"), (B, "2.20.5"), (C, "2.18.3")):
        s.edit(name, conda_packages={"nccl": version, "numpy": name})


def _nccl_with_cpu_host(s: Scenario) -> None:
    _cpu_host(s)
    s.cluster = ClusterConfig(backend="nccl")


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


def _named_master(s: Scenario) -> None:
    """Node 0 named by its hostname in the hosts file, which every host resolves to it."""
    s.host(A, address=A)
    for name in (A, B, C):
        s.edit(name, master=MasterResolution(A, (ip_address(ADDRESSES[A]),)))


def _master_resolves(name: str, *addresses: str) -> Callable[[Scenario], None]:
    def breaks(s: Scenario) -> None:
        _named_master(s)
        s.edit(name, master=MasterResolution(A, tuple(ip_address(a) for a in addresses)))

    return breaks


def _master_unresolvable(s: Scenario) -> None:
    _named_master(s)
    s.edit(B, master=MasterResolution(A, error="gaierror: [Errno -2] Name or service not known"))


def _head_master_loopback_with_ifname(s: Scenario) -> None:
    _master_resolves(A, "127.0.1.1")(s)
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
        lambda s: s.edit(C, torch=TorchFacts("timeout")),
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
    Case(Code.NPROC_GPUS_WITHOUT_GPUS, C, Severity.ERROR, _cpu_host),
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
        _master_unresolvable,
        "gpu-b cannot resolve node 0's address gpu-a (gaierror: [Errno -2] Name or service not "
        "known), so torchrun there cannot reach the rendezvous store / add gpu-a to DNS or to "
        "/etc/hosts on gpu-b (e.g. 10.0.0.1 gpu-a, as the other hosts resolve it)",
    ),
    Case(
        Code.MASTER_RESOLVES_TO_LOOPBACK,
        B,
        Severity.ERROR,
        _master_resolves(B, "127.0.1.1"),
        "node 0's address gpu-a resolves to 127.0.1.1 on gpu-b, so torchrun there would connect "
        "to itself instead of node 0",
    ),
    Case(
        Code.MASTER_RESOLVES_TO_LOOPBACK,
        C,
        Severity.WARNING,
        _master_resolves(C, "127.0.1.1", "10.0.0.1"),
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
        _master_resolves(C, "10.0.0.99"),
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


def test_local_loopback_cluster_is_not_the_trap() -> None:
    scenario = Scenario()
    for name in (A, B, C):
        scenario.host(name, address="127.0.0.1")
        scenario.edit(name, resolved=(ip_address("127.0.1.1"),))
    codes = {f.code for f in scenario.run()}
    assert Code.HOSTNAME_LOOPBACK not in codes
    assert Code.SOCKET_IFNAME_UNDETERMINED not in codes


def test_node_0_named_by_its_hostname_is_healthy() -> None:
    scenario = Scenario()
    _named_master(scenario)
    findings = scenario.run()
    assert not [f for f in findings if f.severity is not Severity.INFO]
    chosen = [f for f in findings if f.code is Code.SOCKET_IFNAME_CHOSEN]
    assert [f.host for f in chosen] == [A, B, C]
    assert all("eth0 (10.0.0." in f.message and "node 0 at gpu-a" in f.message for f in chosen)


def test_a_worker_that_cannot_resolve_node_0_gets_one_error() -> None:
    """Its failed port test and undetermined interface are consequences, not more problems."""
    for breaks in (_master_unresolvable, _master_resolves(B, "127.0.1.1")):
        scenario = Scenario()
        breaks(scenario)
        scenario.port_reachable[B] = False
        findings = scenario.run()
        assert [(f.host, f.severity) for f in findings if f.severity is not Severity.INFO] == [
            (B, Severity.ERROR)
        ]
        assert (Code.SOCKET_IFNAME_CHOSEN, B) not in {(f.code, f.host) for f in findings}


def test_node_0_resolving_its_own_name_to_loopback_without_an_interface() -> None:
    """No interface can be chosen from loopback; the hostname findings judge gloo's address."""
    scenario = Scenario()
    _master_resolves(A, "127.0.1.1")(scenario)
    scenario.edit(A, resolved=(ip_address("127.0.1.1"),))
    findings = {(f.code, f.host): f for f in scenario.run()}
    assert (Code.MASTER_RESOLVES_TO_LOOPBACK, A) not in findings
    assert findings[(Code.HOSTNAME_LOOPBACK, A)].severity is Severity.ERROR
    undetermined = findings[(Code.SOCKET_IFNAME_UNDETERMINED, A)]
    assert "gpu-a resolves only to 127.0.1.1 there" in undetermined.message


def test_a_loopback_name_is_the_single_machine_cluster() -> None:
    """Node 0 at "localhost" (one machine standing in for a cluster): loopback is intended."""
    scenario = Scenario()
    for name in (A, B, C):
        scenario.host(name, address="localhost" if name == A else "127.0.0.1")
        scenario.edit(
            name,
            master=MasterResolution("localhost", (ip_address("::1"), ip_address("127.0.0.1"))),
            interfaces=interfaces("lo=127.0.0.1/8"),
        )
    findings = scenario.run()
    assert not [f for f in findings if f.severity is not Severity.INFO]
    chosen = [f for f in findings if f.code is Code.SOCKET_IFNAME_CHOSEN]
    assert [f.host for f in chosen] == [A, B, C]
    assert all(" will use lo (127.0.0.1/8) " in f.message for f in chosen)


def test_one_host_named_by_a_loopback_hostname_is_healthy() -> None:
    """One box: gloo/NCCL traffic stays on it, so loopback and no interface are no trap."""
    scenario = Scenario()
    for name in (B, C):
        del scenario.hosts[name], scenario.facts[name], scenario.reach[name]
    scenario.host(A, address=A)
    scenario.edit(
        A,
        resolved=(ip_address("127.0.1.1"),),
        master=MasterResolution(A, (ip_address("127.0.1.1"),)),
    )
    findings = scenario.run()
    assert not [f for f in findings if f.severity is not Severity.INFO]
    codes = {f.code for f in findings}
    assert Code.HOSTNAME_LOOPBACK in codes
    assert Code.SOCKET_IFNAME_UNDETERMINED not in codes
    # The same host with a second one is the trap again.
    scenario.hosts[B] = HostConfig(B, ADDRESSES[B])
    scenario.facts[B], scenario.reach[B] = healthy_facts(B), Reachability(Reach.OK)
    errors = {(f.code, f.host) for f in scenario.run() if f.severity is Severity.ERROR}
    assert (Code.HOSTNAME_LOOPBACK, A) in errors


def test_backend_auto_with_a_cpu_host_says_why() -> None:
    scenario = Scenario()
    _cpu_host(scenario)
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


def _probed(scenario: Scenario) -> list[tuple[HostConfig, HostFacts]]:
    config = scenario.config
    return [(host, f) for host in config.ordered_hosts if (f := scenario.facts[host.name])]


def test_parity_grid_marks_the_odd_host() -> None:
    scenario = Scenario()
    scenario.part(B, "torch", version="2.3.0+cu121")
    _cpu_host(scenario)
    rows = {row.key: row for row in parity_rows(_probed(scenario))}
    assert list(rows) == ["driver", "cuda_driver", "torch", "torch_cuda", "nccl", "python"]
    torch = rows["torch"]
    assert dict(torch.values) == {A: "2.4.1", B: "2.3.0", C: "2.4.1"}
    assert (torch.reference, torch.odd_hosts) == ("2.4.1", (B,))
    # A CPU host's torch build is shown, but only GPU hosts must agree on it.
    assert (rows["torch_cuda"].values[C], rows["torch_cuda"].odd_hosts) == ("cpu", ())
    # Not-available values are shown but never odd.
    assert (rows["driver"].values[C], rows["driver"].odd_hosts) == (NA, ())
    assert (rows["python"].reference, rows["python"].odd_hosts) == ("3.11.9", ())


def test_parity_tie_goes_to_node_0_even_when_listed_last() -> None:
    scenario = Scenario()
    del scenario.hosts[C], scenario.facts[C]
    scenario.host(B, rank0=True)
    scenario.part(B, "python", version="3.10.14")
    row = next(row for row in parity_rows(_probed(scenario)) if row.key == "python")
    assert (row.reference, row.odd_hosts) == ("3.10.14", (A,))


@pytest.mark.parametrize(
    ("specs", "master", "expected"),
    [
        (("lo=127.0.0.1/8", "eth0=10.0.0.2/24"), "10.0.0.1", "eth0"),
        (("eth0=10.0.0.1/24", "eth1=10.0.0.9/24"), "10.0.0.1", "eth0"),
        (("eth0=10.0.0.2/8", "ib0=10.1.0.2/16"), "10.1.0.1", "ib0"),
        (("ib0=10.1.0.2/16", "eth0=10.0.0.2/8"), "10.1.0.1", "ib0"),
        (("docker0=172.17.0.1/16", "eth0=192.168.1.5/24"), "10.0.0.1", None),
        (("lo=127.0.0.1/8", "eth0=10.0.0.2/24"), "127.0.0.1", "lo"),
        (("eth0=10.0.0.2/24",), "gpu-a.example", None),
    ],
    ids=["worker", "node0-own", "specific-1", "specific-2", "none", "local", "name"],
)
def test_choose_socket_ifname(specs: tuple[str, ...], master: str, expected: str | None) -> None:
    facts = HostFacts(interfaces=interfaces(*specs))
    assert choose_socket_ifname(facts, master) == expected


@pytest.mark.parametrize(
    ("resolution", "master", "expected"),
    [
        (
            MasterResolution("gpu-a", (ip_address("fd00::1"), ip_address("10.0.0.1"))),
            "gpu-a",
            "eth0",
        ),
        (MasterResolution("gpu-a", (ip_address("127.0.1.1"),)), "gpu-a", None),
        (
            MasterResolution("gpu-a", (ip_address("127.0.1.1"), ip_address("10.0.0.1"))),
            "gpu-a",
            "eth0",
        ),
        (MasterResolution("gpu-a", error="gaierror"), "gpu-a", None),
        (MasterResolution("gpu-z", (ip_address("10.0.0.1"),)), "gpu-a", None),
        (MasterResolution("localhost", (ip_address("127.0.0.1"),)), "localhost", "lo"),
        (MasterResolution("gpu-a", (ip_address("192.168.9.9"),)), "10.0.0.1", "eth0"),
    ],
    ids=["ipv4-first", "loopback", "loopback-first", "unresolved", "other-name", "localhost", "ip"],
)
def test_choose_socket_ifname_for_a_name(
    resolution: MasterResolution, master: str, expected: str | None
) -> None:
    facts = HostFacts(
        interfaces=interfaces("lo=127.0.0.1/8", "eth0=10.0.0.2/24"), master=resolution
    )
    assert choose_socket_ifname(facts, master) == expected


def test_choose_socket_ifname_without_interfaces() -> None:
    assert choose_socket_ifname(HostFacts(), "10.0.0.1") is None


@pytest.mark.parametrize(
    ("backend", "edit", "expected"),
    [
        ("auto", None, "nccl"),
        ("auto", _cpu_host, "gloo"),
        ("auto", lambda s: s.part(B, "torch", cuda_available=False), "gloo"),
        ("auto", lambda s: s.host(C, gpus=0), "gloo"),
        ("gloo", None, "gloo"),
        ("nccl", _cpu_host, "nccl"),
    ],
    ids=["all-gpus", "cpu-host", "torch-no-cuda", "no-gpus-selected", "explicit-gloo", "explicit"],
)
def test_resolve_backend(
    backend: Any, edit: Callable[[Scenario], None] | None, expected: str
) -> None:
    scenario = Scenario(cluster=ClusterConfig(backend=backend))
    if edit is not None:
        edit(scenario)
    facts = {name: f for name, f in scenario.facts.items() if f is not None}
    assert resolve_backend(scenario.config, facts) == expected


def test_resolve_backend_without_facts_for_a_host() -> None:
    scenario = Scenario()
    facts = {name: f for name, f in scenario.facts.items() if f is not None and name != C}
    assert resolve_backend(scenario.config, facts) == "gloo"


@pytest.mark.parametrize(
    ("gpu_facts", "free"),
    [
        (gpu(0, used=1), True),
        (gpu(0, used=1023), True),
        (gpu(0, used=1024), False),
        (gpu(0, used=5, processes=(GpuProcess(1),)), False),
        (dataclasses.replace(gpu(0), processes=NA, memory_used_mib=NA), True),
        (dataclasses.replace(gpu(0, used=9000), processes=NA), False),
    ],
    ids=["idle", "under", "at-threshold", "process", "unknown", "memory-no-list"],
)
def test_is_free(gpu_facts: GpuFacts, free: bool) -> None:
    assert is_free(gpu_facts) is free


def test_package_drift_lists_a_readable_number_of_packages() -> None:
    scenario = Scenario()
    many = {f"pkg{i:02d}": "1.0" for i in range(20)}
    scenario.edit(A, pip_packages={"torch": "2.4.1+cu121", **many})
    scenario.edit(C, pip_packages={"torch": "2.4.1+cu121", **many})
    scenario.edit(B, pip_packages={"torch": "2.4.1+cu121", **dict.fromkeys(many, "2.0")})
    (drift,) = [f for f in scenario.run() if f.code is Code.PACKAGE_DRIFT]
    assert drift.host == B
    assert "20 pip packages" in drift.message
    assert "pkg07==1.0" in drift.hint and "pkg08==1.0" not in drift.hint
    assert "12 more" in drift.hint and "--json" in drift.hint


def test_a_key_this_machine_cannot_use_is_said_once_for_every_host_sharing_it() -> None:
    scenario = Scenario()
    for name in (A, B, C):
        scenario.unreached(name, Reach.KEY_UNUSABLE, "cannot use identity_file /k: no such file")
    [group] = [
        group for group in group_findings(scenario.run()) if group.code is Code.SSH_KEY_UNUSABLE
    ]
    assert group.hosts == (A, B, C)
    assert "ssh-copy-id" not in group.hint and "ssh-keygen" in group.hint


def test_an_unknown_host_key_is_said_once_with_what_to_run() -> None:
    scenario = Scenario()
    detail = "the host key of gpu-b (10.0.0.2) is not in /k (ssh-ed25519 SHA256:abc)"
    scenario.unreached(B, Reach.HOSTKEY_UNKNOWN, detail + TRUST_ADVICE)
    [finding] = [f for f in scenario.run() if f.code is Code.HOST_KEY_UNKNOWN]
    assert finding.message == detail
    assert "ddptui trust" in finding.hint


def test_hosts_whose_hostname_is_their_name_group_into_words_that_read() -> None:
    scenario = Scenario()
    for name in (A, B):
        scenario.edit(name, hostname=name, resolve_error="Name or service not known")
    [group] = [
        group
        for group in group_findings(scenario.run())
        if group.code is Code.HOSTNAME_UNRESOLVABLE
    ]
    assert group.hosts == (A, B)
    assert group.message.startswith("its own hostname does not resolve on each host")
    # The run sets the socket interface already: the fix does not ask for it again.
    assert "socket_ifname" not in group.hint
