"""The probe parser and the findings on the probe's real output from an H200 host.

The host (tests/fixtures/README.md): one H200, hostname `vm` resolving to 127.0.0.1, probed
with NVML and with nvidia-smi (pynvml hidden), idle and with a python3 holding 20 GiB.
"""

from __future__ import annotations

from ipaddress import ip_address
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import Code, Finding, HostCheck, Severity, evaluate
from ddptui.probe.facts import NA, HostFacts
from ddptui.probe.parse import parse_facts
from ddptui.remote.status import Reach, Reachability

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe"
RECORDINGS = ("h200_idle_nvml", "h200_idle_smi", "h200_busy_nvml", "h200_busy_smi")


def _facts(name: str) -> HostFacts:
    return parse_facts((PROBE / f"{name}.json").read_text())


def _findings(facts: HostFacts, address: str = "vm") -> list[Finding]:
    """The findings for a one-host cluster of the recorded host, named as its user named it."""
    config_host = HostConfig("h200", address)
    config = Config(Path("hosts.toml"), ClusterConfig(), (config_host,), JobConfig())
    return evaluate(config, [HostCheck(config_host, Reachability(Reach.OK), facts)])


@pytest.mark.parametrize("name", RECORDINGS)
def test_every_recording_parses_completely(name: str) -> None:
    facts = _facts(name)
    assert facts.section_errors == {}
    assert (facts.hostname, facts.resolved) == ("vm", (ip_address("127.0.0.1"),))
    assert facts.loopback_addresses == (ip_address("127.0.0.1"),)
    torch = facts.torch
    assert (torch.status, torch.version, torch.cuda_build, torch.nccl_version) == (
        "ok",
        "2.11.0+cu130",
        "13.0",
        "2.28.9",
    )
    assert (torch.cuda_available, torch.device_count) == (True, 1)
    gpus = facts.gpus
    assert gpus.source == ("nvml" if name.endswith("nvml") else "nvidia-smi")
    assert (gpus.driver_version, gpus.cuda_driver_version) == ("580.159.04", "13.0")
    (gpu,) = gpus.devices
    assert (gpu.index, gpu.name, gpu.memory_total_mib) == (0, "NVIDIA H200", 143771)
    assert gpu.uuid == "GPU-695ed85e-b1c2-887f-8f65-f0747f640f12"
    assert facts.python.version == "3.12.3"
    assert facts.pip_packages is not NA and facts.pip_packages["torch"] == "2.11.0"


def test_node_0_side_of_the_recording() -> None:
    """Probed as node 0 with master port 29500 and master address `vm`."""
    facts = _facts("h200_idle_nvml")
    assert facts.port is not None
    assert (facts.port.port, facts.port.in_use) == (29500, False)
    assert facts.master is not None
    assert facts.master.addresses == (ip_address("127.0.0.1"),)
    assert facts.interfaces is not NA
    assert [i.name for i in facts.interfaces] == ["lo", "ifb0", "ifb1", "eth0"]


@pytest.mark.parametrize("name", ["h200_busy_nvml", "h200_busy_smi"])
def test_the_busy_gpu_is_named_with_its_process(name: str) -> None:
    (gpu,) = _facts(name).gpus.devices
    assert gpu.processes is not NA
    (process,) = gpu.processes
    assert (process.pid, process.name, process.used_memory_mib) == (529, "python3", 20998)
    busy = [f for f in _findings(_facts(name)) if f.code is Code.NOT_ENOUGH_FREE_GPUS]
    assert [(f.host, f.severity) for f in busy] == [("h200", Severity.ERROR)]
    assert "GPU 0 is held by python3 (pid 529, 20998 MiB)" in busy[0].message


@pytest.mark.parametrize("name", ["h200_idle_nvml", "h200_idle_smi"])
@pytest.mark.parametrize("address", ["vm", "192.0.2.2"])
def test_the_recorded_one_host_cluster_is_healthy(name: str, address: str) -> None:
    """Named by its loopback hostname or by its address: one box, so no loopback trap."""
    findings = _findings(_facts(name), address)
    assert [f for f in findings if f.severity is not Severity.INFO] == []
    codes = {f.code for f in findings}
    assert Code.HOSTNAME_LOOPBACK in codes
    assert Code.NOT_ENOUGH_FREE_GPUS not in codes


def test_the_same_host_as_one_of_two_is_the_loopback_trap() -> None:
    facts = _facts("h200_idle_nvml")
    hosts = (HostConfig("h200", "vm"), HostConfig("h200-b", "vm-b"))
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    checks = [HostCheck(host, Reachability(Reach.OK), facts) for host in hosts]
    errors = {(f.code, f.host) for f in evaluate(config, checks) if f.severity is Severity.ERROR}
    assert (Code.HOSTNAME_LOOPBACK, "h200") in errors
