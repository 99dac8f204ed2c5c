"""The plan's resources: the socket interface toward node 0, the backend ``auto`` resolves
to, and which GPUs count as free."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from ipaddress import ip_address
from typing import Any

import pytest

from ddptui.config.model import ClusterConfig
from ddptui.health.resources import choose_socket_ifname, is_free, resolve_backend
from ddptui.probe.facts import NA, GpuFacts, GpuProcess, HostFacts, MasterResolution
from tests.helpers import B, C, Scenario, cpu_host, gpu, interfaces


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
        ("auto", cpu_host, "gloo"),
        ("auto", lambda s: s.part(B, "torch", cuda_available=False), "gloo"),
        ("auto", lambda s: s.host(C, gpus=0), "gloo"),
        ("gloo", None, "gloo"),
        ("nccl", cpu_host, "nccl"),
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
