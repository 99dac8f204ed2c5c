"""Every way a host's text leaves ddptui, fed a hostile host's values: the sanitiser's limits,
``logs`` and ``status`` lines, ``launch --dry-run``, the console's launch dialog and every JSON
document. Nothing reaches the terminal live (ESC, C1, BEL, bidi controls), one line a host
sent is one line shown, and a limit holds on what is shown. Pure and in-process, no network.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from textual.notifications import Notification

import ddptui.untrusted
from ddptui.check import CheckReport, PortTest
from ddptui.commands import check as check_command
from ddptui.commands import launch as launch_command
from ddptui.commands import logs as logs_command
from ddptui.commands import runs as runs_command
from ddptui.commands import status as status_command
from ddptui.commands.follow import say, stamped
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import HostCheck, evaluate
from ddptui.probe.facts import HostFacts, Interface
from ddptui.probe.parse import parse_facts
from ddptui.remote.status import Reach, Reachability
from ddptui.run.control import RunControl
from ddptui.run.following.model import RunModel
from ddptui.run.following.updates import FileLine, HostSilent
from ddptui.run.record import RunRecord, RunState
from ddptui.run.store import Catalogue, RunStore
from ddptui.run.view import RunView
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.health import HealthScreen
from ddptui.untrusted import ELLIPSIS, plain, plain_bytes
from tests.ui import scenes
from tests.ui.pilot import until

CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x1b\\"
"""OSC 52, ended by ST (ESC backslash): writes ``rm -rf ~`` to the clipboard. Textual draws
ESC as it is, so in a widget's text this one would reach the terminal."""
SHOWN_CLIPBOARD = "\\x1b]52;c;cm0gLXJmIH4K\\x1b\\"
FORGED = "\n# node 9: gpu-b (192.0.2.3), 8 process(es)\ngpu-b rank 3 stderr (attempt 1) | all good"
HOSTILE = f"{CLIPBOARD}\x1b[2J\x9b31m\x07\u202etxt.exe\u2066{FORGED}\r"
LIVE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
"""What a terminal acts on (every control but the newline between lines, the bidi marks)."""
FORGED_LINE = re.compile(r"^(# node [9N]|gpu-b rank [3N] stderr)", re.MULTILINE)

hostile_text = st.text(
    alphabet=st.one_of(
        st.characters(),
        st.sampled_from(["\x1b", "\x9b", "\x9d", "\x07", "\r", "\n", "\t", "\u202e", "a", "…"]),
    ),
    max_size=300,
)


def _pieces(text: str, one_line: bool) -> list[str]:
    """``text`` as :func:`plain` shows it, character by character: where a cut may fall."""
    return [plain(char, one_line=one_line) for char in text]


# --- the sanitiser's limit (issue 18, finding 9) --------------------------------------------------


@given(hostile_text, st.integers(min_value=1, max_value=120), st.booleans())
def test_a_limit_holds_on_what_is_shown(text: str, limit: int, one_line: bool) -> None:
    shown = plain(text, limit=limit, one_line=one_line)
    whole = plain(text, one_line=one_line)
    assert len(shown) <= limit
    if len(whole) <= limit:
        assert shown == whole
        return
    assert shown.endswith(ELLIPSIS)
    kept = shown[: -len(ELLIPSIS)]
    # The longest run of whole escapes and characters that leaves room for the ellipsis.
    fitting = ""
    for piece in _pieces(text, one_line):
        if len(fitting) + len(piece) > limit - len(ELLIPSIS):
            break
        fitting += piece
    assert kept == fitting


@given(st.binary(max_size=600), st.integers(min_value=1, max_value=120))
def test_bytes_are_cut_as_their_text_is(data: bytes, limit: int) -> None:
    shown = plain_bytes(data, limit=limit, one_line=True)
    assert len(shown) <= limit
    assert shown == plain(data.decode("utf-8", errors="replace"), limit=limit, one_line=True)


def test_an_escape_is_whole_or_absent() -> None:
    assert plain("\x1b" * 3, limit=5) == "\\x1b…"
    assert plain("ab\x1b", limit=5) == "ab…"
    assert plain("\u202e" * 3, limit=8) == "\\u202e…"
    assert plain("a\nb", limit=3, one_line=True) == "a…"
    assert plain("a\x1b", limit=5) == "a\\x1b"


def test_a_megabyte_is_not_escaped_to_show_eighty_characters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    escaped = []
    visible = ddptui.untrusted._visible

    def counted(match: re.Match[str]) -> str:
        escaped.append(match)
        return visible(match)

    monkeypatch.setattr(ddptui.untrusted, "_visible", counted)
    shown = plain("\x1b" * 1_000_000, limit=80, one_line=True)
    assert shown == "\\x1b" * 19 + ELLIPSIS
    assert len(escaped) <= 2 * 80
    escaped.clear()
    assert len(plain_bytes(b"\x9b" * 1_000_000, limit=80)) <= 80
    assert len(escaped) <= 2 * 80


# --- logs, status, runs: one line in, one line out (issue 18, finding 8) --------------------------


def _logs_args(**given: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"errors": False, "events": False, "rank": None, **given})


def test_a_forged_log_line_prints_as_one_line_of_its_own_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = RunModel(scenes.run_record())
    stdout = FileLine("gpu-a", "logs/attempt-1/r_x/0/stdout.log", 0, f"step 1{HOSTILE}")
    event = FileLine(
        "gpu-a", "events/rank1.jsonl", 0, json.dumps({"message": HOSTILE}, ensure_ascii=False)
    )
    logs_command._write(
        [
            logs_command._shown(model, stdout, _logs_args()),
            logs_command._shown(model, event, _logs_args(events=True)),
        ]
    )
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("gpu-a rank 0 stdout (attempt 1) | step 1")
    assert lines[1].startswith("gpu-a rank 1 event | ")
    assert SHOWN_CLIPBOARD in lines[0] and "\\n# node 9" in lines[0]
    assert not LIVE.search(printed) and not FORGED_LINE.search(printed)


def test_errors_print_a_multi_line_message_on_its_own_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = RunModel(scenes.run_record())
    oom = f"RuntimeError: CUDA error: out of memory{HOSTILE}"
    model.apply(FileLine("gpu-a", "logs/attempt-1/r_x/1/stderr.log", 0, oom))
    logs_command._finish(model, _logs_args(errors=True))
    printed = capsys.readouterr().out
    # The line as the rank wrote it, its escapes shown as text.
    assert "cuda_oom" in printed and "out of memory\\x1b]52;c;" in printed
    assert not LIVE.search(printed) and not FORGED_LINE.search(printed)


def test_what_the_supervisor_says_is_one_line() -> None:
    stream = io.StringIO()
    say(f"could not ask the trainer to stop: {HOSTILE}", stream)
    stamped(f"gpu-a: not answering: {HOSTILE}", stream)
    printed = stream.getvalue()
    assert len(printed.splitlines()) == 2
    assert SHOWN_CLIPBOARD in printed
    assert not LIVE.search(printed) and not FORGED_LINE.search(printed)


def _hostile_run() -> tuple[RunRecord, RunModel]:
    record = scenes.run_record(RunState.RUNNING)
    record.transition(RunState.FAILED, f"torchrun on gpu-a exited 1: {HOSTILE}", scenes.CREATED)
    model = RunModel(record)
    stderr = f"RuntimeError: CUDA error: out of memory{HOSTILE}"
    model.apply(FileLine("gpu-a", "logs/attempt-1/r_x/0/stderr.log", 0, stderr))
    model.apply(HostSilent("gpu-b", 20.0, HOSTILE))
    return record, model


def _strings(document: Any) -> list[str]:
    if isinstance(document, str):
        return [document]
    if isinstance(document, dict):
        return [text for value in document.values() for text in _strings(value)]
    if isinstance(document, list):
        return [text for value in document for text in _strings(value)]
    return []


def _assert_ascii_json_of_the_real_values(printed: str) -> None:
    assert printed.isascii()
    # Escaped on the way out, not taken away: a script reading it gets what the host sent.
    assert any(CLIPBOARD in text for text in _strings(json.loads(printed)))


def test_status_says_a_hostile_run_in_safe_lines_and_ascii_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record, model = _hostile_run()

    async def view(self: RunControl, run_id: str | None, **_: object) -> RunView:
        return RunView.of(record, model, model.judgement(record))

    monkeypatch.setattr(RunControl, "view", view)
    assert status_command.run(argparse.Namespace(run=None, json=False)) == 1
    printed = capsys.readouterr().out
    assert "gpu-b" in printed and SHOWN_CLIPBOARD in printed
    assert not LIVE.search(printed) and not FORGED_LINE.search(printed)
    assert status_command.run(argparse.Namespace(run=None, json=True)) == 1
    _assert_ascii_json_of_the_real_values(capsys.readouterr().out)


def test_runs_lists_a_hostile_run_in_safe_lines_and_ascii_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record, _ = _hostile_run()
    catalogue = Catalogue([record], {"20261130-222219-dead": f"unreadable: {HOSTILE}"})
    monkeypatch.setattr(RunControl, "catalogue", lambda self: catalogue)
    assert runs_command.run(argparse.Namespace(json=False)) == 0
    out, err = capsys.readouterr()
    assert record.id in out and len(err.splitlines()) == 1
    assert not LIVE.search(out + err) and not FORGED_LINE.search(out + err)
    assert runs_command.run(argparse.Namespace(json=True)) == 0
    _assert_ascii_json_of_the_real_values(capsys.readouterr().out)


# --- launch --dry-run and the console's launch dialog (issue 18, finding 4) -----------------------


def _hostile_facts(facts: HostFacts, address: str, workdir: str) -> HostFacts:
    """The host's workdir and the interface holding ``address`` named by an attacker."""
    interface = Interface(f"eth0{HOSTILE}", (ipaddress.IPv4Interface(f"{address}/24"),))
    return dataclasses.replace(
        facts,
        disk=dataclasses.replace(facts.disk, path=workdir),
        interfaces=(interface,),
    )


def _hostile_report(workdir: str = f"/srv/runs{HOSTILE}") -> CheckReport:
    idle = parse_facts((scenes.FIXTURES / "probe" / "h200_idle_nvml.json").read_text())
    hosts = (HostConfig("gpu-a", "192.0.2.2"), HostConfig("gpu-b", "192.0.2.3"))
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    checks = [
        HostCheck(host, Reachability(Reach.OK), _hostile_facts(idle, host.address, workdir))
        for host in hosts
    ]
    return CheckReport(config, tuple(checks), tuple(evaluate(config, checks)), 1.0, PortTest(True))


def test_launch_dry_run_shows_hostile_paths_and_interfaces_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _hostile_report()

    async def check(self: RunControl, config: Config, progress: object = None) -> CheckReport:
        return report

    monkeypatch.setattr(launch_command, "load_config", lambda path, **_: report.config)
    monkeypatch.setattr(RunControl, "check", check)
    args = argparse.Namespace(
        hosts="hosts.toml",
        passthrough=[],
        force=True,
        recheck=True,
        dry_run=True,
        debug=False,
        detach=False,
    )
    assert launch_command.run(args) == 0
    out, err = capsys.readouterr()
    assert not LIVE.search(out) and not LIVE.search(err)
    lines = out.splitlines()
    # Each node: a comment, cd, the exports, the command; nothing a host added.
    assert [line.split(":")[0] for line in lines if line.startswith("# node")] == [
        "# node 0",
        "# node 1",
    ]
    assert sum(line.startswith("cd ") for line in lines) == 2
    assert not FORGED_LINE.search(out)
    assert f"cd '/srv/runs{SHOWN_CLIPBOARD}" in out
    assert f"NCCL_SOCKET_IFNAME='eth0{SHOWN_CLIPBOARD}" in out


def test_the_launch_dialog_shows_a_hostile_plan_with_no_live_escape(tmp_path: Path) -> None:
    asyncio.run(_test_the_launch_dialog_shows_a_hostile_plan_with_no_live_escape(tmp_path))


async def _test_the_launch_dialog_shows_a_hostile_plan_with_no_live_escape(
    tmp_path: Path,
) -> None:
    report = _hostile_report()
    app = DdptuiApp(first_screen=HealthScreen(report.config, report), store=RunStore(tmp_path))
    app.config, app.report = report.config, report
    async with app.run_test(size=(240, 70)) as pilot:
        await pilot.press("l")
        await until(pilot, "the launch dialog", lambda: isinstance(app.screen, ConfirmScreen), 10)
        await pilot.pause(0.2)
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        shown = dialog.body.plain
        screen = app.export_screenshot()
        await pilot.press("n")
    assert f"interface eth0{SHOWN_CLIPBOARD}" in shown
    assert f"cd '/srv/runs{SHOWN_CLIPBOARD}" in shown
    assert not LIVE.search(shown) and not FORGED_LINE.search(shown)
    # What Textual drew: it passes ESC through, so any left would be in the export.
    assert "eth0" in screen and "\x1b]52" not in screen
    assert not LIVE.search(screen.replace("\n", ""))
    # The plan still holds what the host reported: only what is shown is escaped.
    plan = app.control.plan(report.config, report)
    assert plan.nodes[0].env["NCCL_SOCKET_IFNAME"] == f"eth0{HOSTILE}"


def test_a_plan_a_host_makes_impossible_is_said_not_a_crash(tmp_path: Path) -> None:
    asyncio.run(_test_a_plan_a_host_makes_impossible_is_said_not_a_crash(tmp_path))


async def _test_a_plan_a_host_makes_impossible_is_said_not_a_crash(tmp_path: Path) -> None:
    # The hosts file's workdir starts with ~: the host's own expansion of it is relative.
    report = _hostile_report(workdir=f"runs{HOSTILE}")
    app = DdptuiApp(first_screen=HealthScreen(report.config, report), store=RunStore(tmp_path))
    app.config, app.report = report.config, report
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("l")
        await until(pilot, "a notification", lambda: len(app._notifications) > 0, 10)
        assert isinstance(app.screen, HealthScreen)
        note: Notification
        (note,) = app._notifications
        assert note.severity == "error" and "not an absolute path" in note.message
        assert "\n" not in note.message and not LIVE.search(note.message)


# --- check --json ---------------------------------------------------------------------------------


def test_check_json_is_ascii(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _hostile_report()

    async def check(self: RunControl, config: Config, progress: object = None) -> CheckReport:
        return report

    monkeypatch.setattr(check_command, "load_config", lambda path, **_: report.config)
    monkeypatch.setattr(RunControl, "check", check)
    check_command.run(argparse.Namespace(hosts="hosts.toml", json=True, bandwidth=False))
    out, err = capsys.readouterr()
    _assert_ascii_json_of_the_real_values(out)
    assert not LIVE.search(err)
