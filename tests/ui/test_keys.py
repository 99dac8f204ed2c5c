"""The console's keys, driven with Textual's pilot over the recorded data (no network)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text
from textual.command import CommandPalette
from textual.widgets import DataTable, RichLog, Static

from ddptui.health.bandwidth import BandwidthReport, read_result
from ddptui.run.control import RunControl
from ddptui.run.diagnose import marks_error
from ddptui.run.evidence.kept import DumpUnreadable
from ddptui.run.following.model import RunModel
from ddptui.run.following.updates import FileLine, HostBack, HostSilent
from ddptui.run.record import RunState
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.first_run import FirstRunScreen
from ddptui.ui.screens.health import HealthScreen
from ddptui.ui.screens.help import HelpScreen
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.widgets.loss_chart import LossChart
from tests.ui import scenes
from tests.ui.pilot import until


def _run_app(state: RunState = RunState.RUNNING) -> tuple[DdptuiApp, RunScreen]:
    model = scenes.run_model(state=state)
    screen = RunScreen(model.record, model=model)
    return DdptuiApp(first_screen=screen), screen


def _log_lines(screen: RunScreen) -> list[str]:
    return [strip.text for strip in screen.query_one("#log", RichLog).lines]


def test_slash_filters_the_followed_log_and_esc_clears_it() -> None:
    asyncio.run(_test_slash_filters_the_followed_log_and_esc_clears_it())


async def _test_slash_filters_the_followed_log_and_esc_clears_it() -> None:
    app, screen = _run_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("o")
        everything = _log_lines(screen)
        assert len(everything) > 20
        await pilot.press("slash", *"NCCL WARN", "enter")
        filtered = _log_lines(screen)
        assert filtered and len(filtered) < len(everything)
        assert all("NCCL WARN" in line for line in filtered)
        await pilot.press("escape")
        assert _log_lines(screen) == everything
        assert isinstance(app.screen, RunScreen)


def test_y_switches_the_loss_axis_between_log_and_linear() -> None:
    asyncio.run(_test_y_switches_the_loss_axis_between_log_and_linear())


async def _test_y_switches_the_loss_axis_between_log_and_linear() -> None:
    app, screen = _run_app()
    async with app.run_test(size=(120, 40)) as pilot:
        chart = screen.query_one(LossChart)
        assert chart.log_scale
        await pilot.press("y")
        await pilot.pause(0.2)
        assert not chart.log_scale
        assert chart._y_label.strip() == "loss"


def test_help_shows_the_screens_keys_and_how_to_come_back() -> None:
    asyncio.run(_test_help_shows_the_screens_keys_and_how_to_come_back())


async def _test_help_shows_the_screens_keys_and_how_to_come_back() -> None:
    app, _ = _run_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.keys)
        assert keys["s"] == "stop" and keys["K"] == "kill" and keys["/"] == "filter log"
        # Keys left out of the footer for room are still in the help.
        assert keys["N"] == "previous error" and keys["f"] == "follow log"
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)


def test_colon_opens_the_command_palette_with_the_screens_actions() -> None:
    asyncio.run(_test_colon_opens_the_command_palette_with_the_screens_actions())


async def _test_colon_opens_the_command_palette_with_the_screens_actions() -> None:
    app, _ = _run_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("colon")
        assert isinstance(app.screen, CommandPalette)
        titles = [command.title for command in app.get_system_commands(app.screen_stack[-2])]
        assert {"stop", "kill", "resume", "filter log", "help"} <= set(titles)


def test_quitting_while_the_run_goes_on_says_how_to_come_back() -> None:
    asyncio.run(_test_quitting_while_the_run_goes_on_says_how_to_come_back())


async def _test_quitting_while_the_run_goes_on_says_how_to_come_back() -> None:
    app, screen = _run_app()
    async with app.run_test() as pilot:
        await pilot.press("q")
    assert app.goodbye is not None
    assert f"run {screen.record.id} goes on" in app.goodbye
    assert f"ddptui status {screen.record.id}" in app.goodbye


def test_quitting_after_the_run_ended_says_nothing() -> None:
    asyncio.run(_test_quitting_after_the_run_ended_says_nothing())


async def _test_quitting_after_the_run_ended_says_nothing() -> None:
    app, _ = _run_app(RunState.FAILED)
    async with app.run_test() as pilot:
        await pilot.press("q")
    assert app.goodbye is None


def test_without_a_hosts_file_the_first_screen_offers_init(tmp_path: Path) -> None:
    asyncio.run(_test_without_a_hosts_file_the_first_screen_offers_init(tmp_path))


async def _test_without_a_hosts_file_the_first_screen_offers_init(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    app = DdptuiApp(hosts)
    async with app.run_test() as pilot:
        assert isinstance(app.screen, FirstRunScreen)
        await pilot.press("i")
    assert "[cluster]" in hosts.read_text()
    assert app.goodbye is not None and "ddptui trust" in app.goodbye


def test_a_bad_hosts_file_is_shown_not_raised(tmp_path: Path) -> None:
    asyncio.run(_test_a_bad_hosts_file_is_shown_not_raised(tmp_path))


async def _test_a_bad_hosts_file_is_shown_not_raised(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text("[cluster]\nidentity_fle = 'x'\n")
    app = DdptuiApp(hosts)
    async with app.run_test():
        assert isinstance(app.screen, FirstRunScreen)
        assert app.screen.problem is not None and "did you mean" in app.screen.problem


def test_host_text_reaches_the_table_as_plain_text() -> None:
    asyncio.run(_test_host_text_reaches_the_table_as_plain_text())


async def _test_host_text_reaches_the_table_as_plain_text() -> None:
    report = scenes.health_report()
    hostile = report.checks[0].host.__class__("\x1b]0;pwned\x07[b]x", "192.0.2.9")
    config = report.config.__class__(
        report.config.path, report.config.cluster, (hostile,), report.config.job
    )
    app = DdptuiApp(first_screen=HealthScreen(config, report))
    async with app.run_test():
        table = app.screen.query_one("#hosts")
        name = table.get_row_at(0)[1]  # type: ignore[attr-defined]
        assert isinstance(name, Text)
        assert name.plain == "\\x1b]0;pwned\\x07[b]x"


def test_confirmation_answers() -> None:
    asyncio.run(_test_confirmation_answers())


async def _test_confirmation_answers() -> None:
    app, _ = _run_app()
    answers: list[bool] = []
    async with app.run_test() as pilot:
        app.push_screen(ConfirmScreen("t", Text("b"), "q?"), answers.append)
        await pilot.press("n")
        app.push_screen(ConfirmScreen("t", Text("b"), "q?"), answers.append)
        await pilot.press("y")
    assert answers == [False, True]


def test_a_field_takes_a_line_of_text_with_the_answer() -> None:
    asyncio.run(_test_a_field_takes_a_line_of_text_with_the_answer())


async def _test_a_field_takes_a_line_of_text_with_the_answer() -> None:
    app, _ = _run_app()
    answers: list[tuple[bool, str]] = []
    async with app.run_test() as pilot:
        for keys in (
            # y answers at once; a edits the field, whose letters are text, and enter confirms.
            ("y",),
            ("a", *"--lr 1e-3 --yes", "enter"),
            # esc leaves the field, a second esc declines.
            ("a", *"no", "escape", "escape"),
        ):
            screen = ConfirmScreen("t", Text("b"), "q?", field="extra arguments")
            await app.push_screen(
                screen, lambda yes, screen=screen: answers.append((yes, screen.text))
            )
            await pilot.pause()
            await pilot.press(*keys)
    assert answers == [(True, ""), (True, "--lr 1e-3 --yes"), (False, "no")]


def test_n_and_shift_n_jump_between_error_lines_and_f_follows_again() -> None:
    asyncio.run(_test_n_and_shift_n_jump_between_error_lines_and_f_follows_again())


async def _test_n_and_shift_n_jump_between_error_lines_and_f_follows_again() -> None:
    app, screen = _run_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("o")
        await pilot.pause(0.2)
        log = screen.query_one("#log", RichLog)
        lines = _log_lines(screen)
        errors = [row for row, text in enumerate(lines) if marks_error(text.split("] ", 1)[1])]
        assert len(errors) >= 2 and errors[0] > 0 and log.max_scroll_y > errors[1]

        async def jump(key: str) -> int:
            await pilot.press(key)
            await pilot.pause(0.2)
            assert not log.auto_scroll
            return round(log.scroll_y)

        assert await jump("n") == errors[0]
        assert await jump("n") == errors[1]
        assert await jump("N") == errors[0]
        assert await jump("N") == errors[0]
        assert "no error above" in screen.note

        await pilot.press("f")
        await pilot.pause(0.2)
        assert log.auto_scroll and log.scroll_y == log.max_scroll_y


def test_a_rank_value_wider_than_its_column_is_shown_whole() -> None:
    asyncio.run(_test_a_rank_value_wider_than_its_column_is_shown_whole())


async def _test_a_rank_value_wider_than_its_column_is_shown_whole() -> None:
    model = scenes.run_model(failed=False, steps=0)
    screen = RunScreen(model.record, model=model)
    app = DdptuiApp(first_screen=screen)

    def step(number: int, loss: float) -> None:
        for rank in range(4):
            event = {"v": 1, "type": "step", "rank": rank, "local_rank": rank % 2,
                     "node_rank": rank // 2, "world_size": 4, "time": scenes.CREATED + number,
                     "epoch": 0, "step": number, "loss": loss}  # fmt: skip
            host = model.record.nodes[rank // 2].host
            model.apply(FileLine(host, f"events/rank{rank}.jsonl", number, json.dumps(event)))
        screen.dirty = True

    async with app.run_test(size=(120, 40)) as pilot:
        table = screen.query_one("#ranks", DataTable)
        step(1, 0.03)
        await pilot.pause(0.7)
        assert str(table.get_row_at(0)[3]) == "0.03"
        step(2, 0.008914)
        await pilot.pause(0.7)
        shown = [strip.text for strip in table.render_lines(table.region.reset_offset)]
        assert any(" 0.008914 " in line for line in shown), shown


def test_a_host_that_stops_answering_shows_on_the_status_line_with_what_it_means() -> None:
    asyncio.run(_test_a_host_that_stops_answering_shows_on_the_status_line_with_what_it_means())


async def _test_a_host_that_stops_answering_shows_on_the_status_line_with_what_it_means() -> None:
    model = scenes.run_model(failed=False)
    screen = RunScreen(model.record, model=model)
    app = DdptuiApp(first_screen=screen)

    def status() -> str:
        return str(screen.query_one("#run-status", Static).render())

    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.7)
        assert "not answering" not in status()
        # gpu-a's ranks keep stepping (the scene's steps arrived just now): gpu-b still trains.
        model.apply(HostSilent("gpu-b", 12.0, "no answer"))
        screen.dirty = True
        await pilot.pause(0.7)
        shown = status()
        assert "gpu-b not answering: no answer for 12 s" in shown
        assert "its peers keep stepping" in shown
        table = screen.query_one("#ranks", DataTable)
        states = [str(table.get_row_at(row)[4]) for row in range(table.row_count)]
        assert [state.endswith("⌁ no answer") for state in states] == [False, False, True, True]
        model.apply(HostBack("gpu-b"))
        screen.dirty = True
        await pilot.pause(0.7)
        assert "not answering" not in status()


def test_at_80_columns_the_health_screen_names_what_differs_and_where_the_rest_is() -> None:
    asyncio.run(_test_at_80_columns_the_health_screen_names_what_differs_and_where_the_rest_is())


async def _test_at_80_columns_the_health_screen_names_what_differs_and_where_the_rest_is() -> None:
    report = scenes.health_report()
    for size, hidden in (((80, 24), "driver, interface"), ((200, 60), None)):
        app = DdptuiApp(first_screen=HealthScreen(report.config, report))
        async with app.run_test(size=size) as pilot:
            await pilot.pause(0.3)

            def status(app: DdptuiApp = app) -> str:
                text = app.screen.query_one("#check-status", Static).content
                assert isinstance(text, Text)
                return text.plain

            # gpu-b's torch differs: named whether or not its column is in view, and its
            # column comes right after those that decide whether a host takes part.
            assert "◆ differs between hosts: torch" in status()
            table = app.screen.query_one("#hosts", DataTable)
            labels = [column.label.plain for column in table.columns.values()]
            assert labels[:6] == ["node", "host", "status", "GPUs", "torch", "hostname"]
            if hidden is None:
                assert "not in view" not in status(), status()
                continue
            assert f"not in view: {hidden} (←/→)" in status(), status()
            # Scrolled to the right, the hint follows what the table shows.
            for _ in range(30):
                await pilot.press("right")
            await pilot.pause(0.3)
            assert "not in view: node, host" in status(), status()


def test_a_narrow_rank_table_shows_whole_columns_and_comes_back_wider() -> None:
    asyncio.run(_test_a_narrow_rank_table_shows_whole_columns_and_comes_back_wider())


async def _test_a_narrow_rank_table_shows_whole_columns_and_comes_back_wider() -> None:
    app, screen = _run_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.7)
        table = screen.query_one("#ranks", DataTable)
        labels = [column.label.plain for column in table.columns.values()]
        # A column cut at the edge would show a rate of 12025 as 12: a column is whole or gone.
        assert labels[:5] == ["node", "rank", "step", "loss", "state"] and len(labels) < 8
        assert table.virtual_size.width <= table.scrollable_content_region.width
        await pilot.resize_terminal(200, 50)
        await pilot.pause(0.7)
        labels = [column.label.plain for column in table.columns.values()]
        assert labels[-3:] == ["samples/s", "step s", "memory"]
        assert str(table.get_row_at(0)[5]).isdigit()


def test_a_rank_without_log_lines_says_so() -> None:
    asyncio.run(_test_a_rank_without_log_lines_says_so())


async def _test_a_rank_without_log_lines_says_so() -> None:
    model = scenes.run_model(failed=False)
    model.logs.clear()
    screen = RunScreen(model.record, model=model)
    async with DdptuiApp(first_screen=screen).run_test(size=(80, 24)) as pilot:
        await pilot.press("o")
        assert _log_lines(screen) == ["rank 0: no log line yet · enter on a rank shows its log"]
        await pilot.press("slash", *"warn", "enter")
        assert _log_lines(screen) == ["rank 0: no log line holds 'warn' · / changes it"]


def test_a_script_that_prints_its_loss_has_it_charted_without_events() -> None:
    asyncio.run(_test_a_script_that_prints_its_loss_has_it_charted_without_events())


async def _test_a_script_that_prints_its_loss_has_it_charted_without_events() -> None:
    from tests.run.bed import two_host_record

    model = RunModel(two_host_record())
    for step in range(1, 60):
        for rank in range(4):
            log = f"logs/attempt-1/x_y/attempt_0/{rank % 2}/stdout.log"
            line = f"{{'loss': {1 / step + rank / 50:.4f}, 'epoch': {step / 10}}}"
            model.apply(FileLine("ab"[rank // 2], log, step, line))
    screen = RunScreen(model.record, model=model)
    app = DdptuiApp(first_screen=screen)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.7)
        table = screen.query_one("#ranks", DataTable)
        assert [str(table.get_row_at(row)[3]) for row in range(4)] == [
            "0.0169", "0.0369", "0.0569", "0.0769"
        ]  # fmt: skip
        braille = [ch for ch in app.export_screenshot() if "\u2801" <= ch <= "\u28ff"]
        assert len(braille) > 40


def test_b_measures_the_interconnect_and_shows_the_pairs_as_a_matrix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asyncio.run(_test_b_measures_the_interconnect(monkeypatch))


async def _test_b_measures_the_interconnect(monkeypatch: pytest.MonkeyPatch) -> None:
    report = dataclasses.replace(scenes.health_report(), findings=())
    names = [check.host.name for check in report.checks]
    # What node 0's benchmark printed on a cluster whose gpu-b has a slow link.
    document = {
        "backend": "gloo",
        "world_size": 3,
        "sweep": [[64 * 1024, 0.001], [64 << 20, 0.4]],
        "pairs": [[0, 1, 0.5], [1, 2, 0.5], [2, 0, 0.02]],
    }
    measured = read_result(json.dumps(document), names, 4 << 20, ["gpu-a=eth0"])
    asked: list[object] = []

    async def measure(control: RunControl, config: object, checked: object) -> BandwidthReport:
        asked.append(checked)
        return measured

    monkeypatch.setattr(RunControl, "measure", measure)
    app = DdptuiApp(first_screen=HealthScreen(report.config, report))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("b")
        screen = app.screen
        assert isinstance(screen, HealthScreen)
        for _ in range(50):
            if screen.bandwidth is not None:
                break
            await pilot.pause(0.05)
        await pilot.pause()
        assert asked == [report]
        shown = app.screen.query_one("#findings", Static).content
        console = Console(width=100, record=True)
        console.print(shown)
        text = console.export_text()
        assert "pairs, GB/s (gloo)" in text
        assert "0.008" in text and "0.210" in text
        assert "slow links: gpu-b" in text


def test_a_dump_that_cannot_be_read_back_is_said_and_the_screen_goes_on() -> None:
    asyncio.run(_test_a_dump_that_cannot_be_read_back_is_said_and_the_screen_goes_on())


class _Unreadable:
    async def dump(self, run_id: str) -> object:
        raise DumpUnreadable("the stacks kept in /s cannot be read: a rank's text is\nnowhere")


async def _test_a_dump_that_cannot_be_read_back_is_said_and_the_screen_goes_on() -> None:
    app, screen = _run_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen.control = _Unreadable()  # type: ignore[assignment]
        await pilot.press("D")
        await until(pilot, "the dump's error", lambda: "cannot be read" in screen.note, 10)
        assert screen.note == "the stacks kept in /s cannot be read: a rank's text is\\nnowhere"
        assert app.screen is screen and screen.stacks is None
