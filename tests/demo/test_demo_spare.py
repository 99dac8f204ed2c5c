"""``ddptui demo --spare``: a spare host and recovery on in the demo's hosts file, and the demo's
fault, a node's ranks killed, which the run screen's key ``x`` (in that demo alone) asks for;
the run heals on the spare."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from ddptui.cli import build_parser
from ddptui.commands.demo import _wind_down, node_killer
from ddptui.config import load_config
from ddptui.demo.cluster import CHECKPOINT_EVERY, SPARE, demo_cluster
from ddptui.demo.faults import kill_ranks
from ddptui.layout import RUN_DIR_ENV
from ddptui.run.control import RunControl
from ddptui.run.record import RunRecord, RunState
from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.help import HelpScreen
from ddptui.ui.screens.run import RunScreen
from tests.ui import scenes
from tests.ui.pilot import launch_from_health, until

KILLED = "demo: killed node 1's ranks (gpu-b): watch the run heal"
STEPS = 3000
"""Far more than the test takes: the run is killed when the demo's hosts go."""


def test_spare_adds_a_spare_host_and_turns_recovery_on() -> None:
    assert build_parser().parse_args(["demo", "--spare"]).spare
    assert not build_parser().parse_args(["demo"]).spare
    with demo_cluster(2, 1, spare=True) as cluster:
        config = load_config(cluster.hosts_file)
        assert [host.name for host in config.ordered_hosts] == ["demo-0", "demo-1"]
        assert [host.name for host in config.spares] == [SPARE]
        assert config.recovery.on
    with demo_cluster(2, 1) as cluster:
        config = load_config(cluster.hosts_file)
        assert config.spares == () and not config.recovery.on


def _sleeper(run_dir: Path, rank: int | None) -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ["PATH"], RUN_DIR_ENV: str(run_dir)}
    if rank is not None:
        env["RANK"] = str(rank)
    return subprocess.Popen(["sleep", "600"], env=env)


def test_kill_ranks_kills_the_node_s_ranks_alone(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "demo", tmp_path / "other"
    node1 = root / "demo-1" / "ddptui-runs" / "runs" / "r" / "node1"
    rank, torchrun, other_node, outside = (
        _sleeper(node1, 2),
        _sleeper(node1, None),
        _sleeper(node1.with_name("node0"), 0),
        _sleeper(elsewhere, 0),
    )
    processes = (rank, torchrun, other_node, outside)
    try:
        assert kill_ranks(root, str(node1)) == [rank.pid]
        assert rank.wait(timeout=10) == -signal.SIGKILL
        # Not the demo's: never looked for.
        assert kill_ranks(root, str(elsewhere)) == []
        assert [process.poll() for process in processes[1:]] == [None, None, None]
    finally:
        for process in processes:
            process.kill()
            process.wait()


def _told(app: DdptuiApp) -> str:
    """Every notification's text, a line each."""
    return "\n".join(str(notice.message) for notice in app._notifications)


def _status(screen: RunScreen) -> str:
    content = screen.query_one("#run-status", Static).content
    return str(getattr(content, "plain", content))


def _drive_key(
    state: RunState, demo_kill: Callable[[RunRecord], str] | None, said: str | None = None
) -> tuple[list[str], list[str]]:
    """A run screen of a run in ``state`` at 80×24: the keys help lists, the footer's, and
    (with ``said``) ``x`` pressed until a notification says ``said``."""
    model = scenes.run_model(state=state, failed=state is RunState.FAILED)
    screen = RunScreen(model.record, model=model, demo_kill=demo_kill)

    async def drive() -> tuple[list[str], list[str]]:
        app = DdptuiApp(first_screen=screen)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, "the footer", lambda: bool(screen.query(FooterKey)), 10)
            footer = [f"{key.key_display} {key.description}" for key in screen.query(FooterKey)]
            await pilot.press("question_mark")
            await until(pilot, "help", lambda: isinstance(app.screen, HelpScreen), 10)
            assert isinstance(app.screen, HelpScreen)
            keys = [description for _, description in app.screen.keys]
            await pilot.press("escape")
            if said is not None:
                await pilot.press("x")
                await until(pilot, f"x saying {said!r}", lambda: said in _told(app), 10)
            return keys, footer

    return asyncio.run(drive())


def test_x_kills_a_node_through_the_demo_s_hook_and_only_in_the_demo() -> None:
    asked: list[RunRecord] = []

    def kill(record: RunRecord) -> str:
        asked.append(record)
        return KILLED

    keys, footer = _drive_key(RunState.RUNNING, kill, KILLED)
    assert "kill a node" in keys
    # Second, after help: what is cut at 80 columns is what the help lists anyway.
    assert footer[:2] == ["? help", "x kill a node"], footer
    assert [record.id for record in asked] == [scenes.run_model().record.id]

    # A run that does not run: nothing to kill, and the key says so.
    _drive_key(RunState.FAILED, kill, "is failed: it has no ranks running to kill")
    assert len(asked) == 1

    # Without the demo there is no such key.
    keys, footer = _drive_key(RunState.RUNNING, None)
    assert "kill a node" not in keys
    assert [key for key in footer if key.startswith("x ")] == [], footer


def _healed(store: RunStore, run_id: str) -> RunRecord | None:
    record = store.load(run_id)
    incident = record.incidents[-1] if record.incidents else None
    return record if incident is not None and incident.first_step_at is not None else None


@pytest.mark.slow
def test_x_in_the_demo_s_console_kills_node_1_and_the_screen_follows_the_heal(
    tmp_path: Path,
) -> None:
    store = RunStore(tmp_path / "runs")
    with demo_cluster(2, 1, STEPS, spare=True) as cluster:
        config = load_config(cluster.hosts_file)
        app = DdptuiApp(
            cluster.hosts_file,
            store=store,
            demo_note="demo",
            demo_kill=node_killer(cluster, config),
        )
        try:
            asyncio.run(_watch_the_heal(app, store))
        finally:
            _wind_down(RunControl(store), config)


async def _watch_the_heal(app: DdptuiApp, store: RunStore) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await launch_from_health(pilot, CHECKPOINT_EVERY + 10, 180)
        run_id = screen.record.id
        killed_at = time.time()
        await pilot.press("x")
        await until(
            pilot,
            "what x did",
            lambda: "demo: killed node 1's ranks (demo-1): watch the run heal" in _told(app),
            10,
        )
        await until(pilot, "the heal", lambda: _healed(store, run_id) is not None, 120)
        record = store.load(run_id)
        (incident,) = record.incidents
        assert incident.blamed == ("demo-1",), incident
        assert incident.action == f"resuming on {SPARE} in place of demo-1"
        assert incident.resumed_attempt == 2
        # Resumed from a checkpoint, not from scratch, redoing at most two checkpoints' steps.
        assert incident.checkpoint_step is not None and incident.checkpoint_step >= CHECKPOINT_EVERY
        assert incident.steps_redone is not None and incident.steps_redone <= 2 * CHECKPOINT_EVERY
        assert [aside.host for aside in record.set_aside] == ["demo-1"]
        assert incident.first_step_at is not None
        print(
            f"\nthe demo's heal: {incident.first_step_at - killed_at:.1f} s from the kill to the "
            f"resumed attempt's first step ({incident.steps_redone} step(s) redone)"
        )
        # Live updates: the screen shows the resumed attempt as soon as the record does.
        await until(
            pilot,
            "the screen following the run resumed on the spare",
            lambda: (
                screen.judgement.attempt == 2
                and [node.host for node in screen.record.nodes] == ["demo-0", SPARE]
                and f"resuming on {SPARE} in place of demo-1" in _status(screen)
            ),
            15,
        )
