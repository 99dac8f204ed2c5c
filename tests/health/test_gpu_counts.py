"""A host that claims more GPUs than a host can have: no list of them is built, and its
finding says so, in the check, the health screen and the plan alike.

The claim goes in as the probe prints it (a JSON document) and through the real parsing,
findings, plan and screen; a million GPUs once took the check 31 s and 687 MiB.
"""

from __future__ import annotations

import asyncio
import io
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import Static

from ddptui.check import CheckReport, PortTest
from ddptui.commands.check import render
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import Code, Finding, HostCheck, Severity, evaluate
from ddptui.health.resources import present_gpus
from ddptui.plan.launch import PlanError, plan_launch
from ddptui.probe.facts import MAX_GPUS, NA, HostFacts
from ddptui.probe.parse import parse_facts
from ddptui.remote.status import Reach, Reachability
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.health import HealthScreen

HOST = HostConfig("liar", "192.0.2.7")
RUN = "20261130-120000-abcd"
MEMORY_BOUND = 16 * 1024 * 1024
"""What judging and planning one host may take, however many GPUs it claims (a million GPU
facts took 687 MiB)."""


def probe_document(*, torch: dict[str, Any], gpus: dict[str, Any]) -> str:
    """A probe's answer from a host with ``torch`` and ``gpus`` as it reports them."""
    return json.dumps(
        {
            "probe_version": 1,
            "host": {"hostname": "liar", "fqdn": "liar", "addresses": ["192.0.2.7"]},
            "interfaces": {"items": [{"name": "eth0", "ipv4": [
                {"address": "192.0.2.7", "prefixlen": 24}]}]},
            "python": {"version": "3.11.7", "executable": "/usr/bin/python3", "is_conda": False},
            "torch": {"status": "ok", "version": "2.13.0", "cuda": "12.8", "nccl": "2.27.3",
                      "gloo_available": True, **torch},
            "gpus": gpus,
            "disk": {"path": "/w", "checked_path": "/w", "free_bytes": 10**12},
            "system": {"cpu_count": 2, "memory_total_bytes": 2**33},
            "packages": {"pip": {"torch": "2.13.0"}, "conda": None},
            "port": {"port": 29500, "in_use": False},
            "time": 1.7e9,
        }
    )  # fmt: skip


def torch_claiming(count: int) -> HostFacts:
    """No NVIDIA tool answered; torch says it sees ``count`` devices."""
    return parse_facts(
        probe_document(
            torch={"cuda_available": True, "device_count": count},
            gpus={"source": "none", "devices": [], "problem": "nvidia-smi not found"},
        )
    )


def listing(rows: int, source: str = "nvidia-smi") -> HostFacts:
    """``source`` lists ``rows`` GPUs (torch agrees)."""
    devices = [{"index": index % MAX_GPUS, "memory_used_mib": 0} for index in range(rows)]
    return parse_facts(
        probe_document(
            torch={"cuda_available": True, "device_count": min(rows, MAX_GPUS)},
            gpus={"source": source, "driver_version": "570.1", "devices": devices},
        )
    )


def config(**job: Any) -> Config:
    return Config(Path("hosts.toml"), ClusterConfig(), (HOST,), JobConfig(**job))


def checks(facts: HostFacts) -> list[HostCheck]:
    return [HostCheck(HOST, Reachability(Reach.OK), facts, 0.0)]


def implausible(findings: list[Finding]) -> Finding:
    [finding] = [f for f in findings if f.code is Code.GPU_COUNT_IMPLAUSIBLE]
    return finding


@pytest.mark.parametrize("claimed", [10**6, 10**9])
def test_a_torch_count_no_host_can_have_is_a_finding_not_a_list(claimed: int) -> None:
    facts = torch_claiming(claimed)
    assert facts.torch.device_count == claimed
    tracemalloc.start()
    try:
        present = present_gpus(facts)
        findings = evaluate(config(), checks(facts))
        plan = plan_launch(config(nproc_per_node=2), checks(facts), run_id=RUN)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND
    assert present == ()
    finding = implausible(findings)
    assert finding.host == "liar" and finding.severity is Severity.ERROR
    assert f"liar claims {claimed:,} GPUs (torch's device count)" in finding.message
    assert f"more than any host can have ({MAX_GPUS})" in finding.message
    # Its GPUs are left out of the run: none is handed to it, and NCCL is not chosen for it.
    assert plan.backend == "gloo"
    assert [node.cuda_visible_devices for node in plan.nodes] == [None]
    with pytest.raises(PlanError, match="liar would start no process"):
        plan_launch(config(), checks(facts), run_id=RUN)


def test_a_claim_of_thousands_of_digits_is_shown_in_a_few() -> None:
    finding = implausible(evaluate(config(), checks(torch_claiming(10**4000))))
    assert "liar claims more than 1,000,000,000,000,000 GPUs" in finding.message
    assert len(finding.message) < 200


@pytest.mark.parametrize("source", ["nvml", "nvidia-smi"])
@pytest.mark.parametrize("rows", [MAX_GPUS + 1, 100_000])
def test_a_listing_of_more_gpus_than_a_host_can_have_is_not_read(source: str, rows: int) -> None:
    facts = listing(rows, source)
    assert facts.gpus.devices == () and facts.gpus.listed == rows
    assert facts.gpus.problem == f"{source} listed {rows:,} GPUs; a host has at most {MAX_GPUS}"
    assert present_gpus(facts) == ()
    finding = implausible(evaluate(config(), checks(facts)))
    assert f"liar claims {rows:,} GPUs ({source})" in finding.message


def test_as_many_gpus_as_a_host_can_have_are_all_used() -> None:
    for facts in (listing(MAX_GPUS), torch_claiming(MAX_GPUS)):
        assert [gpu.index for gpu in present_gpus(facts)] == list(range(MAX_GPUS))
        findings = evaluate(config(), checks(facts))
        assert not [f for f in findings if f.code is Code.GPU_COUNT_IMPLAUSIBLE]
        plan = plan_launch(config(), checks(facts), run_id=RUN)
        assert plan.backend == "nccl" and plan.nodes[0].nproc == MAX_GPUS


def test_a_gpu_row_keeps_only_counts_a_gpu_can_have() -> None:
    rows = [
        {"index": MAX_GPUS, "memory_used_mib": 0},
        {"index": -1},
        {"index": True},
        {"index": 10**30},
        {
            "index": 3,
            "memory_total_mib": 10**4000,
            "memory_used_mib": -5,
            "utilization_pct": 101,
            "processes": [
                {"pid": 2**22 + 1, "name": "x"},
                {"pid": 7, "name": "python", "used_memory_mib": 2**62},
            ],
        },
    ]
    facts = parse_facts(
        probe_document(
            torch={"cuda_available": True, "device_count": 1},
            gpus={"source": "nvml", "devices": rows},
        )
    )
    [gpu] = facts.gpus.devices
    assert gpu.index == 3
    assert (gpu.memory_total_mib, gpu.memory_used_mib, gpu.utilization_pct) == (NA, NA, NA)
    assert gpu.processes != NA
    [process] = gpu.processes
    assert (process.pid, process.used_memory_mib) == (7, NA)


def _report(facts: HostFacts) -> CheckReport:
    found = checks(facts)
    return CheckReport(
        config(), tuple(found), tuple(evaluate(config(), found)), 1.0, PortTest(False, "one host")
    )


def test_ddptui_check_says_which_host_claims_what() -> None:
    out = io.StringIO()
    render(_report(torch_claiming(10**9)), Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "✗ liar: liar claims 1,000,000,000 GPUs (torch's device count)" in text
    assert "[gpu_count_implausible]" in text


def test_the_health_screen_shows_no_gpus_and_the_finding() -> None:
    asyncio.run(_test_the_health_screen_shows_no_gpus_and_the_finding())


async def _test_the_health_screen_shows_no_gpus_and_the_finding() -> None:
    report = _report(listing(100_000))
    app = DdptuiApp(first_screen=HealthScreen(report.config, report))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.2)
        screen = app.screen
        gpus = str(screen.query_one("#gpus", Static).content)
        findings = str(screen.query_one("#findings", Static).content)
    assert f"nvidia-smi listed 100,000 GPUs; a host has at most {MAX_GPUS}" in gpus
    assert "liar claims 100,000 GPUs (nvidia-smi)" in findings
