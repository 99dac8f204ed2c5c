"""The human check report over the recorded H200 host's probe output."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rich.console import Console

from ddptui.check import CheckReport, PortTest
from ddptui.commands.check import render
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import HostCheck, evaluate
from ddptui.probe.facts import GpuProcess, HostFacts, parse_facts
from ddptui.remote.status import Reach, Reachability

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe"


def _h200() -> HostFacts:
    return parse_facts((PROBE / "h200_idle_nvml.json").read_text())


def _report(hosts: tuple[HostConfig, ...], checks: list[HostCheck]) -> CheckReport:
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    return CheckReport(config, tuple(checks), tuple(evaluate(config, checks)), 1.0, PortTest(True))


def _rendered(report: CheckReport, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    render(report, console)
    return console.export_text().splitlines()


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
