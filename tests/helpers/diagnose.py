"""The test bed's recorded failures (tests/fixtures/gloo/) replayed into a ``Diagnoser``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ddptui.run.diagnose import Diagnoser, Diagnosis, LogLine
from ddptui.run.following.events import parse_event

NPROC = 2


@dataclass(frozen=True)
class Replay:
    expected: dict[str, object]
    hosts: list[str]


def replay(diagnoser: Diagnoser, root: Path, *, events: bool = True, ranks: bool = True) -> Replay:
    """Feed a recording (see tests/fixtures/gloo/README.md) as ddptui's follower would: every
    line when it arrived.

    ``events=False`` leaves out the event files, ``ranks=False`` the ranks' own log files
    (torchrun's consoles only).
    """
    expected = json.loads((root / "expected.json").read_text())
    hosts: list[str] = expected["hosts"]
    files: dict[str, list[str]] = {}
    for entry in map(json.loads, (root / "timeline.jsonl").read_text().splitlines()):
        name: str = entry["file"]
        node = int(name.split("/")[0].removeprefix("node"))
        host, time = hosts[node], expected["recorded_at"] + entry["t"]
        path = root / name
        if name.endswith("error.json"):
            if ranks:
                local = int(path.parent.name)
                text = path.read_text()
                diagnoser.feed(LogLine(host, node, node * NPROC + local, "error.json", time, text))
            continue
        lines = files.setdefault(name, path.read_text().splitlines())
        text = lines[entry["line"]]
        if "/events/" in name:
            event = parse_event(text)
            assert event is not None, text
            if events:
                diagnoser.feed_event(host, event)
        elif name.endswith("torchrun.log"):
            diagnoser.feed(LogLine(host, node, None, "torchrun", time, text))
        elif ranks:
            local = int(path.parent.name)
            stream = path.stem
            diagnoser.feed(LogLine(host, node, node * NPROC + local, stream, time, text))
    return Replay(expected, hosts)


def top_diagnosis(diagnoser: Diagnoser) -> Diagnosis:
    diagnoses = diagnoser.diagnoses()
    assert diagnoses, "nothing diagnosed"
    return diagnoses[0]


def check_first_failure(diagnoser: Diagnoser, replayed: Replay) -> None:
    """The first failure and the top diagnosis are what the recording's expected.json says."""
    failure = diagnoser.first_failure()
    assert failure is not None
    assert failure.category.value == replayed.expected["category"]
    if "first_node" in replayed.expected:
        assert failure.node_rank == replayed.expected["first_node"]
        assert failure.host == replayed.hosts[failure.node_rank]
    if "first_rank" in replayed.expected:
        assert failure.rank == replayed.expected["first_rank"]
    assert top_diagnosis(diagnoser).category is failure.category
