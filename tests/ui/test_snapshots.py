"""Every screen at 80×24 and 160×48, from the recorded H200 data (tests/ui/scenes.py).

Update after an intended change with ``pytest tests/ui --snapshot-update`` and review the SVGs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.screen import Screen

from ddptui.run.control import RunControl
from ddptui.run.following.progress import RankProgress
from ddptui.run.following.state import Judgement
from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.first_run import FirstRunScreen
from ddptui.ui.screens.health import HealthScreen
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.screens.runs import RunsScreen
from ddptui.ui.widgets.rank_table import RankTable
from tests.ui import scenes

SIZES = [(80, 24), (160, 48)]


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times are shown in the head node's local time: the snapshots are taken in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


SnapCompare = Callable[..., bool]


SETTLE_S = 60.0
"""How long a loaded machine may take to lay out and draw a screen of 1,024 ranks."""


async def _laid_out(pilot: Pilot[None]) -> None:
    """Until the run screen has fitted its rank table to the terminal and drawn it: the table's
    columns follow its size, which only the layout after the first draw sets, and the table
    sizes its columns to new rows when it is next idle. A fixed pause is too short on a loaded
    machine (columns cut to their headers' width): the screen is taken once two draws a moment
    apart are the same."""
    table = pilot.app.screen.query_one(RankTable)
    deadline = time.monotonic() + SETTLE_S
    drawn = None
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        now = pilot.app.export_screenshot()
        if table.row_count and now == drawn:
            return
        drawn = now
    raise AssertionError(f"the run screen was still changing after {SETTLE_S:.0f} s")


def _health() -> Screen[None]:
    report = scenes.health_report()
    return HealthScreen(report.config, report)


def _run() -> Screen[None]:
    model = scenes.run_model()
    return RunScreen(model.record, model=model)


def _runs(root: Path) -> Screen[None]:
    store = RunStore(root)
    for index, state in enumerate((RunState.COMPLETED, RunState.FAILED, RunState.RUNNING)):
        record = scenes.run_record(state)
        record.id = f"20261130-22{index}218-h20{index}"
        record.created += index * 3600
        for change in record.states[3:]:
            change.time = record.created + 1234.0
        if state is RunState.COMPLETED:
            # It stepped, and nothing went wrong: every second since its first step was kept.
            record.timelines[0].stamp("gpu-a", "first_step", record.created + 20.0)
        store.create(record, "")
    return RunsScreen(RunControl(store), now=scenes.CREATED + 3 * 3600)


@pytest.mark.parametrize("size", SIZES)
def test_health(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert snap_compare(DdptuiApp(first_screen=_health()), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_health_of_a_slurm_cluster(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    # Its nodes as Slurm lists them; the cursor on the drained one: its reason, its GPUs and
    # the exclude line that keeps runs off it.
    config, report = scenes.slurm_health()
    app = DdptuiApp(first_screen=HealthScreen(config, report))
    assert snap_compare(app, terminal_size=size, press=["down", "down"])


def test_health_busy_gpu_host_selected(snap_compare: SnapCompare) -> None:
    # gpu-b: the GPU held by pid 529, and the torch that differs from gpu-a's.
    assert snap_compare(DdptuiApp(first_screen=_health()), terminal_size=(160, 48), press=["down"])


@pytest.mark.parametrize("size", SIZES)
def test_run_with_the_nccl_error(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert snap_compare(DdptuiApp(first_screen=_run()), terminal_size=size, run_before=_laid_out)


def _cluster() -> Screen[None]:
    model = scenes.cluster_model()
    return RunScreen(model.record, model=model)


@pytest.mark.parametrize("size", SIZES)
def test_a_run_of_1024_ranks_a_row_per_node_the_loss_as_bands(
    snap_compare: SnapCompare, size: tuple[int, int]
) -> None:
    # The failed node first, then the one whose loss is no number, then the rest in order.
    app = DdptuiApp(first_screen=_cluster())
    assert snap_compare(app, terminal_size=size, run_before=_laid_out)


def test_the_worst_node_expanded_and_its_failed_rank_on_the_bands(
    snap_compare: SnapCompare,
) -> None:
    # w: node 5 expanded, the cursor on it; three rows down is rank 42, chosen: its log, and
    # its line over the bands.
    press = ["w", "down", "down", "down", "enter"]
    app = DdptuiApp(first_screen=_cluster())
    assert snap_compare(app, terminal_size=(160, 48), press=press, run_before=_laid_out)


def test_a_run_of_1024_ranks_gpus_a_line_a_node(snap_compare: SnapCompare) -> None:
    # Node 5's idle GPU shows in its spread (util 0–94%).
    app = DdptuiApp(first_screen=_cluster())
    assert snap_compare(app, terminal_size=(160, 48), press=["g"], run_before=_laid_out)


@pytest.mark.parametrize("size", SIZES)
def test_run_gpus_and_linear_loss(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app = DdptuiApp(first_screen=_run())
    assert snap_compare(app, terminal_size=size, press=["g", "y"], run_before=_laid_out)


@pytest.mark.parametrize("size", SIZES)
def test_run_launch_timeline(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app = DdptuiApp(first_screen=_run())
    assert snap_compare(app, terminal_size=size, press=["t"], run_before=_laid_out)


class _RankTableApp(App[None]):
    """The rank table alone, showing ranks as a supervisor's judgement marks them."""

    def __init__(self, ranks: Sequence[RankProgress], judgement: Judgement) -> None:
        super().__init__()
        self.ranks, self.judgement = ranks, judgement

    def compose(self) -> ComposeResult:
        yield RankTable()

    def on_mount(self) -> None:
        self.query_one(RankTable).show(self.ranks, self.judgement)


def test_a_straggler_s_row_is_marked_at_80_columns(snap_compare: SnapCompare) -> None:
    # Rank 3, named by the supervisor's own straggler judging: `▼ straggler +45%` in its row.
    run, named = scenes.straggling_run()
    judgement = Judgement(RunState.RUNNING, 1, "", {}, None, stragglers=named)
    app = _RankTableApp(run.ranks, judgement)
    assert snap_compare(app, terminal_size=(80, 8))


def test_run_log_filtered(snap_compare: SnapCompare) -> None:
    press = ["o", "slash", *"NCCL WARN", "enter"]
    assert snap_compare(DdptuiApp(first_screen=_run()), terminal_size=(160, 48), press=press)


@pytest.mark.parametrize("size", SIZES)
def test_runs(snap_compare: SnapCompare, size: tuple[int, int], tmp_path: Path) -> None:
    assert snap_compare(DdptuiApp(first_screen=_runs(tmp_path)), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_first_run(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    screen = FirstRunScreen(Path("hosts.toml"))
    assert snap_compare(DdptuiApp(first_screen=screen), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_help(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert snap_compare(DdptuiApp(first_screen=_run()), terminal_size=size, press=["question_mark"])


@pytest.mark.parametrize("screen", [_health, _run], ids=["health", "run"])
def test_the_light_theme(snap_compare: SnapCompare, screen: Callable[[], Screen[None]]) -> None:
    # The loss lines switch to inks that show on a light background.
    async def light(pilot: Pilot[int]) -> None:
        pilot.app.theme = "textual-light"
        await pilot.pause(0.2)

    app = DdptuiApp(first_screen=screen())
    assert snap_compare(app, terminal_size=(120, 36), run_before=light)
