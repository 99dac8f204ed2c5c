"""The headless progress lines (``ddptui launch --headless``, the demo without a terminal)."""

from __future__ import annotations

from ddptui.present.progress import ProgressReport
from ddptui.run.record import RunState
from tests.ui import scenes


def test_the_final_line_is_said_once_and_a_changed_one_still_is() -> None:
    model = scenes.run_model(failed=False, state=RunState.COMPLETED)
    judgement = model.judgement(model.record)
    times = iter([0.0, 1.0, 100.0])
    report = ProgressReport(clock=lambda: next(times))

    said = report.lines(model, judgement)
    progress = said[-1]
    assert progress.startswith("step ")
    assert progress not in report.lines(model, judgement, final=True)

    later = scenes.run_model(failed=False, steps=200, state=RunState.COMPLETED)
    changed = report.lines(later, later.judgement(later.record), final=True)
    assert [line for line in changed if line.startswith("step ")] not in ([], [progress])
