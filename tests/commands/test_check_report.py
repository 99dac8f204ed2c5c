"""The human check report over the recorded H200 host's probe output: grouping, GPUs, layout."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rich.console import Console

from ddptui.check import CheckReport, PortTest
from ddptui.commands.check import render
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import Code, Finding, HostCheck, Severity, evaluate
from ddptui.health.groups import group_findings
from ddptui.probe.facts import GpuProcess, HostFacts
from ddptui.probe.parse import parse_facts
from ddptui.remote.status import Reach, Reachability

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe"
NAMES = ("gpu-a", "gpu-b", "gpu-c")


def _h200() -> HostFacts:
    return parse_facts((PROBE / "h200_idle_nvml.json").read_text())


def _report(hosts: tuple[HostConfig, ...], checks: list[HostCheck]) -> CheckReport:
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    return CheckReport(config, tuple(checks), tuple(evaluate(config, checks)), 1.0, PortTest(True))


def _rendered(report: CheckReport, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    render(report, console)
    return console.export_text().splitlines()


def _three_recorded_hosts() -> CheckReport:
    """Three copies of the H200 host, whose hostname `vm` resolves to loopback on each."""
    hosts = tuple(HostConfig(name, f"192.0.2.{2 + i}") for i, name in enumerate(NAMES))
    offsets = {"gpu-a": 0.0, "gpu-b": 45.0, "gpu-c": 45.0}
    checks = [
        HostCheck(host, Reachability(Reach.OK), _h200(), offsets[host.name], True) for host in hosts
    ]
    return _report(hosts, checks)


def test_a_finding_shared_by_several_hosts_is_one_entry_naming_them() -> None:
    report = _three_recorded_hosts()
    lines = _rendered(report, width=100)
    text = "\n".join(lines)
    assert text.count("[hostname_loopback]") == 1, text
    assert "\n! gpu-a, gpu-b and gpu-c: hostname vm resolves to 127.0.0.1 on each host," in text
    # Their fixes differ by each host's address: one is shown, and whose it is.
    assert "fix (as on gpu-a): map vm to the host's real address (192.0.2.2)" in text
    assert text.count("[clock_skew]") == 1
    assert "\n! gpu-b and gpu-c: each host's clock is +45.0 s off" in text
    assert "fix: enable time sync on every host" in text
    # Scripts still get one finding per host.
    codes = [(f["code"], f["host"]) for f in report.to_json()["findings"]]
    assert [host for code, host in codes if code == "hostname_loopback"] == list(NAMES)


def test_no_line_is_padded_to_the_terminal_width() -> None:
    lines = _rendered(_three_recorded_hosts(), width=72)
    assert any(line.startswith("    ") and "fix" in line for line in lines)
    assert [line for line in lines if line != line.rstrip()] == []
    assert max(len(line) for line in lines) <= 72


def test_a_long_list_of_hosts_is_cut_to_a_count() -> None:
    findings = [
        Finding(Code.LOW_DISK, Severity.ERROR, f"h{i}", f"only 1.0 GB free on h{i}", "free it")
        for i in range(64)
    ]
    findings.append(Finding(Code.LOW_DISK, Severity.ERROR, "h64", "only 2.0 GB free", "free it"))
    first, odd = group_findings(findings)
    assert first.where == "h0, h1, h2, h3, h4, h5 and 58 more hosts"
    assert (first.message, first.hint, first.hint_host) == (
        "only 1.0 GB free on each host",
        "free it",
        None,
    )
    assert odd.hosts == ("h64",)


def test_a_host_name_inside_another_word_is_not_replaced() -> None:
    findings = [
        Finding(Code.LOW_DISK, Severity.ERROR, "node1", "node1 shares a rack with node10", "x"),
        Finding(Code.LOW_DISK, Severity.ERROR, "node2", "node2 shares a rack with node10", "x"),
    ]
    (group,) = group_findings(findings)
    assert group.message == "each host shares a rack with node10"


def test_free_gpus_are_counted_over_the_selected_gpus() -> None:
    """gpus = [0, 1] on a host with four, GPU 1 busy: 1 of 2 selected free, as the findings say."""
    facts = _h200()
    idle = facts.gpus.devices[0]
    busy = dataclasses.replace(
        idle, index=1, memory_used_mib=21007, processes=(GpuProcess(529, "python3", 20998),)
    )
    devices = (idle, busy, *(dataclasses.replace(idle, index=i) for i in (2, 3)))
    facts = dataclasses.replace(facts, gpus=dataclasses.replace(facts.gpus, devices=devices))
    host = HostConfig("gpu-a", "192.0.2.2", gpus=(0, 1))
    report = _report((host,), [HostCheck(host, Reachability(Reach.OK), facts)])
    (row,) = [line for line in _rendered(report, width=200) if "│ gpu-a" in line]
    assert "1/2 free (4 present)" in row
    assert "3/4 free" not in row
