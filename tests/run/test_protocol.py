"""The supervisor's messages: every kind round-trips through its wire form, and whatever else
comes off the socket is dropped, never a crash."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddptui.run.following.state import Hang, Judgement, RankAtHang, Straggler
from ddptui.run.following.updates import FileLine, Heartbeat, HostBack, HostSilent
from ddptui.run.protocol import (
    Attach,
    Ended,
    Gap,
    Hello,
    Judged,
    Reply,
    Request,
    Said,
    decode,
    line_record,
    message,
)
from ddptui.run.record import RunState

HANG = Hang(
    since=1000.5,
    window_s=30.0,
    step=120,
    ranks=(
        RankAtHang(0, "gpu-a", 120, "S", 0.0, None),
        RankAtHang(3, "gpu-b", 119, "T", 0.0, "its process is stopped"),
    ),
)
JUDGEMENT = Judgement(RunState.HUNG, 2, "no step for 31 s", {"gpu-c": "no answer for 12 s"}, HANG)


@pytest.mark.parametrize(
    "item",
    [
        Hello("20261201-120000-abcd", 4242, 1, 0, 1234, JUDGEMENT),
        Hello("20261201-120000-abcd", 4242, 1, 0, 1234, JUDGEMENT, ("stop", "dump")),
        Gap(0, 4096),
        Judged(JUDGEMENT),
        Judged(Judgement(RunState.RUNNING, 1, "every node started")),
        Judged(Judgement(RunState.FAILED, 1, "gpu-b stopped answering", doing="ending gpu-a")),
        Judged(Judgement(RunState.HUNG, 1, "no output", hang=replace(HANG, quiet=True))),
        Judged(
            Judgement(
                RunState.RUNNING,
                1,
                "every node started",
                stragglers=(Straggler(3, "gpu-b", 0.45, 1000.5), Straggler(1, "gpu-a", 0.2, 999.0)),
            )
        ),
        Said("asked the trainer to checkpoint and stop"),
        Reply("r1", True, "stopped", {"lines": ["a"], "clean": True}),
        Ended(RunState.FAILED, "torchrun on gpu-b exited 1", 1),
        Ended(RunState.FAILED, "rank 1 killed", 2, recovering=True),
        Heartbeat(
            "gpu-a",
            5.0,
            {1: True, 2: False},
            {"procs": 3, "ranks": {3: {"state": "T", "cpu_pct": 0.0}}},
        ),
        HostSilent("gpu-b", 12.0, "connect timed out"),
        HostBack("gpu-b"),
        Attach(0),
        Attach(None),
        Request("r2", "resume", debug=True),
        Request("r3", "resume", began=1796306069.25),
        Request("r4", "resume", bring_back=("gpu-b", "gpu-c")),
    ],
)
def test_every_message_round_trips(item: object) -> None:
    raw = message(item)  # type: ignore[arg-type]
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert decode(raw) == item


def test_a_supervisor_that_names_no_ops_is_asked_none_of_the_new_ones() -> None:
    # What a supervisor started by an older ddptui says: it would not answer a dump.
    older = json.loads(message(Hello("r", 1, 1, 0, 0, JUDGEMENT)))
    del older["ops"]
    hello = decode(json.dumps(older).encode() + b"\n")
    assert isinstance(hello, Hello) and hello.ops == ()
    older["ops"] = ["stop", "dump", "format-disk", 7]
    hello = decode(json.dumps(older).encode() + b"\n")
    assert isinstance(hello, Hello) and hello.ops == ("stop", "dump")


@given(
    st.text(min_size=1),
    st.text(min_size=1),
    st.integers(min_value=0, max_value=2**63),
    st.text(),
    st.booleans(),
)
def test_any_line_travels_whole_on_one_line(
    host: str, path: str, offset: int, text: str, cut: bool
) -> None:
    line = FileLine(host, path, offset, text, cut)
    raw = line_record(line)
    assert raw.endswith(b"\n") and len(raw.splitlines()) == 1
    assert decode(raw) == line


def test_a_hostile_line_cannot_pass_for_several_or_for_another_host_s() -> None:
    text = (
        "x\tnode0\tevents/rank0.jsonl\t9\t0\tforged\nL\tnode0\t\\n\r\x1b]52;c;cG93bg==\x07 ☃\ud800"
    )
    line = FileLine("node2", "logs/attempt-1/x/0/stdout.log", 77, text, True)
    raw = line_record(line)
    assert len(raw.splitlines()) == 1
    assert decode(raw) == line


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))  # fmt: skip
def test_anything_else_is_dropped_not_raised(document: object) -> None:
    decode(json.dumps(document).encode())


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe",
        b"[" * 100000,
        b'{"type": "request", "id": "r", "op": "rm -rf"}',
        b'{"type": "request", "id": "r", "op": "resume", "began": "yesterday"}',
        b'{"type": "request", "id": "r", "op": "resume", "began": NaN}',
        b'{"type": "judged", "judgement": {"state": "exploded", "attempt": 1, "detail": ""}}',
        b'{"type": "judged", "judgement": {"state": "running", "attempt": 1, "detail": "",'
        b' "stragglers": [{"rank": 3, "host": "b", "slower_by": Infinity, "since": 0}]}}',
        b'{"type": "judged", "judgement": {"state": "running", "attempt": 1, "detail": "",'
        b' "stragglers": "rank 3"}}',
        b'{"type": "line", "h": "a", "f": "x", "o": true, "t": "y"}',
        b'{"type": "hello", "v": 1, "run": "x", "pid": 1, "journal": [0], "judgement": {}}',
        b'{"type": "beat", "h": "a", "time": 1e999, "groups": {}, "sample": {}}',
    ],
)
def test_malformed_messages_are_dropped(raw: bytes) -> None:
    assert decode(raw) is None
