"""A healthy three-host cluster's facts (:class:`Scenario`) and the ways tests break it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Interface, ip_address
from pathlib import Path
from typing import Any

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import Finding, HostCheck, ProbeFailure, evaluate
from ddptui.probe.facts import (
    NA,
    DiskFacts,
    GpuFacts,
    GpuInventory,
    GpuProcess,
    HostFacts,
    Interface,
    MasterResolution,
    PortFacts,
    PythonFacts,
    TorchFacts,
)
from ddptui.remote.status import Reach, Reachability

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


def cpu_host(s: Scenario) -> None:
    """gpu-c without GPUs, its torch a CPU build."""
    s.part(C, "gpus", source="none", driver_version=NA, cuda_driver_version=NA, devices=())
    s.part(C, "torch", cuda_build=None, cuda_available=False, device_count=0, nccl_version=NA)


def named_master(s: Scenario) -> None:
    """Node 0 named by its hostname in the hosts file, which every host resolves to it."""
    s.host(A, address=A)
    for name in (A, B, C):
        s.edit(name, master=MasterResolution(A, (ip_address(ADDRESSES[A]),)))


def master_resolves(name: str, *addresses: str) -> Callable[[Scenario], None]:
    """Node 0 named by its hostname, which ``name`` resolves to ``addresses``."""

    def breaks(s: Scenario) -> None:
        named_master(s)
        s.edit(name, master=MasterResolution(A, tuple(ip_address(a) for a in addresses)))

    return breaks


def master_unresolvable(s: Scenario) -> None:
    """Node 0 named by its hostname, which gpu-b cannot resolve."""
    named_master(s)
    s.edit(B, master=MasterResolution(A, error="gaierror: [Errno -2] Name or service not known"))
