"""The check's hosts exist once: ``ddptui check``'s hosts table and the health screen's show the
same row value (:func:`ddptui.present.hosts.host_rows`) cell for cell, and the check's progress
is one line of words for both.

No network: the report is the console's scene (tests/ui/scenes.py) with gpu-a's ``gpus`` key
selecting two of its four GPUs, one of them busy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
from pathlib import Path

from rich.console import Console
from rich.text import Text
from textual.widgets import DataTable, Static

from ddptui.check import CheckReport
from ddptui.commands.check import HOST_COLUMNS, render
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import HostCheck, evaluate
from ddptui.present.bandwidth import measuring
from ddptui.present.hosts import (
    CONCERN_FIRST_ABOVE,
    NOT_AVAILABLE,
    HostRow,
    by_concern,
    check_progress,
    differing,
    gpus_text,
    host_row,
    host_rows,
    node_label,
)
from ddptui.probe.facts import NA, GpuProcess
from ddptui.remote.status import Reach, Reachability
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.health import COLUMNS, HealthScreen
from tests.ui import scenes

HOSTILE = "\x1b]0;owned\x07"
ESCAPED = "\\x1b]0;owned\\x07"
SHARED = {
    # The health screen's column → the CLI's, for the columns both tables have.
    "node": "node",
    "host": "name",
    "status": "status",
    "GPUs": "GPUs",
    "hostname": "hostname",
    "python": "python",
    "torch": "torch",
    "interface": "interface",
}


def _report() -> CheckReport:
    """The console's scene, gpu-a's ``gpus = [0, 1]`` of four with GPU 1 busy, gpu-b's
    hostname hostile."""
    scene = scenes.health_report()
    first, second, third = scene.checks
    assert first.facts is not None and second.facts is not None
    idle = first.facts.gpus.devices[0]
    busy = dataclasses.replace(
        idle, index=1, memory_used_mib=21007, processes=(GpuProcess(529, "python3", 20998),)
    )
    devices = (idle, busy, *(dataclasses.replace(idle, index=i) for i in (2, 3)))
    facts = dataclasses.replace(
        first.facts, gpus=dataclasses.replace(first.facts.gpus, devices=devices)
    )
    gpu_a = dataclasses.replace(first.host, gpus=(0, 1))
    gpu_b_facts = dataclasses.replace(second.facts, hostname=f"vm{HOSTILE}")
    hosts = (gpu_a, second.host, third.host)
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    checks = [
        dataclasses.replace(first, host=gpu_a, facts=facts),
        dataclasses.replace(second, facts=gpu_b_facts),
        third,
    ]
    findings = tuple(evaluate(config, checks))
    return CheckReport(config, tuple(checks), findings, 3.4, scene.master_port_test)


def _cli_rows(report: CheckReport) -> dict[str, dict[str, str]]:
    """The CLI's hosts table: host → column → the cell's text."""
    out = io.StringIO()
    render(report, Console(file=out, width=400, color_system=None))
    lines = out.getvalue().splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("┏"))
    header = [cell.strip() for cell in lines[start + 1].split("┃")[1:-1]]
    assert tuple(header) == HOST_COLUMNS
    rows = {}
    for line in lines[start + 3 :]:
        if line.startswith("└"):
            break
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        rows[cells[1]] = dict(zip(header, cells, strict=True))
    return rows


def _console_rows(report: CheckReport) -> dict[str, dict[str, str]]:
    """The health screen's hosts table: host → column → the cell's text."""

    async def drive() -> dict[str, dict[str, str]]:
        app = DdptuiApp(first_screen=HealthScreen(report.config, report))
        async with app.run_test(size=(200, 48)) as pilot:
            await pilot.pause()
            table = app.screen.query_one("#hosts", DataTable)
            labels = [column.label.plain for column in table.columns.values()]
            assert sorted(labels) == sorted(COLUMNS)
            rows = {}
            for index in range(table.row_count):
                cells = [
                    cell.plain if isinstance(cell, Text) else str(cell)
                    for cell in table.get_row_at(index)
                ]
                rows[cells[1]] = dict(zip(labels, cells, strict=True))
        return rows

    return asyncio.run(drive())


def test_both_hosts_tables_show_one_row_value_cell_for_cell() -> None:
    report = _report()
    rows = {row.name: row for row in host_rows(report.config, report)}
    cli, console = _cli_rows(report), _console_rows(report)
    assert set(cli) == set(console) == set(rows) == {"gpu-a", "gpu-b", "gpu-c"}
    for name, row in rows.items():
        expected = _row_cells(row)
        shown = {column: console[name][column].removesuffix(" ◆") for column in SHARED}
        assert shown == expected, name
        assert {column: cli[name][SHARED[column]] for column in SHARED} == expected, name
    # The GPUs the host's `gpus` key selects, counted as the findings count them, and how many
    # the host has: in both tables (the console's said "1/2 free" alone).
    assert console["gpu-a"]["GPUs"] == cli["gpu-a"]["GPUs"] == "1/2 free (4 present)"
    assert rows["gpu-a"].gpus.style == "yellow"
    assert console["gpu-b"]["GPUs"] == cli["gpu-b"]["GPUs"] == "0/1 free"
    # A host's value is one line through the sanitiser, in both.
    assert cli["gpu-b"]["hostname"] == console["gpu-b"]["hostname"] == f"vm{ESCAPED}"
    # A host that was not probed has its status and nothing else.
    assert cli["gpu-c"]["status"] == "timeout" and cli["gpu-c"]["torch"] == ""
    # The versions that differ are the row value's too: gpu-b's torch, marked in the console.
    assert differing(list(rows.values())) == ["torch"]
    assert rows["gpu-b"].odd == {"torch"} and rows["gpu-a"].odd == frozenset()
    assert console["gpu-b"]["torch"].endswith(" ◆") and not console["gpu-a"]["torch"].endswith("◆")


def _row_cells(row: HostRow) -> dict[str, str]:
    cells = {"node": str(row.node), "host": row.name, "status": row.status.plain}
    probed = {
        "GPUs": row.gpus.plain,
        "hostname": row.hostname,
        "python": row.python,
        "torch": row.torch,
        "interface": row.interface,
    }
    return cells | (probed if row.probed else dict.fromkeys(probed, ""))


def test_a_row_says_what_the_host_could_not_give_and_where_its_check_stands() -> None:
    report = scenes.health_report()
    gpu_a, _, gpu_c = report.checks
    assert gpu_a.facts is not None
    torch = dataclasses.replace(gpu_a.facts.torch, nccl_version=NA, status="missing")
    facts = dataclasses.replace(gpu_a.facts, torch=torch)
    row = host_row(0, gpu_a.host, dataclasses.replace(gpu_a, facts=facts), head_address="x")
    assert (row.nccl, row.torch, row.probed) == (NOT_AVAILABLE, "missing", True)

    unprobed = host_row(2, gpu_c.host, gpu_c, head_address="x")
    assert (unprobed.status.plain, unprobed.probed, unprobed.gpus.plain) == ("timeout", False, "")
    assert host_row(2, gpu_c.host, None, head_address="x").status.plain == "–"
    checking = host_row(2, gpu_c.host, gpu_c, head_address="x", progress=f"connected{HOSTILE}")
    assert (
        checking.status.plain.startswith("… connected\\x1b]0;")
        and "\x1b" not in checking.status.plain
    )
    # While a check runs the rows keep what the last one found.
    rows = host_rows(report.config, report, {"gpu-a": "connected"})
    assert rows[0].status.plain == "… connected" and rows[0].torch == "2.11.0+cu130"


def test_a_host_without_gpus_says_none_and_one_not_in_the_report_has_no_gpu_text() -> None:
    report = scenes.health_report()
    gpu_a = report.checks[0]
    assert gpu_a.facts is not None
    gpus = dataclasses.replace(gpu_a.facts.gpus, devices=(), problem="nvidia-smi not found")
    check = dataclasses.replace(gpu_a, facts=dataclasses.replace(gpu_a.facts, gpus=gpus))
    row = host_row(0, gpu_a.host, check, head_address="192.0.2.2")
    assert (row.gpus.plain, row.gpus.style) == ("none", "dim")
    assert gpus_text(report, "gpu-z") is None
    text = gpus_text(report, "gpu-c")
    assert text is not None and text.plain == "GPUs on gpu-c\n192.0.2.4:22: no answer within 10 s"


def test_the_check_s_progress_is_one_line_for_both_front_ends() -> None:
    assert check_progress({}, 3) == "checking 3 hosts…"
    latest = {"gpu-a": "probed", "gpu-b": "connected", "gpu-c": "connected"}
    assert check_progress(latest) == "checking 3 hosts: 2 connected, 1 probed"
    assert check_progress({"gpu-a": "probed"}, 1) == "checking 1 host: 1 probed"
    assert check_progress({"gpu-a": f"x{HOSTILE}"}, 2) == f"checking 2 hosts: 1 x{ESCAPED}"
    assert measuring(2) == "measuring the interconnect of 2 hosts…"


def test_the_health_screen_says_the_check_s_progress_in_the_cli_s_words() -> None:
    report = scenes.health_report()

    async def drive() -> str:
        screen = HealthScreen(report.config, report)
        app = DdptuiApp(first_screen=screen)
        async with app.run_test(size=(160, 48)) as pilot:
            screen.progress = {"gpu-a": "probed", "gpu-b": "connected", "gpu-c": "waiting"}
            screen.checking = True
            screen._show()
            await pilot.pause()
            status = screen.query_one("#check-status", Static).content
            assert isinstance(status, Text)
            return status.plain

    shown = asyncio.run(drive())
    said = check_progress({"gpu-a": "probed", "gpu-b": "connected", "gpu-c": "waiting"})
    assert shown.startswith(said)


def test_an_unprobed_host_is_only_its_status_in_the_cli() -> None:
    host = HostConfig("gpu-z", "192.0.2.9")
    config = Config(Path("hosts.toml"), ClusterConfig(), (host,), JobConfig())
    check = HostCheck(host, Reachability(Reach.DNS_FAILED, "no such host"))
    report = CheckReport(config, (check,), (), 0.1, scenes.health_report().master_port_test)
    assert _cli_rows(report)["gpu-z"]["status"] == "dns failed"


def test_a_spare_is_listed_after_the_run_s_hosts_with_no_node_rank() -> None:
    report = scenes.health_report()
    spare = HostConfig("gpu-e", "10.0.0.15", spare=True)
    config = dataclasses.replace(report.config, hosts=(*report.config.hosts, spare))
    rows = host_rows(config, report)
    assert [row.name for row in rows] == [*(h.name for h in report.config.ordered_hosts), "gpu-e"]
    assert [node_label(row) for row in rows][-2:] == [str(len(rows) - 2), "spare"]
    # The check reaches it with the others; no rank is planned on it.
    assert config.checked_hosts[-1] is spare and spare not in config.ordered_hosts


def test_past_sixteen_hosts_the_odd_ones_come_first_grouped_by_finding() -> None:
    # 24 hosts: gpu-05 and gpu-20 do not answer, gpu-09 and gpu-17 hold a busy GPU and an
    # older torch; the rest are the idle H200.
    base = scenes.health_report()
    idle, busy = base.checks[0].facts, base.checks[1].facts
    hosts = tuple(HostConfig(f"gpu-{n:02d}", f"192.0.2.{n + 10}") for n in range(24))
    silent = Reachability(Reach.TIMEOUT, "no answer within 10 s")
    checks = [
        HostCheck(host, silent)
        if n in (5, 20)
        else HostCheck(host, Reachability(Reach.OK), busy if n in (9, 17) else idle, 0.0, None)
        for n, host in enumerate(hosts)
    ]
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    findings = tuple(evaluate(config, checks))
    report = CheckReport(config, tuple(checks), findings, 1.0, base.master_port_test)

    rows = by_concern(host_rows(config, report), report)

    names = [row.name for row in rows]
    assert names[:4] == ["gpu-05", "gpu-20", "gpu-09", "gpu-17"]
    assert names[4:] == [host.name for host in hosts if host.name not in names[:4]]
    # Up to sixteen hosts, every one in view: node order.
    few = dataclasses.replace(config, hosts=hosts[:CONCERN_FIRST_ABOVE])
    assert [row.name for row in by_concern(host_rows(few, report), report)] == [
        host.name for host in hosts[:CONCERN_FIRST_ABOVE]
    ]
