"""A run that healed itself says so: each incident (what failed, whom it blamed and why, what
came of it) and the hosts set aside, in ``ddptui status``'s words and its ``--json``
document, a host's control characters shown as escapes."""

from __future__ import annotations

import json
import time

import pytest

from ddptui.present.status import INCIDENTS_SHOWN, SET_ASIDE_SHOWN, status_lines
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Judgement
from ddptui.run.record import Incident, RunRecord, RunState, SetAside
from ddptui.run.view import RunView
from tests.ui import scenes

DETECTED = scenes.CREATED + 600.0
FIRST_STEP = scenes.CREATED + 100.0


def _healed() -> RunRecord:
    record = scenes.run_record(RunState.RUNNING)
    record.incidents = [
        scenes.healed_incident(DETECTED),
        Incident(2, 2, DETECTED + 90.0, "gpu-e stopped answering\x1b]0;pwned\x07", (), ""),
    ]
    record.set_aside = [
        SetAside("gpu-b", "rank 3 was killed by SIGKILL", DETECTED),
        SetAside("gpu-\x1b[2Je", "", DETECTED + 90.0, "/w/node1", "it did not answer"),
    ]
    return record


def _said(record: RunRecord) -> list[str]:
    view = RunView.of(record, RunModel(record), Judgement.of_record(record))
    return [line.plain.strip() for line in status_lines(view)]


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def test_status_says_each_incident_and_the_hosts_set_aside() -> None:
    said = _said(_healed())
    incidents = [line for line in said if line.startswith("incident ")]
    assert incidents == [
        f"incident 1 at {_clock(DETECTED)}: rank 3 on gpu-b was killed by SIGKILL; blamed gpu-b "
        "(its kernel's OOM killer named rank 3); resumed on gpu-e in place of gpu-b (attempt 2, "
        "40 steps redone)",
        f"incident 2 at {_clock(DETECTED + 90.0)}: gpu-e stopped answering\\x1b]0;pwned\\x07; "
        "no host blamed",
    ]
    assert (
        "set aside: gpu-b (rank 3 was killed by SIGKILL), gpu-\\x1b[2Je (its processes may live on)"
    ) in said
    assert not any("\x1b" in line or "\x07" in line for line in said)


def test_a_run_without_incidents_says_nothing_of_them() -> None:
    said = _said(scenes.run_record(RunState.RUNNING))
    assert not any(line.startswith(("incident ", "set aside", "effective ")) for line in said)


def test_status_says_the_effective_training_time_ratio_after_the_incidents() -> None:
    record = _healed()
    record.timelines[0].stamp("gpu-b", "first_step", FIRST_STEP)
    # Resumed from step 100, made 40 steps at 0.5 s before step 140: 55 s lost of 900.
    now = FIRST_STEP + 900.0
    view = RunView.of(record, RunModel(record), Judgement.of_record(record))
    said = [line.plain.strip() for line in status_lines(view, now)]
    ratio = next(index for index, line in enumerate(said) if line.startswith("effective "))
    assert said[ratio] == (
        "effective training time ratio 0.94: the share of the time since the first step spent "
        "on steps that were kept"
    )
    assert said[ratio - 1].startswith("incident 2 at ")
    assert view.document(now)["effective_training_time_ratio"] == pytest.approx(845 / 900)
    # How long the redone steps took is not known: neither is the ratio, and status says so.
    record.incidents[0].step_s = None
    said = [line.plain.strip() for line in status_lines(view, now)]
    assert said[ratio].startswith("effective training time ratio not known yet: "), said[ratio]
    assert view.document(now)["effective_training_time_ratio"] is None


def test_a_notify_hook_that_failed_is_said_after_its_incident() -> None:
    record = _healed()
    record.incidents[1].notified = "notify exited 3: no route to host"
    record.incidents[1].resumed_attempt = 3
    record.incidents[1].last_step, record.incidents[1].checkpoint_step = 201, 200
    line = next(line for line in _said(record) if line.startswith("incident 2"))
    assert line.endswith(
        "; no host blamed (attempt 3, 1 step redone); notify exited 3: no route to host"
    )


def test_many_incidents_and_hosts_set_aside_are_said_the_latest_first_and_the_rest_counted() -> (
    None
):
    record = scenes.run_record(RunState.RUNNING)
    record.incidents = [
        Incident(number, number, DETECTED + number, f"failure {number}", (f"gpu-{number}",), "")
        for number in range(1, INCIDENTS_SHOWN + 6)
    ]
    record.set_aside = [SetAside(f"gpu-{n}", "", DETECTED) for n in range(SET_ASIDE_SHOWN + 3)]
    said = _said(record)
    incidents = [line for line in said if line.startswith("incident ")]
    assert len(incidents) == INCIDENTS_SHOWN
    assert incidents[0].startswith("incident 6 at ") and incidents[-1].startswith("incident 15 ")
    assert "5 earlier incident(s) not shown" in said
    (set_aside,) = [line for line in said if line.startswith("set aside: ")]
    assert set_aside.endswith(f", gpu-{SET_ASIDE_SHOWN - 1}, and 3 more")


def test_status_json_gives_every_incident_field_and_the_hosts_set_aside() -> None:
    record = _healed()
    document = RunView(record, Judgement.of_record(record), (), (), "", ()).document()
    first, second = document["incidents"]
    assert first == {
        "number": 1,
        "attempt": 1,
        "detected_at": DETECTED,
        "cause": "rank 3 on gpu-b was killed by SIGKILL",
        "blamed": ["gpu-b"],
        "why": "its kernel's OOM killer named rank 3",
        "fault_at": DETECTED - 2.0,
        "action": "resumed on gpu-e in place of gpu-b",
        "resumed_attempt": 2,
        "last_step": 140,
        "checkpoint_step": 100,
        "steps_redone": 40,
        "first_step_at": DETECTED + 30.0,
        "notified": "ok",
        "last_step_at": DETECTED - 5.0,
        "step_s": 0.5,
    }
    assert (second["fault_at"], second["steps_redone"], second["blamed"]) == (None, None, [])
    assert (second["last_step_at"], second["step_s"]) == (None, None)
    assert document["set_aside"] == [
        {"host": "gpu-b", "why": "rank 3 was killed by SIGKILL", "at": DETECTED, "leftovers": ""},
        {
            "host": "gpu-\x1b[2Je",
            "why": "",
            "at": DETECTED + 90.0,
            "leftovers": "it did not answer",
        },
    ]
    # What a script reads: control characters as JSON's escapes.
    assert "\\u001b[2Je" in json.dumps(document)


def test_status_json_of_a_run_without_incidents_has_empty_lists() -> None:
    record = scenes.run_record(RunState.RUNNING)
    document = RunView(record, Judgement.of_record(record), (), (), "", ()).document()
    assert (document["incidents"], document["set_aside"]) == ([], [])
    # No step yet to count the time from.
    assert document["effective_training_time_ratio"] is None
