"""``ddptui check`` and the console's health screen say the same words for the same report.

The CLI side is :func:`ddptui.commands.check.render`; the console side is what the health
screen shows, driven with Textual's pilot. No network: the report is built from the recorded
H200 probe output.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text
from textual.widgets import DataTable, Static

from ddptui.check import CheckReport, PortTest
from ddptui.commands.check import render
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import Code, Finding, HostCheck, Severity, evaluate
from ddptui.present.check import finding_line
from ddptui.present.check import listed as words_listed
from ddptui.present.hosts import gpu_absence
from ddptui.probe.parse import parse_facts
from ddptui.remote.status import Reach, Reachability
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.health import HealthScreen

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe"
HOSTILE = "\x1b]0;owned\x07"
ESCAPED = "\\x1b]0;owned\\x07"
SKIPPED = "only node 0 answered"


def _report(*, healthy: bool = False) -> CheckReport:
    """Unhealthy: gpu-a and gpu-b (the recorded host twice) share a hostname finding whose
    fixes differ by address, gpu-c timed out, a cluster-wide finding quotes a hostile string,
    and the master port test did not run. Healthy: gpu-a alone."""
    idle = parse_facts((PROBE / "h200_idle_nvml.json").read_text())
    busy = parse_facts((PROBE / "h200_busy_nvml.json").read_text())
    hosts: tuple[HostConfig, ...] = (
        HostConfig("gpu-a", "192.0.2.2"),
        HostConfig("gpu-b", "192.0.2.3"),
        HostConfig("gpu-c", "192.0.2.4"),
    )
    checks = [
        HostCheck(hosts[0], Reachability(Reach.OK), idle, 0.0, None),
        HostCheck(hosts[1], Reachability(Reach.OK), busy, 0.2, True),
        HostCheck(hosts[2], Reachability(Reach.TIMEOUT, "192.0.2.4:22: no answer within 10 s")),
    ]
    if healthy:
        hosts, checks = hosts[:1], checks[:1]
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    findings = list(evaluate(config, checks))
    port_test = PortTest(True)
    if not healthy:
        message = f"backend chosen per host {HOSTILE}"
        findings.append(Finding(Code.BACKEND_AUTO, Severity.INFO, None, message, f"set {HOSTILE}"))
        port_test = PortTest(False, SKIPPED)
    return CheckReport(config, tuple(checks), tuple(findings), 3.4, port_test)


def _cli_lines(report: CheckReport) -> list[str]:
    out = io.StringIO()
    # Wide enough that no line wraps: the comparison is line for line.
    render(report, Console(file=out, width=400))
    return out.getvalue().splitlines()


def _cli_findings(lines: list[str]) -> list[str]:
    """The findings, fixes and notes: between the last table and the summary."""
    last_table = max(index for index, line in enumerate(lines) if line.startswith("└"))
    return lines[last_table + 1 : -1]


def _cli_status(lines: list[str], host: str) -> str:
    (row,) = [line for line in lines if f"│ {host} " in line]
    return row.split("│")[4].strip()


@dataclasses.dataclass
class Shown:
    """What the health screen shows: each host's findings pane, status cell and the summary."""

    panes: dict[str, str]
    status: dict[str, str]
    summary: str


def _console(report: CheckReport) -> Shown:
    async def drive() -> Shown:
        screen = HealthScreen(report.config, report)
        app = DdptuiApp(first_screen=screen)
        shown = Shown({}, {}, "")
        async with app.run_test(size=(160, 48)) as pilot:
            table = screen.query_one("#hosts", DataTable)
            for row, host in enumerate(report.config.ordered_hosts):
                table.move_cursor(row=row)
                await pilot.pause()
                pane = screen.query_one("#findings", Static).content
                assert isinstance(pane, Text)
                shown.panes[host.name] = pane.plain
                status = table.get_row_at(row)[2]
                assert isinstance(status, Text)
                shown.status[host.name] = status.plain
            summary = screen.query_one("#check-status", Static).content
            assert isinstance(summary, Text)
            shown.summary = summary.plain
        return shown

    return asyncio.run(drive())


def _entries(pane: str) -> list[str]:
    """A findings pane's findings and fixes, without its headings."""
    headings = {"", "none", "cluster-wide"}
    return [line for line in pane.splitlines()[1:] if line not in headings]


@pytest.fixture(scope="module")
def unhealthy() -> tuple[CheckReport, list[str], Shown]:
    """The unhealthy report, as the CLI prints it and as the console shows it."""
    report = _report()
    return report, _cli_lines(report), _console(report)


def test_every_finding_and_fix_reads_in_the_console_as_the_cli_prints_it(
    unhealthy: tuple[CheckReport, list[str], Shown],
) -> None:
    _, lines, shown = unhealthy
    cli = _cli_findings(lines)
    console = {line for pane in shown.panes.values() for line in _entries(pane)}
    assert console == set(cli)
    # A finding gpu-a and gpu-b share is the CLI's one entry in both panes, its fix saying
    # whose it is, not each host's own wording.
    shared = next(line for line in cli if "[hostname_loopback]" in line)
    assert shared.startswith("! gpu-a and gpu-b: hostname vm resolves to 127.0.0.1 on each host")
    fix = "    fix (as on gpu-a): map vm to the host's real address (192.0.2.2)"
    for host in ("gpu-a", "gpu-b"):
        assert shared in _entries(shown.panes[host])
        assert any(line.startswith(fix) for line in _entries(shown.panes[host]))
    assert shared not in shown.panes["gpu-c"]


def test_cluster_wide_words_and_the_skipped_port_test_show_beside_every_host(
    unhealthy: tuple[CheckReport, list[str], Shown],
) -> None:
    _, lines, shown = unhealthy
    cli = _cli_findings(lines)
    note = f"i master port test skipped: {SKIPPED}"
    cluster = [f"i backend chosen per host {ESCAPED}  [backend_auto]", f"    fix: set {ESCAPED}"]
    assert note in cli and all(line in cli for line in cluster)
    for pane in shown.panes.values():
        after = pane.split("\ncluster-wide\n", 1)[1].splitlines()
        assert after == [*cluster, note]
        assert "\x1b" not in pane


def test_a_host_choosing_its_interface_is_left_to_the_tables_in_both(
    unhealthy: tuple[CheckReport, list[str], Shown],
) -> None:
    report, lines, shown = unhealthy
    assert any(f.code is Code.SOCKET_IFNAME_CHOSEN for f in report.findings)
    assert "socket_ifname_chosen" not in "\n".join(lines)
    assert all("socket_ifname_chosen" not in pane for pane in shown.panes.values())


def test_status_cells_read_the_same(unhealthy: tuple[CheckReport, list[str], Shown]) -> None:
    _, lines, shown = unhealthy
    assert shown.status == {host: _cli_status(lines, host) for host in shown.status}
    assert shown.status == {"gpu-a": "ok", "gpu-b": "ok", "gpu-c": "timeout"}


def test_the_summary_reads_the_same_counted_in_the_singular_where_there_is_one(
    unhealthy: tuple[CheckReport, list[str], Shown],
) -> None:
    _, lines, shown = unhealthy
    # gpu-a's and gpu-b's hostname warnings are one line of the report: one warning.
    assert lines[-1] == "not healthy: 1 error, 1 warning (3.4 s)"
    # The console adds, at most, which columns differ between hosts.
    assert shown.summary.startswith(lines[-1])

    healthy = _report(healthy=True)
    summary = _cli_lines(healthy)[-1]
    assert summary == "healthy: 1 host ready (3.4 s)"
    assert _console(healthy).summary == summary


def test_a_probe_s_stderr_goes_below_its_finding_each_line_marked_as_the_host_s() -> None:
    forged = "✗ gpu-b: ok really"
    finding = Finding(
        Code.PROBE_FAILED,
        Severity.ERROR,
        "gpu-a",
        f"the probe failed; its stderr ends:\nTraceback\n{forged}{HOSTILE}",
        "set python",
    )
    [group] = words_listed([finding])
    lines = finding_line(group).plain.split("\n")
    assert lines[0] == "✗ gpu-a: the probe failed; its stderr ends:  [probe_failed]"
    assert lines[1:] == ["    │ Traceback", f"    │ {forged}{ESCAPED}"]


@pytest.mark.parametrize(
    ("problem", "said"),
    [
        (
            "pynvml: NVMLError_LibraryNotFound: NVML Shared Library Not Found; "
            "nvidia-smi not found",
            "no NVIDIA GPU: no NVIDIA driver here (a CPU-only host)",
        ),
        ("pynvml is not installed; nvidia-smi not found", "no NVIDIA GPU: no NVIDIA driver"),
        ("", "no NVIDIA GPU: no NVIDIA driver"),
        (
            "pynvml is not installed; nvidia-smi: NVIDIA-SMI has failed",
            "no NVIDIA GPU found: pynvml is not installed; nvidia-smi: NVIDIA-SMI has failed",
        ),
    ],
)
def test_a_host_without_gpus_is_said_to_be_one_and_a_broken_driver_is_quoted(
    problem: str, said: str
) -> None:
    assert gpu_absence(problem).startswith(said)
