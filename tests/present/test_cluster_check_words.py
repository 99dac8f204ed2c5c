"""The check's words take either kind of check and tell them apart themselves: ``ddptui check``
and ``ddptui launch`` print whatever ``RunControl.check`` returned, branching on nothing."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ddptui.check import CheckReport, PortTest
from ddptui.commands.check import render
from ddptui.config import parse_config
from ddptui.config.model import SlurmConfig
from ddptui.health.slurm import SlurmCheck, evaluate_slurm, parse_sinfo
from ddptui.present import check as words
from ddptui.run.control import RunControl
from ddptui.run.store import RunStore

HOSTS = '[[hosts]]\nname = "gpu-a"\naddress = "192.0.2.2"\n'


def _slurm_check(nodes: int) -> SlurmCheck:
    up = parse_sinfo("node0|debug*|idle|(null)|none\nnode1|debug*|drained|(null)|bad_gpu")
    return evaluate_slurm(SlurmConfig(nodes=nodes), up, set())


def _hosts_report() -> CheckReport:
    config = parse_config(HOSTS, Path("hosts.toml"))
    return CheckReport(config, (), (), 0.1, PortTest(False, "one host"))


def _printed(report: object) -> str:
    out = io.StringIO()
    render(report, Console(file=out, width=200, color_system=None))  # type: ignore[arg-type]
    return out.getvalue()


def test_a_slurm_report_is_its_findings_and_its_summary() -> None:
    check = _slurm_check(nodes=2)
    parts = words.report_parts(check)
    assert not any(isinstance(part.content, Table) for part in parts)
    assert parts[-1].content == words.summary(check)
    assert str(words.summary(check)).startswith("not healthy: 1 error, 1 warning, partition debug")
    printed = _printed(check)
    assert "node1 is drained in Slurm (bad_gpu)" in printed and "hosts" not in printed


def test_an_ssh_report_has_its_hosts_table_and_its_port_note() -> None:
    report = _hosts_report()
    parts = words.report_parts(report)
    assert isinstance(parts[1].content, Table)
    printed = _printed(report)
    assert printed.startswith("hosts\n")
    assert "master port test skipped: one host" in printed
    assert str(words.summary(report)) == "healthy: 0 hosts ready (0.1 s)"


def test_launch_shows_slurm_findings_always_and_an_ssh_report_only_when_it_refuses() -> None:
    warned = _slurm_check(nodes=1)
    assert warned.healthy and warned.findings
    assert words.before_launch(warned, refused=False) == words.report_parts(warned)
    ssh = _hosts_report()
    assert words.before_launch(ssh, refused=False) == []
    shown = words.before_launch(ssh, refused=True)
    assert [str(part.content) for part in shown if not isinstance(part.content, Table)] == [
        str(part.content) for part in words.report_parts(ssh) if not isinstance(part.content, Table)
    ]
    assert isinstance(shown[1].content, Table)
    assert words.refusal(_slurm_check(nodes=2)) == (
        "not launching: the check found errors (above). Fix them, or launch anyway with --force"
    )
    assert words.refusal(ssh).startswith("not launching: the check found 0 error(s) (above)")


def test_the_check_s_progress_says_what_is_asked(tmp_path: Path) -> None:
    control = RunControl(RunStore(tmp_path / "runs"))
    slurm = parse_config("[slurm]\nnodes = 2\n[job]\nnproc_per_node = 1\n", Path("s.toml"))
    assert words.checking({}, control.checked_hosts(slurm)) == "asking Slurm about its nodes…"
    hosts = parse_config(HOSTS, Path("hosts.toml"))
    assert words.checking({}, control.checked_hosts(hosts)) == "checking 1 host…"
