"""What one host's lines may cost the head node, and what a host may say: only of its own ranks.

Everything goes through the real parsing code: the documents a host's agent would send are fed
as raw bytes to ``HostFollower._parse``, and what it makes of them to a ``RunModel``.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.run.diagnose import Diagnoser, LogLine
from ddptui.run.diagnose.limits import MAX_STREAMS
from ddptui.run.following.files import (
    INBOX_BYTES,
    LINE_OBJECT_BYTES,
    MAX_DOCUMENT_BYTES,
    MAX_TEXT_CHARS,
    HostFollower,
    Inbox,
    _read,
)
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import LOG_LINE_CHARS, Steps
from ddptui.run.following.updates import FileLine
from ddptui.run.record import RunState
from ddptui.run.supervisor import INBOX, ending, updates_inbox
from ddptui.run.supervisor import INBOX_BYTES as SUPERVISOR_INBOX_BYTES
from ddptui.run.supervisor.following import UPDATE_OBJECT_BYTES
from tests.run.bed import two_host_record

INVENTED = 20_000
_HOSTS = (HostConfig("a", "10.0.0.1"), HostConfig("b", "10.0.0.2"))
_CONFIG = Config(Path("hosts.toml"), ClusterConfig(), _HOSTS, JobConfig())


_record = two_host_record


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _follower(host: str, **options: Any) -> HostFollower:
    record = _record()
    [node] = [node for node in record.nodes if node.host == host]
    return HostFollower.of_node(_CONFIG, record, node, **options)


def _sent(path: str, offset: int, text: str) -> bytes:
    """A line document as the agent writes it on its stdout."""
    return json.dumps({"k": "line", "f": path, "o": offset, "t": text}).encode()


def _event(kind: str, rank: int, **fields: object) -> str:
    """An event as rank ``rank`` of the plan writes it (or a host says it did)."""
    ids: dict[str, object] = {"rank": rank, "local_rank": rank % 2, "node_rank": rank // 2}
    return json.dumps({"v": 1, "type": kind, **ids, "world_size": 4, "time": 100.0, **fields})


def _take(model: RunModel, follower: HostFollower, raw: bytes) -> None:
    update = follower._parse(raw)
    if update is not None:
        model.apply(update)


def _started(model: RunModel, followers: dict[str, HostFollower]) -> None:
    for rank in range(4):
        host = "ab"[rank // 2]
        _take(model, followers[host], _sent(f"events/rank{rank}.jsonl", 1, _event("start", rank)))


def test_a_host_inventing_twenty_thousand_ranks_costs_what_its_two_ranks_do() -> None:
    model = RunModel(_record())
    follower = _follower("b")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for rank in range(INVENTED):
            text = "RuntimeError: CUDA error: an illegal memory access " + "x" * 200
            _take(model, follower, _sent(f"logs/attempt-1/x/attempt_0/{rank}/stderr.log", 1, text))
            _take(model, follower, _sent(f"events/rank{rank}.jsonl", 1, _event("start", rank)))
            _take(model, follower, _sent("node/attempt-1.out", rank + 1, f"[rank{rank}]: {text}"))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Only b's own ranks, 2 and 3 (its local ranks 0 and 1), are kept.
    assert sorted(model.logs) == [2, 3]
    assert [rank.rank for rank in model.progress.ranks] == [0, 1, 2, 3]
    assert model.progress.ignored == 0
    assert {d.ranks for d in model.diagnoser.diagnoses()} <= {(2,), (2, 3), (3,)}
    assert len(model.diagnoser._streams) <= 2 * 3 + 1
    # The follower remembers b's files alone: its two ranks' events and logs, its torchrun.
    assert sorted(follower.offsets) == [
        "events/rank2.jsonl",
        "events/rank3.jsonl",
        "logs/attempt-1/x/attempt_0/0/stderr.log",
        "logs/attempt-1/x/attempt_0/1/stderr.log",
        "node/attempt-1.out",
    ]
    assert follower.unknown == 2 * INVENTED - 4
    # Of those, the torchrun lines b prefixes with others' ranks are refused.
    assert model.refused == INVENTED - 2
    assert grown < 4 * 2**20, f"{grown / 2**20:.1f} MiB for {INVENTED} invented ranks"


def test_the_watch_alone_keeps_only_the_sending_host_s_ranks() -> None:
    model = RunModel(_record())
    for rank in range(INVENTED):
        model.apply(FileLine("a", f"logs/attempt-1/x/attempt_0/{rank}/stdout.log", 1, "hello"))
        model.apply(FileLine("a", f"logs/attempt-1/x/attempt_0/{rank}/error.json", 1, "{}"))
    for path in ("events/rank٣.jsonl", "logs/attempt-1/x/attempt_0/١/stdout.log", "etc/x"):
        model.apply(FileLine("a", path, 1, "not a file of the run"))
    assert sorted(model.logs) == [0, 1]
    assert model.refused == 2 * (INVENTED - 2) + 3
    long_line = "y" * 16384
    model.apply(FileLine("a", "logs/attempt-1/x/attempt_0/0/stdout.log", 2, long_line))
    assert len(model.logs[0][-1].text) == LOG_LINE_CHARS


@pytest.mark.parametrize("steps", [Steps.EVERY, Steps.LATEST])
def test_another_host_s_stop_and_steps_do_not_undo_a_failure(steps: Steps) -> None:
    clock = _Clock()
    model = RunModel(_record(), clock=clock, steps=steps)
    followers = {host: _follower(host) for host in "ab"}
    _started(model, followers)
    # b's torchrun is killed; a claims b's ranks stopped on request and keep stepping.
    _take(model, followers["b"], _sent("node/attempt-1.exit", 4, "137"))
    lies = [
        _sent("events/rank2.jsonl", 2, _event("done", 2, step=5, reason="stopped")),
        _sent("events/rank0.jsonl", 2, _event("done", 2, step=5, reason="stopped")),
        _sent("events/rank0.jsonl", 3, _event("done", 0, node_rank=1, reason="stopped")),
        _sent("events/rank1.jsonl", 2, _event("done", 1, world_size=2, reason="stopped")),
    ]
    lies += [_sent("events/rank3.jsonl", 2 + step, _event("step", 3, step=step)) for step in (1, 2)]
    lies += [_sent("events/rank0.jsonl", 4 + step, _event("step", 3, step=step)) for step in (1, 2)]
    for raw in lies:
        _take(model, followers["a"], raw)
    model.read_steps()
    clock.now += 3.0
    assert model.stopped_ranks == set()
    assert [(rank.step, rank.state.value) for rank in model.progress.ranks[2:]] == [
        (None, "starting"),
        (None, "starting"),
    ]
    # Lines of b's files a sends are not followed; the others are refused as they are read.
    refused = model.refused + followers["a"].unknown
    if steps is Steps.EVERY:
        assert model.attempt_steps == 0 and refused == len(lies)
    else:
        # Steps in a's own file count as a's when they arrive (for its silence and hangs), as
        # its own ranks' would, and are refused once read: only the latest is.
        assert model.attempt_steps == 2 and refused == len(lies) - 1
    verdict = ending.verdict(model)
    assert verdict is not None and verdict.state is RunState.FAILED and verdict.host == "b"


@pytest.mark.parametrize(
    ("named", "blamed"), [("0 (local_rank: 0)", None), ("3 (local_rank: 1)", 3)]
)
def test_torchrun_s_report_names_only_its_own_host_s_ranks(named: str, blamed: int | None) -> None:
    model = RunModel(_record())
    follower = _follower("b")
    report = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "============================================================",
        "Root Cause (first observed failure):",
        "[0]:",
        f"  rank      : {named}",
        "  exitcode  : -9 (pid: 4242)",
        "  traceback : Signal 9 (SIGKILL) received by PID 4242",
        "============================================================",
    ]
    for offset, text in enumerate(report, start=1):
        _take(model, follower, _sent("node/attempt-1.out", offset, text))
    [diagnosis] = model.diagnoser.diagnoses()
    assert diagnosis.hosts == ("b",)
    assert diagnosis.ranks == (() if blamed is None else (blamed,))


def test_a_heartbeat_speaks_only_for_its_own_host_s_ranks() -> None:
    model = RunModel(_record())
    follower = _follower("a")
    ranks = {str(rank): {"state": "T", "cpu_pct": 0.0} for rank in range(4)}
    raw = json.dumps({"k": "hb", "time": 1.0, "groups": {"1": True}, "sample": {"ranks": ranks}})
    _take(model, follower, raw.encode())
    assert set(model.nodes["a"].sample["ranks"]) == {0, 1}
    assert model.refused == 2
    # A time that is no float is garbled, not an exception out of the follower.
    huge = b'{"k": "hb", "time": 1' + b"0" * 400 + b', "groups": {}}'
    assert follower._parse(huge) is None and follower.garbled == 1


def test_the_follower_remembers_only_the_host_s_own_files_and_no_more_than_its_plan_has() -> None:
    record = _record()
    files = record.host_files(record.nodes[1])
    assert (files.ranks, files.attempts, files.logs) == (range(2, 4), 2, 12)
    follower = HostFollower.of_node(
        _CONFIG,
        record,
        record.nodes[1],
        offsets={"node/attempt-1.exit": 2, "/etc/passwd": 9, "node/attempt-1.out": True},
    )
    assert follower.offsets == {"node/attempt-1.exit": 2}
    strangers = [
        "events/metrics.jsonl",
        "events/rank0.jsonl",
        "events/rank1.jsonl.tmp",
        "events/rank٣.jsonl",
        "node/attempt-1.pgid",
        "node/attempt-3.out",
        "../../etc/passwd",
        "logs/attempt-1/" + "x/" * 200 + "0/stdout.log",
        "logs/attempt-1/é/attempt_0/0/stdout.log",
        "logs/attempt-1/x/attempt_0/2/stdout.log",
        "logs/attempt-3/x/attempt_0/0/stdout.log",
    ]
    for path in strangers:
        assert follower._parse(_sent(path, 5, "text")) is None
    assert follower.unknown == len(strangers)
    assert follower.offsets == {"node/attempt-1.exit": 2}
    # Invented torchrun ids fill the log slots and no more, and crowd out none of its files.
    for invented in range(INVENTED):
        follower._parse(_sent(f"logs/attempt-1/x{invented}/attempt_0/0/stdout.log", 5, "text"))
    assert len(follower.offsets) == 1 + files.logs
    assert follower.unknown == len(strangers) + INVENTED - files.logs
    for path in ("events/rank2.jsonl", "events/rank3.jsonl", "node/attempt-2.out"):
        assert follower._parse(_sent(path, 5, "text")) == FileLine("b", path, 5, "text")
    # What it remembers still resumes exactly: no line twice.
    assert follower._parse(_sent("node/attempt-1.exit", 2, "0")) is None
    assert follower._parse(_sent("node/attempt-1.exit", 4, "1")) == FileLine(
        "b", "node/attempt-1.exit", 4, "1"
    )


class _Flood:
    """A channel that sends ``count`` documents of the largest size a line may have."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.sent = 0

    async def batches(self) -> AsyncIterator[list[bytes]]:
        for index in range(self.count):
            self.sent += 1
            yield [b"%08d" % index + b"x" * (MAX_DOCUMENT_BYTES - 8)]


class _Empties:
    """A channel that sends nothing but newlines, a read of 64 Ki of them at a time."""

    def __init__(self) -> None:
        self.sent = 0

    async def batches(self) -> AsyncIterator[list[bytes]]:
        while True:
            self.sent += 65536
            yield [b""] * 65536


def test_the_inbox_holds_a_few_mib_and_its_reader_waits_without_dropping_a_line() -> None:
    async def flood() -> tuple[int, int, list[list[bytes] | None]]:
        inbox = Inbox()
        channel = _Flood(64)
        reader = asyncio.create_task(_read(channel, inbox))  # type: ignore[arg-type]
        for _ in range(200):
            await asyncio.sleep(0)
        held, sent = inbox.bytes, channel.sent
        taken: list[list[bytes] | None] = []
        while not taken or taken[-1] is not None:
            taken.append(await inbox.get())
        await reader
        return held, sent, taken

    held, sent, taken = asyncio.run(flood())
    assert held <= INBOX_BYTES + MAX_DOCUMENT_BYTES + LINE_OBJECT_BYTES
    assert sent < 64, "the reader did not wait for room"
    assert [line[:8] for lines in taken[:-1] if lines is not None for line in lines] == [
        b"%08d" % index for index in range(64)
    ]
    assert taken[-1] is None


def test_empty_lines_count_against_the_inbox_too() -> None:
    async def flood() -> tuple[int, int]:
        inbox = Inbox()
        channel = _Empties()
        reader = asyncio.create_task(_read(channel, inbox))  # type: ignore[arg-type]
        for _ in range(200):
            await asyncio.sleep(0)
        reader.cancel()
        return inbox.bytes, channel.sent

    held, sent = asyncio.run(flood())
    assert held <= INBOX_BYTES + 65536 * LINE_OBJECT_BYTES
    assert sent <= (INBOX_BYTES // LINE_OBJECT_BYTES) + 2 * 65536, "the reader did not wait"


def test_the_end_of_a_channel_goes_into_a_full_inbox() -> None:
    async def fill() -> list[list[bytes] | None]:
        inbox = Inbox(max_bytes=10)
        await inbox.put([b"x" * 10])
        assert inbox.full()
        inbox.end()
        return [inbox.get_nowait(), inbox.get_nowait()]

    assert asyncio.run(fill()) == [[b"x" * 10], None]


def test_the_supervisor_s_inbox_holds_its_bytes_budget_of_the_longest_lines() -> None:
    async def flood() -> tuple[int, int]:
        inbox = updates_inbox()
        # The longest line a follower passes on, in characters that take 4 bytes each.
        line = FileLine("ddpa2", "logs/attempt-1/rank0.log", 1, "\U0001f3d6" * MAX_TEXT_CHARS)
        put = 0
        while True:
            try:
                inbox.put_nowait([line])
            except asyncio.QueueFull:
                return put, inbox.bytes
            put += 1

    put, held = asyncio.run(flood())
    assert held <= SUPERVISOR_INBOX_BYTES + 4 * MAX_TEXT_CHARS + UPDATE_OBJECT_BYTES + 100
    assert put < INBOX / 10, "a count of lines bounded it, not their bytes"


def test_torchrun_s_report_cannot_grow_the_diagnoser_s_ranks_past_its_cap() -> None:
    diagnoser = Diagnoser(attempt=1)
    # torchrun gives up on a block past its longest traceback: several blocks say it all.
    for block in range(0, MAX_STREAMS + 1000, 500):
        report = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
        for local in range(block, block + 500):
            report += [f"[{local}]:", f"  rank      : {10_000 + local} (local_rank: {local})"]
        for text in [*report, "=" * 40, "Root Cause:", "=" * 40]:
            diagnoser.feed(LogLine("a", 0, None, "torchrun", 1.0, text))
    assert len(diagnoser._ranks) == MAX_STREAMS
