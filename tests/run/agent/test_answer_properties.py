"""Whatever a host sends, the head's real parsers give a typed value or their one documented
error, in bounded time, and never run any of it.

Hypothesis draws the host's side: the node agent's answers (through the real
:func:`~ddptui.run.agent.call.agent` and each command's client function, over a fake
transport), the lines a host streams while it is followed (through the real follower, model
and supervisor protocol), the trainer's event lines, Python stack dumps, the bandwidth
benchmark's output and the probe's document. Each kind has its own test below; the strategies
above them are shared.

A parser that refused everything would pass those tests, so each kind has a second one: it draws
only what a correct host sends, every field its parser reads, and holds the parser to the typed
value that says the same.

Every test is derandomized with no example database, so CI sees the same examples on every run,
and has no deadline (:func:`~tests.run.hostile_answers.hostile` says why).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import ipaddress
import json
import math
import stat
import string
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

import ddptui
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health.bandwidth import (
    BandwidthReport,
    BenchError,
    PairRow,
    SweepRow,
    read_result,
)
from ddptui.present.bandwidth import bandwidth_lines, bandwidth_matrix
from ddptui.probe.facts import (
    MAX_GPUS,
    NA,
    DiskFacts,
    GpuFacts,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    HostFacts,
    Interface,
    KernelLog,
    MasterResolution,
    PathEntry,
    PortFacts,
    PythonFacts,
    TorchFacts,
    WorkdirSafety,
    XidEvent,
)
from ddptui.probe.parse import PROBE_VERSION, ProbeError, parse_facts
from ddptui.remote.commands import CommandResult
from ddptui.run import protocol
from ddptui.run.agent import client as nodes
from ddptui.run.agent.answers import MAX_ATTEMPT, MAX_PROCESSES, PID_LIMIT, AttemptStatus
from ddptui.run.agent.call import GarbledAnswer, NodeError
from ddptui.run.agent.client import HostDump
from ddptui.run.checkpoints import MAX_LISTED, Held, carriable, matches
from ddptui.run.code import upload as code_upload
from ddptui.run.code.contents import CodeFile, CodeTree
from ddptui.run.evidence.stacks import (
    MAX_FILE_CHARS,
    MAX_FRAMES,
    MAX_NAME_CHARS,
    MAX_THREADS,
    MODULE_FRAME,
    Frame,
    RankStack,
    ThreadStack,
    group,
    parse_stacks,
    rank_spans,
)
from ddptui.run.following.event_fields import LAUNCH_STAMPS
from ddptui.run.following.events import (
    EVENT_TYPES,
    EVENT_VERSION,
    MAX_EVENT_TIME,
    MAX_EXPECT_S,
    MAX_MIB,
    MAX_SAMPLES_PER_S,
    MAX_STEP_S,
    EventReader,
    RankEvent,
    SkippedCheckpoint,
)
from ddptui.run.following.files import MAX_OFFSET, MAX_TEXT_CHARS, HostFollower
from ddptui.run.following.model import RunModel
from ddptui.run.following.progress import MAX_RANKS, RunProgress
from ddptui.run.following.sample import GPU_FIELDS, MAX_XID_CHARS, MAX_XIDS, PROCESS_STATE_LETTERS
from ddptui.run.following.state import Steps
from ddptui.run.following.updates import FileLine, Heartbeat
from ddptui.run.supervisor import ending, judging
from ddptui.untrusted import plain
from tests.run.bed import two_host_record
from tests.run.hostile_answers import (
    FLOATS,
    HOST,
    HOSTILE_TEXT,
    INTS,
    JSON_VALUES,
    RAW_LINES,
    RUN_DIR,
    SCALARS,
    AnsweringHost,
    NothingEvaluated,
    Raw,
    answer_lines,
    answered,
    any_of,
    command_results,
    hostile,
    maybe,
    serialised,
    shown_safely,
    to_json,
    weighted,
)

# --- node agent answers: status and wait ------------------------------------------------------

PIDS = st.one_of(
    st.sampled_from([-1, 0, 1, 2, 4242, PID_LIMIT - 1, PID_LIMIT, 2**63, True, 4242.0]), INTS
)
PROCESS_NAMES = maybe(HOSTILE_TEXT)
PROCESSES = maybe(st.lists(maybe(st.tuples(maybe(PIDS), PROCESS_NAMES).map(list)), max_size=4))
ATTEMPT_KEYS = weighted(
    (6, st.sampled_from(["1", "2", "3"])),
    (1, st.sampled_from(["0", "01", "٣", "²", " 1", "1234567890", "9" * 20])),
    (1, HOSTILE_TEXT),
)
ATTEMPT_FIELDS = st.fixed_dictionaries(
    {
        "pgid": maybe(st.one_of(st.none(), PIDS)),
        "alive": maybe(st.booleans()),
        "exit": maybe(st.one_of(st.none(), st.integers(-1, 256))),
        "processes": PROCESSES,
    },
    # How many of the processes are ranks': the agent says so since it learned it; an older
    # one does not.
    optional={
        "ranks": maybe(
            st.one_of(
                st.integers(-1, 8), st.sampled_from([PID_LIMIT, PID_LIMIT + 1, True, 1.0, None])
            )
        )
    },
)
STATUS = st.fixed_dictionaries(
    {"attempts": maybe(st.dictionaries(ATTEMPT_KEYS, maybe(ATTEMPT_FIELDS), max_size=3))},
    optional={"time": JSON_VALUES},
)


def process_names(names: Sequence[object]) -> None:
    assert len(names) <= MAX_PROCESSES
    for name in names:
        shown_safely(name, one_line=True, limit=64)


@hostile(300)
@given(
    answer=command_results(answer_lines(STATUS)),
    wait=st.sampled_from([0.0, 2.5]),
    known=st.sampled_from([None, 1, 3]),
)
def test_status_and_wait_answers(answer: CommandResult, wait: float, known: int | None) -> None:
    remote = AnsweringHost({"status": answer, "wait": answer})
    found = answered(nodes.status(remote, HOST, RUN_DIR, wait=wait, attempts=known))
    if isinstance(found, NodeError):
        return
    assert type(found) is list
    latest = MAX_ATTEMPT if known is None else known
    assert [item.attempt for item in found] == sorted(item.attempt for item in found)
    for item in found:
        assert type(item) is AttemptStatus
        assert type(item.attempt) is int and 1 <= item.attempt <= latest
        assert item.pgid is None or (type(item.pgid) is int and 2 <= item.pgid < PID_LIMIT)
        assert type(item.alive) is bool
        assert item.exit is None or (type(item.exit) is int and 0 <= item.exit <= 255)
        assert type(item.processes) is tuple
        assert all(type(pid) is int and 2 <= pid < PID_LIMIT for pid, _ in item.processes)
        process_names([name for _, name in item.processes])
        assert item.ranks is None or (type(item.ranks) is int and 0 <= item.ranks <= PID_LIMIT)


# --- node agent answers: signal ---------------------------------------------------------------

SIGNALLED = st.fixed_dictionaries(
    {
        "signalled": maybe(
            st.lists(
                maybe(
                    st.fixed_dictionaries(
                        {
                            "attempt": maybe(st.integers(-1, 4)),
                            "processes": maybe(st.lists(PROCESS_NAMES, max_size=4)),
                        }
                    )
                ),
                max_size=4,
            )
        )
    }
)


@hostile(250)
@given(answer=command_results(answer_lines(SIGNALLED)), known=st.sampled_from([None, 1, 3]))
def test_signal_answers(answer: CommandResult, known: int | None) -> None:
    remote = AnsweringHost({"signal": answer})
    reached = answered(nodes.send_signal(remote, HOST, RUN_DIR, "TERM", attempts=known))
    if isinstance(reached, NodeError):
        return
    assert type(reached) is list
    process_names(reached)
    # The names are the host's, only made safe to show: none was formatted, rendered as markup
    # or run on the way.
    document = json.loads(answer.stdout.strip().splitlines()[-1])
    sent = [name for item in document["signalled"] for name in item["processes"]]
    assert reached == [plain(name, limit=64, one_line=True) for name in sent[:MAX_PROCESSES]]


# --- node agent answers: list-files -----------------------------------------------------------

LISTED_PATHS = st.one_of(
    st.sampled_from(
        ["ckpt/step-1.pt", "a.pt", "", "/etc/passwd", "../x", "a/../b", "a/./b", "a//b", ".."]
    ),
    HOSTILE_TEXT,
)
SIZES = st.one_of(st.sampled_from([-1, 0, 1, 2**50, 2**50 + 1, True, 1.0]), INTS)
MTIMES = st.one_of(FLOATS, INTS, st.sampled_from([Raw("1" + "0" * 400), 1.0005, True]))
ENTRY = st.one_of(
    st.tuples(maybe(LISTED_PATHS), maybe(SIZES), maybe(MTIMES)).map(list),
    st.lists(SCALARS, max_size=4),
)
ENTRIES = st.one_of(
    st.lists(maybe(ENTRY), max_size=4),
    # One more than a listing holds, each entry sane.
    st.builds(lambda: [["a.pt", 1, 1.0]] * (MAX_LISTED + 1)),
)
GLOBS = st.one_of(st.sampled_from(["*.pt", "checkpoints/*.pt", "**/*"]), HOSTILE_TEXT)


@st.composite
def listings(draw: st.DrawFn) -> tuple[list[str], CommandResult]:
    globs = draw(st.lists(GLOBS.filter(lambda glob: glob != "*.other"), unique=True, max_size=3))
    # A glob not asked for, listed anyway.
    files = st.fixed_dictionaries(
        {glob: maybe(ENTRIES) for glob in globs}, optional={"*.other": ENTRIES}
    )
    answer = draw(command_results(answer_lines(st.fixed_dictionaries({"files": maybe(files)}))))
    return globs, answer


@hostile(250)
@given(listing=listings())
def test_list_files_answers(listing: tuple[list[str], CommandResult]) -> None:
    globs, answer = listing
    remote = AnsweringHost({"list-files": answer})
    listed = answered(nodes.list_files(remote, HOST, RUN_DIR, globs))
    if isinstance(listed, NodeError):
        return
    assert type(listed) is dict and list(listed) == globs
    for glob, held in listed.items():
        assert type(held) is dict and len(held) <= MAX_LISTED
        for path, file in held.items():
            # A path names a file to copy, not text to show: it is checked, not escaped.
            assert type(path) is str and path and not path.startswith("/")
            assert ".." not in path.split("/")
            # Only what the lister could have listed under the glob it answers.
            assert matches(path, glob) and carriable(path), (path, glob)
            assert type(file) is Held
            assert type(file.size) is int and 0 <= file.size <= 2**50
            assert type(file.mtime) is float and math.isfinite(file.mtime)
            assert round(file.mtime, 3) == file.mtime


# --- node agent answers: free-port ------------------------------------------------------------


@hostile(150)
@given(
    answer=command_results(
        answer_lines(st.fixed_dictionaries({"port": maybe(st.one_of(INTS, st.just(29500)))}))
    ),
    wanted=st.sampled_from([0, 29500]),
)
def test_free_port_answers(answer: CommandResult, wanted: int) -> None:
    remote = AnsweringHost({"free-port": answer})
    port = answered(nodes.free_port(remote, HOST, wanted))
    if isinstance(port, NodeError):
        return
    assert type(port) is int and 1 <= port <= 65535
    assert not wanted or port == wanted


# --- node agent answers: have, put and stage (the code upload) --------------------------------


def _code_tree() -> CodeTree:
    """Two small files of this checkout, as a job's code."""
    package = Path(ddptui.__file__).parent
    files = []
    for path, source in (
        ("untrusted.py", package / "untrusted.py"),
        ("x/errors.py", package / "errors.py"),
    ):
        data = source.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        files.append(CodeFile(path, source, len(data), digest, False))
    return CodeTree(package, tuple(files))


TREE = _code_tree()
DIGESTS = [file.sha256 for file in TREE.files]
RECORD_TEXT = 'id = "20990101-000000-abcd"\n'
UPLOAD = st.fixed_dictionaries(
    {
        "put": command_results(
            answer_lines(
                st.fixed_dictionaries(
                    {"stored": maybe(weighted((2, st.integers(1, 3)), (1, st.integers(-1, 4))))}
                )
            )
        ),
        "stage": command_results(
            answer_lines(
                st.fixed_dictionaries(
                    {
                        "missing": maybe(
                            st.lists(st.one_of(st.sampled_from(DIGESTS), HOSTILE_TEXT), max_size=3)
                        ),
                        "staged": maybe(
                            weighted((3, st.just(len(TREE.files))), (1, st.integers(-1, 4)))
                        ),
                        "shared": maybe(st.booleans()),
                        "written": maybe(
                            weighted(
                                (3, st.just(len(RECORD_TEXT))),
                                (1, st.sampled_from([0, -1, 2**63])),
                            )
                        ),
                    }
                )
            )
        ),
    }
)


@hostile(250)
@given(answers=UPLOAD)
def test_code_upload_answers(answers: dict[str, CommandResult]) -> None:
    remote = AnsweringHost(answers)
    done = answered(code_upload.send(remote, HOST, "/cache", RUN_DIR, TREE, RECORD_TEXT))
    if not isinstance(done, NodeError):
        sent, shared = done
        # At most every file once: the host says what it lacks once, then it has it all.
        assert type(sent) is int and 0 <= sent <= TREE.size and type(shared) is bool


# --- node agent answers: write and control ----------------------------------------------------

CONTROL = st.fixed_dictionaries(
    {
        "control": command_results(
            answer_lines(
                st.fixed_dictionaries({"created": maybe(st.sampled_from(["stop", "save"]))})
            )
        ),
    }
)


@hostile(100)
@given(answers=CONTROL, what=st.sampled_from(["stop", "save"]))
def test_control_answers(answers: dict[str, CommandResult], what: str) -> None:
    remote = AnsweringHost(answers)
    asked = answered(nodes.request(remote, HOST, RUN_DIR, what))
    assert asked is None or isinstance(asked, NodeError)


# --- node agent answers: start ----------------------------------------------------------------


@hostile(150)
@given(
    answer=command_results(answer_lines(st.fixed_dictionaries({"pgid": maybe(PIDS)}))),
)
def test_start_answers(answer: CommandResult) -> None:
    remote = AnsweringHost({"start": answer})
    pgid = answered(
        nodes.start(remote, HOST, RUN_DIR, 1, {"NCCL_DEBUG": "WARN"}, ["python3", "-m", "x"])
    )
    if isinstance(pgid, NodeError):
        return
    assert type(pgid) is int and 2 <= pgid < PID_LIMIT


# --- Python stacks (py-spy and faulthandler text) ---------------------------------------------

LINE_NUMBERS = st.one_of(
    st.sampled_from(["0", "1", "123", "9" * 12, "9" * 13, "9" * 5000, "٣", "²", "-1", " 7", ""]),
    st.integers(0, 10**20).map(str),
)
STACK_LINES = st.one_of(
    st.builds(
        lambda name: f"Thread 0x{name} (most recent call first):",
        st.one_of(st.just("00007f3a2b4c5700"), HOSTILE_TEXT),
    ),
    st.builds(lambda name: f"{name} (most recent call first):", HOSTILE_TEXT),
    st.just("Current thread 0x00007f3a2b4c5700 (most recent call first):"),
    st.builds(
        lambda tid, state, name: f'Thread {tid} ({state}): "{name}"',
        st.one_of(st.integers(0, 2**64).map(str), HOSTILE_TEXT),
        st.sampled_from(["idle", "active", "gil"]),
        st.one_of(st.just("MainThread"), HOSTILE_TEXT),
    ),
    st.builds(
        lambda file, number, function: f'  File "{file}", line {number} in {function}',
        HOSTILE_TEXT,
        LINE_NUMBERS,
        st.one_of(st.just("<module>"), HOSTILE_TEXT),
    ),
    st.builds(
        lambda function, file, number: f"    {function} ({file}:{number})",
        HOSTILE_TEXT,
        HOSTILE_TEXT,
        LINE_NUMBERS,
    ),
    HOSTILE_TEXT,
)


CROWDS = (
    'Thread 1 (idle): "MainThread"\n' + "    step (loop.py:1)\n" * (MAX_FRAMES + 3),
    'Thread 0x1 (most recent call first):\n  File "a.py", line 1 in f\n' * (MAX_THREADS + 3),
)
"""More frames in a thread, and more threads, than a stack keeps."""


@st.composite
def stack_texts(draw: st.DrawFn) -> str:
    lines = draw(st.lists(weighted((8, STACK_LINES), (1, any_of(CROWDS))), max_size=8))
    separator = draw(st.sampled_from(["\n", "\n", "\r\n", "\r", "\x1c", "\u2028", "\x85"]))
    return separator.join(lines)


STACK_TEXTS = st.one_of(stack_texts(), HOSTILE_TEXT)


def stacks_are_safe(threads: object) -> None:
    assert type(threads) is tuple and len(threads) <= MAX_THREADS
    for thread in threads:
        assert type(thread) is ThreadStack
        shown_safely(thread.name, one_line=True, limit=MAX_NAME_CHARS)
        assert type(thread.frames) is tuple and len(thread.frames) <= MAX_FRAMES
        for frame in thread.frames:
            shown_safely(frame.function, one_line=True, limit=MAX_NAME_CHARS)
            shown_safely(frame.file, one_line=True, limit=MAX_FILE_CHARS)
            assert type(frame.line) is int and 0 <= frame.line < 10**12
            assert isinstance(frame.where, str) and isinstance(frame.key, tuple)


@hostile(300)
@given(text=STACK_TEXTS)
def test_stack_texts(text: str) -> None:
    with NothingEvaluated():
        threads = parse_stacks(text)
    stacks_are_safe(threads)


# A parser that found no thread in any text would pass the test above: these texts are what
# py-spy and faulthandler print, and every thread and frame drawn must be read back.

IDENTIFIERS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True)
FUNCTION_NAMES = st.one_of(
    st.just(MODULE_FRAME),
    IDENTIFIERS,
    # py-spy's qualified names.
    st.builds(lambda outer, inner: f"{outer}.<locals>.{inner}", IDENTIFIERS, IDENTIFIERS),
)
SOURCE_FILES = st.from_regex(r"/?([a-z0-9_-]{1,8}/){0,3}[a-z_][a-z0-9_]{0,8}\.py", fullmatch=True)
FRAMES = st.builds(Frame, FUNCTION_NAMES, SOURCE_FILES, st.integers(0, 10**12 - 1))
THREAD_NAMES = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=16)


@st.composite
def valid_stack_texts(draw: st.DrawFn) -> tuple[str, tuple[ThreadStack, ...]]:
    """One process's threads as ``py-spy dump`` or faulthandler prints them, and those threads."""
    py_spy = draw(st.booleans())
    # py-spy names the process first; faulthandler starts at the first thread, and names
    # threads by their ids alone.
    lines = ["Process 4242: python3 train.py", "Python v3.11.9 (/usr/bin/python3.11)", ""]
    lines = lines if py_spy else []
    threads = []
    for thread_id in draw(st.lists(st.integers(1, 2**48), unique=True, max_size=3)):
        frames = draw(st.lists(FRAMES, max_size=4))
        if py_spy:
            name = draw(THREAD_NAMES)
            state = draw(st.sampled_from(["idle", "active", "gil"]))
            lines.append(f'Thread {thread_id} ({state}): "{name}"')
            lines += [f"    {frame.function} ({frame.file}:{frame.line})" for frame in frames]
        else:
            name = f"0x{thread_id:016x}"
            which = draw(st.sampled_from(["Thread", "Current thread"]))
            lines.append(f"{which} {name} (most recent call first):")
            lines += [f'  File "{f.file}", line {f.line} in {f.function}' for f in frames]
            lines.append("")
        threads.append(ThreadStack(name, tuple(frames)))
    return "\n".join(lines) + "\n", tuple(threads)


@hostile(100)
@given(dump=valid_stack_texts())
def test_the_stack_texts_py_spy_and_faulthandler_print_are_read(
    dump: tuple[str, tuple[ThreadStack, ...]],
) -> None:
    text, threads = dump
    assert parse_stacks(text) == threads


# --- node agent answers: dump (stacks and the flight recorder's files) ------------------------

RANK_STACK = st.fixed_dictionaries(
    {
        "rank": maybe(st.one_of(st.integers(-1, 4), st.sampled_from([MAX_RANKS - 1, MAX_RANKS]))),
        "pid": maybe(PIDS),
        "via": maybe(st.sampled_from(["", "py-spy", "faulthandler", "gdb"])),
        "text": maybe(STACK_TEXTS),
        "error": maybe(HOSTILE_TEXT),
        "note": maybe(HOSTILE_TEXT),
    }
)
FLIGHT = st.lists(
    maybe(st.tuples(maybe(st.integers(-1, MAX_RANKS)), maybe(SIZES)).map(list)), max_size=4
)
DUMP = st.fixed_dictionaries(
    {
        "attempt": maybe(st.integers(-1, 4)),
        "ranks": maybe(st.lists(maybe(RANK_STACK), max_size=3)),
        "flight": maybe(FLIGHT),
    }
)


@hostile(300)
@given(
    answer=command_results(answer_lines(DUMP)),
    attempts=st.integers(1, 3),
    node_rank=st.integers(0, 3),
)
def test_dump_answers(answer: CommandResult, attempts: int, node_rank: int) -> None:
    remote = AnsweringHost({"dump": answer})
    dumped = answered(nodes.dump(remote, HOST, node_rank, RUN_DIR, attempts=attempts))
    if isinstance(dumped, NodeError):
        return
    assert type(dumped) is HostDump
    assert type(dumped.attempt) is int and 0 <= dumped.attempt <= attempts
    assert type(dumped.stacks) is list and len(dumped.stacks) <= MAX_PROCESSES
    for stack in dumped.stacks:
        assert type(stack) is RankStack
        assert (stack.host, stack.node_rank) == (HOST.name, node_rank)
        assert type(stack.rank) is int and 0 <= stack.rank < MAX_RANKS
        assert type(stack.pid) is int and 2 <= stack.pid < PID_LIMIT
        assert stack.via in ("", "py-spy", "faulthandler")
        shown_safely(stack.error, one_line=True, limit=500)
        shown_safely(stack.note, one_line=True, limit=500)
        shown_safely(stack.text, one_line=False)
        stacks_are_safe(stack.threads)
    # What `ddptui dump` makes of them: groups of ranks and their spans.
    for found in group(dumped.stacks):
        assert isinstance(rank_spans([rank.rank for rank in found.ranks]), str)
    assert type(dumped.flight) is dict and len(dumped.flight) <= MAX_PROCESSES
    for rank, size in dumped.flight.items():
        assert type(rank) is int and 0 <= rank < MAX_RANKS
        assert type(size) is int and 0 <= size <= 2**62


# --- node agent answers: what the real agent prints is read, as it printed it ----------------
# The tests above hold whatever a host sends to a typed value or a NodeError; a parser that
# refused everything would pass them. These draw only answers the agent prints
# (:mod:`ddptui.onhost.agent`, through its ``emit``) and hold each to its typed value, field by
# field.

BANNERS = st.lists(
    st.sampled_from(["", "Welcome to ddpa2!", "Last login: Mon Jan  1 00:00:00 2099"]), max_size=2
)
"""What a login script may print before the agent does."""
NAMES = st.text(max_size=20)
"""A process's name, an error's text: any text (the head makes it plain)."""
VALID_PIDS = st.one_of(st.sampled_from([2, PID_LIMIT - 1]), st.integers(2, PID_LIMIT - 1))


@st.composite
def printed(draw: st.DrawFn, document: dict[str, Any]) -> CommandResult:
    """The agent's answer ``document`` as it prints it, after what a login script may print."""
    line = json.dumps(document, separators=(",", ":"))
    return CommandResult(0, "\n".join([*draw(BANNERS), line]) + "\n", "")


def shown(name: str) -> str:
    return plain(name, limit=64, one_line=True)


@st.composite
def valid_status(draw: st.DrawFn, latest: int) -> tuple[dict[str, Any], list[AttemptStatus]]:
    """A status (or wait) answer with attempts up to ``latest``, and what it says, typed."""
    numbers = draw(st.lists(st.integers(1, latest), unique=True, max_size=3))
    report, expected = {}, []
    for number in sorted(numbers):
        processes = draw(st.lists(st.tuples(VALID_PIDS, NAMES), max_size=4))
        fields: dict[str, Any] = {
            "pgid": draw(st.one_of(st.none(), VALID_PIDS)),
            "alive": bool(processes),
            "exit": draw(st.one_of(st.none(), st.integers(0, 255))),
            "processes": [list(process) for process in processes],
        }
        # An agent from before `ranks` does not say it.
        ranks = draw(st.one_of(st.none(), st.integers(0, len(processes))))
        if ranks is not None:
            fields["ranks"] = ranks
        report[str(number)] = fields
        expected.append(
            AttemptStatus(
                number,
                fields["pgid"],
                fields["alive"],
                fields["exit"],
                tuple((pid, shown(name)) for pid, name in processes),
                ranks,
            )
        )
    return {"attempts": report, "time": draw(st.floats(0, 4e9))}, expected


@hostile(100)
@given(data=st.data(), wait=st.sampled_from([0.0, 2.5]), known=st.sampled_from([None, 1, 3]))
def test_the_agents_status_and_wait_answers_are_read(
    data: st.DataObject, wait: float, known: int | None
) -> None:
    document, expected = data.draw(valid_status(known or 5))
    answer = data.draw(printed(document))
    remote = AnsweringHost({"status": answer, "wait": answer})
    found = answered(nodes.status(remote, HOST, RUN_DIR, wait=wait, attempts=known))
    assert found == expected


@hostile(60)
@given(
    reached=st.lists(
        st.tuples(st.integers(0, 3), st.lists(NAMES, min_size=1, max_size=4)), max_size=3
    ),
    known=st.sampled_from([None, 3]),
    data=st.data(),
)
def test_the_agents_signal_answers_are_read(
    reached: list[tuple[int, list[str]]], known: int | None, data: st.DataObject
) -> None:
    # Attempt 0: processes of the run that lost their attempt's mark.
    document = {
        "signalled": [{"attempt": attempt, "processes": names} for attempt, names in reached]
    }
    remote = AnsweringHost({"signal": data.draw(printed(document))})
    found = answered(nodes.send_signal(remote, HOST, RUN_DIR, "TERM", attempts=known))
    assert found == [shown(name) for _, names in reached for name in names]


LISTED_NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
VALID_GLOBS: dict[str, st.SearchStrategy[str]] = {
    "*.pt": LISTED_NAMES.map(lambda name: f"{name}.pt"),
    "checkpoints/*.pt": LISTED_NAMES.map(lambda name: f"checkpoints/{name}.pt"),
    "**/*.pt": st.lists(LISTED_NAMES, min_size=1, max_size=3).map(
        lambda names: "/".join(names) + ".pt"
    ),
    "ckpt/step-*/model.pt": LISTED_NAMES.map(lambda name: f"ckpt/step-{name}/model.pt"),
}


@st.composite
def valid_listings(
    draw: st.DrawFn,
) -> tuple[list[str], dict[str, Any], dict[str, dict[str, Held]]]:
    """Globs, the agent's list-files answer to them, and what it says, typed."""
    globs = draw(st.lists(st.sampled_from(sorted(VALID_GLOBS)), unique=True, max_size=3))
    files, expected = {}, {}
    for glob in globs:
        paths = draw(st.lists(VALID_GLOBS[glob], unique=True, max_size=4))
        entries = [[path, draw(st.integers(0, 2**50)), draw(st.floats(0, 4e9))] for path in paths]
        files[glob] = entries
        expected[glob] = {path: Held(size, round(mtime, 3)) for path, size, mtime in entries}
    return globs, {"files": files}, expected


@hostile(60)
@given(listing=valid_listings(), data=st.data())
def test_the_agents_list_files_answers_are_read(
    listing: tuple[list[str], dict[str, Any], dict[str, dict[str, Held]]], data: st.DataObject
) -> None:
    globs, document, expected = listing
    remote = AnsweringHost({"list-files": data.draw(printed(document))})
    assert answered(nodes.list_files(remote, HOST, RUN_DIR, globs)) == expected


@hostile(30)
@given(wanted=st.sampled_from([0, 29500]), port=st.integers(1, 65535), data=st.data())
def test_the_agents_free_port_answers_are_read(wanted: int, port: int, data: st.DataObject) -> None:
    port = wanted or port
    remote = AnsweringHost({"free-port": data.draw(printed({"port": port}))})
    assert answered(nodes.free_port(remote, HOST, wanted)) == port


@hostile(30)
@given(pgid=VALID_PIDS, data=st.data())
def test_the_agents_start_answers_are_read(pgid: int, data: st.DataObject) -> None:
    remote = AnsweringHost({"start": data.draw(printed({"pgid": pgid}))})
    started = nodes.start(remote, HOST, RUN_DIR, 1, {"NCCL_DEBUG": "WARN"}, ["python3", "-m", "x"])
    assert answered(started) == pgid


@hostile(10)
@given(what=st.sampled_from(["stop", "save"]), data=st.data())
def test_the_agents_control_answers_are_read(what: str, data: st.DataObject) -> None:
    remote = AnsweringHost({"control": data.draw(printed({"created": what}))})
    assert answered(nodes.request(remote, HOST, RUN_DIR, what)) is None


class TalkingHost(AnsweringHost):
    """A host that answers each command with the next of its answers, the last one again."""

    def __init__(self, answers: Mapping[str, Sequence[CommandResult]]) -> None:
        super().__init__({})
        self.said = {command: list(results) for command, results in answers.items()}

    def answer(self, host: HostConfig, command: str) -> CommandResult:
        results = self.said[command]
        return results.pop(0) if len(results) > 1 else results[0]


@hostile(40)
@given(
    missing=st.lists(st.sampled_from(DIGESTS), unique=True, max_size=len(DIGESTS)),
    shared=st.booleans(),
    data=st.data(),
)
def test_the_agents_code_upload_answers_are_read(
    missing: list[str], shared: bool, data: st.DataObject
) -> None:
    staged = {"staged": len(TREE.files), "shared": shared, "written": len(RECORD_TEXT)}
    stages = [data.draw(printed({"missing": missing}))] if missing else []
    remote = TalkingHost(
        {
            "stage": [*stages, data.draw(printed(staged))],
            # The files are small: each missing one goes whole, in one put.
            "put": [data.draw(printed({"stored": len(missing)}))],
        }
    )
    done = answered(code_upload.send(remote, HOST, "/cache", RUN_DIR, TREE, RECORD_TEXT))
    sizes = {file.sha256: file.size for file in TREE.files}
    assert done == (sum(sizes[digest] for digest in missing), shared)
    assert remote.asked == (["stage", "put", "stage"] if missing else ["stage"])


@st.composite
def valid_dumps(draw: st.DrawFn, attempts: int, node_rank: int) -> tuple[dict[str, Any], HostDump]:
    """The agent's dump answer (attempt up to ``attempts``), and what it says, typed."""
    attempt = draw(st.integers(0, attempts))
    ranks = draw(st.lists(st.integers(0, MAX_RANKS - 1), unique=True, max_size=3))
    reports, stacks = [], []
    for rank in sorted(ranks):
        text, threads = draw(valid_stack_texts())
        report = {
            "rank": rank,
            "pid": draw(VALID_PIDS),
            "name": draw(NAMES),
            "via": draw(st.sampled_from(["", "py-spy", "faulthandler"])),
            "text": text,
            "error": draw(NAMES),
            "note": draw(NAMES),
        }
        reports.append(report)
        stacks.append(
            RankStack(
                HOST.name,
                node_rank,
                rank,
                report["pid"],
                report["via"],
                threads,
                plain(report["error"], limit=500, one_line=True),
                plain(report["note"], limit=500, one_line=True),
                text,
            )
        )
    flight = draw(st.dictionaries(st.integers(0, MAX_RANKS - 1), st.integers(0, 2**62), max_size=3))
    document = {
        "attempt": attempt,
        "ranks": reports,
        "flight": [[rank, size] for rank, size in sorted(flight.items())],
    }
    return document, HostDump(attempt, stacks, flight)


@hostile(60)
@given(attempts=st.integers(1, 3), node_rank=st.integers(0, 3), data=st.data())
def test_the_agents_dump_answers_are_read(
    attempts: int, node_rank: int, data: st.DataObject
) -> None:
    document, expected = data.draw(valid_dumps(attempts, node_rank))
    remote = AnsweringHost({"dump": data.draw(printed(document))})
    dumped = answered(nodes.dump(remote, HOST, node_rank, RUN_DIR, attempts=attempts))
    assert dumped == expected


# --- lines a followed host streams ------------------------------------------------------------
# The follower reads the agent's documents, the model the lines and events in them, and the
# supervisor relays both to its viewers: the same path as a run.

_HOSTS = (HostConfig("a", "10.0.0.1"), HostConfig("b", "10.0.0.2"))
_CONFIG = Config(Path("hosts.toml"), ClusterConfig(), _HOSTS, JobConfig())
COMMON_FIELDS = {
    "v": maybe(st.just(1)),
    # Steps are nearly every line a run writes.
    "type": maybe(weighted((2, st.just("step")), (5, st.sampled_from(sorted(EVENT_TYPES))))),
    # Host b of the record runs ranks 2 and 3, its local ranks 0 and 1, of a world of 4.
    "rank": maybe(st.sampled_from([2, 3])),
    "local_rank": maybe(st.sampled_from([0, 1])),
    "node_rank": maybe(st.just(1)),
    "world_size": maybe(st.just(4)),
    "time": maybe(st.one_of(st.floats(0, 2e9), FLOATS)),
}
EVENT_FIELDS = sorted(
    {field.name for kind in EVENT_TYPES.values() for field in dataclasses.fields(kind)}
    - set(COMMON_FIELDS)
)
EVENT_DOCUMENTS = st.builds(
    lambda common, loose, shaped: {**common, **loose, **shaped},
    st.fixed_dictionaries(COMMON_FIELDS),
    # A few of the fields any event may carry, with any scalar...
    st.dictionaries(any_of(EVENT_FIELDS), SCALARS, max_size=5),
    # ...and those a parser walks into, shaped so that it does.
    st.fixed_dictionaries(
        {"step": maybe(weighted((4, st.integers(0, 20)), (1, INTS)))},
        optional={
            "config": JSON_VALUES,
            "versions": maybe(st.dictionaries(HOSTILE_TEXT, SCALARS, max_size=3)),
            "loss": maybe(FLOATS),
            "step_time_s": maybe(st.floats(0, 10)),
            "skipped_checkpoints": maybe(
                st.lists(st.fixed_dictionaries({"path": SCALARS, "reason": SCALARS}), max_size=3)
            ),
            # Lines past the 64 KiB an event may take, in bytes or in characters.
            "pad": any_of(["", "", "", "x" * 65_500, "é" * 40_000]),
        },
    ),
)
EVENT_LINES = weighted(
    (6, serialised(EVENT_DOCUMENTS)),
    (2, serialised(EVENT_DOCUMENTS).map(lambda text: text + "\r\n")),
    (1, serialised(JSON_VALUES)),
    (1, RAW_LINES),
)
OWN_PATHS = st.sampled_from(
    [
        "events/rank2.jsonl",
        "events/rank3.jsonl",
        "node/attempt-1.out",
        "node/attempt-1.exit",
        "node/attempt-2.exit",
        "logs/attempt-1/x/attempt_0/0/stdout.log",
        "logs/attempt-1/x/attempt_0/1/stderr.log",
        "logs/attempt-1/x/attempt_0/0/error.json",
    ]
)
"""Host b's own files: their lines reach the model."""
FOLLOWED_PATHS = weighted(
    (8, OWN_PATHS),
    (
        1,
        st.sampled_from(
            [
                "events/rank0.jsonl",
                "events/rank02.jsonl",
                "events/rank2.jsonl\n",
                "node/attempt-9.exit",
                "logs/attempt-1/x/attempt_0/7/stdout.log",
                "../../etc/passwd",
            ]
        ),
    ),
    (1, HOSTILE_TEXT),
)
LINE_TEXTS = st.one_of(
    EVENT_LINES,
    EVENT_LINES,
    st.sampled_from(["0", "1", "137", "255", "256", "٣", "9" * 5000, " 0\n"]),
    st.sampled_from(
        [
            "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered",
            "[rank0]: torch.distributed.DistBackendError: NCCL error",
            "[rank99999999999999999999]: Traceback (most recent call last):",
            "step 7 loss 1e999",
            "step 99999999999999999999 loss nan",
            "loss: -inf",
            "Exception raised from ncclCommWatchdog",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        ]
    ),
    HOSTILE_TEXT,
)
XID_TEXTS = st.builds(
    lambda pci, code, text: f"NVRM: Xid (PCI:{pci}): {code}, {text}",
    st.one_of(st.sampled_from(["0000:3b:00", "00000000:3B:00.0", "3b:00"]), HOSTILE_TEXT),
    LINE_NUMBERS,
    HOSTILE_TEXT,
)
"""A driver's Xid lines, as the kernel logs them, with anything in their parts."""
SAMPLES = st.fixed_dictionaries(
    {},
    optional={
        "procs": maybe(FLOATS),
        "cpu_pct": maybe(FLOATS),
        "rss_mib": maybe(FLOATS),
        "gpus": maybe(
            st.lists(
                maybe(
                    st.fixed_dictionaries(
                        {},
                        # nvidia-smi's text, or NVML's numbers.
                        optional={
                            key: maybe(
                                st.one_of(
                                    st.sampled_from(
                                        ["0", "63", "64", "81559", "[N/A]", "nan", "1e999", " 7 "]
                                    ),
                                    st.sampled_from(["00000000:3B:00.0", "0000:3b:00", "3B:00.0"]),
                                    HOSTILE_TEXT,
                                    INTS,
                                    FLOATS,
                                )
                            )
                            for key in GPU_FIELDS
                        },
                    )
                ),
                max_size=3,
            )
        ),
        "xids": maybe(st.lists(maybe(st.one_of(XID_TEXTS, HOSTILE_TEXT)), max_size=MAX_XIDS + 1)),
        "kernel_log": maybe(HOSTILE_TEXT),
        "ranks": maybe(
            st.dictionaries(
                st.one_of(st.sampled_from(["0", "2", "3", "9999999", "٣"]), HOSTILE_TEXT),
                maybe(
                    st.fixed_dictionaries(
                        {
                            "state": maybe(st.sampled_from(["R", "S", "T", "D", "Z", "RR", ""])),
                            "cpu_pct": maybe(FLOATS),
                        }
                    )
                ),
                max_size=3,
            )
        ),
    },
)
FOLLOWED_LINES = st.fixed_dictionaries(
    {
        "k": maybe(st.just("line")),
        "f": maybe(FOLLOWED_PATHS),
        # Mostly past the file's last offset, so the line is new.
        "o": maybe(
            st.one_of(
                st.integers(1, 10**9),
                st.integers(-1, 3),
                st.sampled_from([MAX_OFFSET, MAX_OFFSET + 1]),
            )
        ),
        "t": maybe(LINE_TEXTS),
    },
    optional={"cut": maybe(st.booleans())},
)
FOLLOWED_BEATS = st.fixed_dictionaries(
    {
        "k": maybe(st.just("hb")),
        "time": maybe(FLOATS),
        "groups": maybe(st.dictionaries(ATTEMPT_KEYS, JSON_VALUES, max_size=3)),
        "sample": maybe(SAMPLES),
    },
    optional={"behind": maybe(st.booleans())},
)


@st.composite
def own_events(draw: st.DrawFn) -> dict[str, Any]:
    """A line of one of host b's events files, mostly an event of that file's rank: the model
    takes no other."""
    rank = draw(st.sampled_from([2, 3]))
    event = draw(EVENT_DOCUMENTS)
    if draw(weighted((4, st.just(True)), (1, st.just(False)))):
        event.update(v=1, rank=rank, local_rank=rank - 2, node_rank=1, world_size=4)
    offset = draw(st.integers(1, 10**9))
    return {"k": "line", "f": f"events/rank{rank}.jsonl", "o": offset, "t": to_json(event)}


FOLLOWED_RAW = weighted(
    (8, serialised(own_events())),
    (8, serialised(FOLLOWED_LINES)),
    (4, serialised(FOLLOWED_BEATS)),
    (1, serialised(JSON_VALUES)),
    (1, RAW_LINES),
).map(lambda text: text.encode("utf-8", "surrogatepass")) | st.binary(max_size=64)


class Ticking:
    """A clock that moves on a second each time it is read."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def relayed(update: FileLine | Heartbeat) -> None:
    """What the supervisor sends viewers of ``update`` reads back as ``update``."""
    if isinstance(update, FileLine):
        assert protocol.decode(protocol.line_record(update)) == update
        return
    back = protocol.decode(protocol.message(update))
    assert isinstance(back, Heartbeat)
    # Left out of the comparison: `behind` is the supervisor's alone, and GPU figures are lost
    # on the way (test_a_relayed_heartbeat_keeps_its_gpu_figures).
    sample = {key: value for key, value in update.sample.items() if key != "gpus"}
    kept = {key: value for key, value in back.sample.items() if key != "gpus"}
    assert (back.host, back.time, back.groups, kept) == (
        update.host,
        update.time,
        update.groups,
        sample,
    )


def followed_update(update: FileLine | Heartbeat) -> None:
    if isinstance(update, FileLine):
        assert update.host == "b"
        assert type(update.path) is str and type(update.text) is str
        assert type(update.offset) is int and 0 < update.offset <= MAX_OFFSET
        assert len(update.text) <= MAX_TEXT_CHARS and type(update.cut) is bool
        return
    assert type(update) is Heartbeat and update.host == "b"
    assert type(update.time) is float and math.isfinite(update.time)
    assert all(type(k) is int and type(v) is bool for k, v in update.groups.items())
    assert set(update.sample) <= {
        "procs",
        "cpu_pct",
        "rss_mib",
        "gpus",
        "ranks",
        "xids",
        "kernel_log",
    }
    for key in ("procs", "cpu_pct", "rss_mib"):
        if key in update.sample:
            assert math.isfinite(update.sample[key])
    assert len(update.sample.get("gpus", ())) <= MAX_GPUS
    for gpu in update.sample.get("gpus", ()):
        assert set(gpu) <= set(GPU_FIELDS)
        for key, value in gpu.items():
            assert isinstance(value, int | float | str), (key, value)
            assert not isinstance(value, float) or math.isfinite(value)
            if isinstance(value, str):
                shown_safely(value, one_line=True, limit=32)
    xids = update.sample.get("xids", [])
    assert len(xids) <= MAX_XIDS
    assert all(type(line) is str and len(line) <= MAX_XID_CHARS for line in xids)
    shown_safely(update.sample.get("kernel_log", ""), one_line=True, limit=200)
    for rank, seen in update.sample.get("ranks", {}).items():
        assert type(rank) is int and 0 <= rank < 10**6
        assert seen["cpu_pct"] is None or (math.isfinite(seen["cpu_pct"]) and seen["cpu_pct"] >= 0)


@hostile(250)
@given(lines=st.lists(FOLLOWED_RAW, min_size=1, max_size=6), steps=st.sampled_from(list(Steps)))
def test_followed_lines(lines: list[bytes], steps: Steps) -> None:
    record = two_host_record()
    [node] = [node for node in record.nodes if node.host == "b"]
    follower = HostFollower.of_node(_CONFIG, record, node)
    model = RunModel(record, clock=Ticking(1000.0), wall=Ticking(2e9), steps=steps)
    with NothingEvaluated():
        for raw in lines:
            update = follower._parse(raw)
            if update is None:
                continue
            assert isinstance(update, FileLine | Heartbeat), update
            followed_update(update)
            relayed(update)
            model.apply(update)
        model.read_steps()
        verdict = ending.verdict(model)
        hang = judging.hang(model, override=0.0)
        judgement = model.judgement(record, hang)
        line = model.progress.format_line()
    assert verdict is None or isinstance(verdict.detail, str)
    assert isinstance(line, str)
    assert protocol.decode(protocol.message(protocol.Judged(judgement))) == protocol.Judged(
        judgement
    )


# A follower that dropped every document would pass the test above: these are what the agent's
# follow streams, and each must be read as the update it says, field by field.

SHOWN_TEXT = st.text(st.characters(categories=["L", "N", "P", "S", "Zs"]), max_size=16)
"""Text with nothing a terminal acts on: what the readers that make a host's text plain give back
unchanged."""
CPU_SHARES = st.floats(0, 6400).map(lambda share: round(share, 1))


@st.composite
def pci_bus_ids(draw: st.DrawFn) -> tuple[str, str]:
    """A GPU's PCI bus id as NVML gives it, and the slot the kernel log names the GPU by."""
    domain, bus, device = draw(
        st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F))
    )
    return f"{domain:08X}:{bus:02X}:{device:02X}.0", f"{domain:04x}:{bus:02x}:{device:02x}"


@st.composite
def valid_gpu_rows(draw: st.DrawFn, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """GPU ``index``'s row in a heartbeat, as NVML's numbers or nvidia-smi's text, and the row
    typed."""
    printed = draw(st.booleans())
    bus_id, slot = draw(pci_bus_ids())
    pstate = f"P{draw(st.integers(0, 15))}"
    row = {"index": str(index) if printed else index, "pstate": pstate, "pci_bus_id": bus_id}
    typed: dict[str, Any] = {"index": index, "pstate": pstate, "pci_bus_id": slot}
    for key in GPU_FIELDS:
        if key in row:
            continue
        # NVML's power is in milliwatts, sent in watts.
        number = draw(
            st.one_of(
                st.none(),
                st.integers(0, 10**6),
                st.integers(0, 10**6).map(lambda milli: milli / 1000),
            )
        )
        if number is None:
            # What the GPU did not say: nvidia-smi prints so, NVML's row leaves it out.
            if printed:
                row[key] = "[N/A]"
            continue
        row[key] = str(number) if printed else number
        typed[key] = int(number) if float(number).is_integer() else number
    return row, typed


XID_LINES = st.builds(
    lambda stamp, slot, code, words: f"[{stamp:.6f}] NVRM: Xid (PCI:{slot}): {code}, {words}",
    st.floats(0, 10**6),
    pci_bus_ids().map(lambda ids: ids[1]),
    st.integers(0, 9999),
    SHOWN_TEXT,
)
"""New Xid lines, as the kernel logs them."""


@st.composite
def valid_heartbeats(draw: st.DrawFn) -> tuple[dict[str, Any], Heartbeat]:
    """A heartbeat as the agent's sampler sends it, and the heartbeat it says."""
    groups = draw(st.dictionaries(st.integers(1, 20), st.booleans(), max_size=3))
    ranks = draw(
        st.dictionaries(
            st.integers(0, 10**6 - 1),
            st.fixed_dictionaries(
                {"state": st.sampled_from(sorted(PROCESS_STATE_LETTERS)), "cpu_pct": CPU_SHARES}
            ),
            max_size=3,
        )
    )
    sample: dict[str, Any] = {
        "procs": draw(st.integers(0, 512)),
        "cpu_pct": draw(CPU_SHARES),
        "rss_mib": draw(st.floats(0, 2**20).map(lambda mib: round(mib, 1))),
        "ranks": {str(rank): seen for rank, seen in ranks.items()},
    }
    typed = {**sample, "ranks": ranks}
    # No GPU sample where the host has no way to ask.
    if draw(st.booleans()):
        indexes = draw(st.lists(st.integers(0, MAX_GPUS - 1), unique=True, max_size=3))
        rows = [draw(valid_gpu_rows(index)) for index in indexes]
        sample["gpus"] = [row for row, _ in rows]
        typed["gpus"] = [row for _, row in rows]
    # The kernel's log: new Xid lines, or why it cannot be read, or nothing new.
    kernel = draw(
        st.one_of(
            st.fixed_dictionaries({"xids": st.lists(XID_LINES, min_size=1, max_size=MAX_XIDS)}),
            st.fixed_dictionaries({"kernel_log": SHOWN_TEXT}),
            st.just({}),
        )
    )
    sample |= kernel
    typed |= kernel
    stamp, behind = draw(st.floats(0, 4e9)), draw(st.booleans())
    document = {
        "k": "hb",
        "time": stamp,
        "groups": {str(attempt): alive for attempt, alive in groups.items()},
        "sample": sample,
        "behind": behind,
    }
    return document, Heartbeat("b", stamp, groups, typed, behind)


@st.composite
def valid_follows(draw: st.DrawFn) -> tuple[list[bytes], list[FileLine | Heartbeat]]:
    """What the agent's follow streams of host b, its own files' new lines and heartbeats, and
    the updates it says."""
    ends: dict[str, int] = {}
    sent, updates = [], []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            document, update = draw(valid_heartbeats())
        else:
            path = draw(OWN_PATHS)
            ends[path] = ends.get(path, 0) + draw(st.integers(1, 10**6))
            text = draw(st.text(st.characters(exclude_characters="\n"), max_size=40))
            document = {"k": "line", "f": path, "o": ends[path], "t": text}
            cut = draw(st.booleans())
            if cut:
                document["cut"] = True
            update = FileLine("b", path, ends[path], text, cut)
        sent.append(json.dumps(document, separators=(",", ":")).encode())
        updates.append(update)
    return sent, updates


@hostile(60)
@given(followed=valid_follows())
def test_the_agents_followed_lines_are_read(
    followed: tuple[list[bytes], list[FileLine | Heartbeat]],
) -> None:
    sent, updates = followed
    record = two_host_record()
    [node] = [node for node in record.nodes if node.host == "b"]
    follower = HostFollower.of_node(_CONFIG, record, node)
    assert [follower._parse(raw) for raw in sent] == updates
    assert (follower.garbled, follower.unknown) == (0, 0)


# --- the trainer's event lines ----------------------------------------------------------------

TEXT_LIMITS = {"message": 4096, "traceback": 32768, "path": 4096, "resumed_from": 4096}


def config_depth(value: object) -> int:
    if isinstance(value, Mapping):
        return 1 + max((config_depth(item) for item in value.values()), default=0)
    if isinstance(value, tuple):
        return 1 + max((config_depth(item) for item in value), default=0)
    assert not isinstance(value, list | dict), "config must be read-only"
    return 0


def typed_event(event: RankEvent) -> None:
    assert type(event) in EVENT_TYPES.values()
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            assert 0 <= value <= 2**63 - 1, (field.name, value)
        elif isinstance(value, float):
            assert math.isfinite(value), (field.name, value)
        elif isinstance(value, str):
            assert len(value) <= TEXT_LIMITS.get(field.name, 1024), field.name
        elif field.name == "config":
            assert isinstance(value, types.MappingProxyType) and config_depth(value) <= 9
        elif field.name == "versions":
            assert all(type(k) is str and type(v) is str for k, v in value.items())
            assert all(len(k) <= 1024 and len(v) <= 1024 for k, v in value.items())
        elif field.name == "control":
            assert type(value) is frozenset and value <= {"stop", "save"}
        elif field.name == "launch":
            assert set(value) <= {"process", "imported", "rendezvous"}
            assert all(type(at) is float and math.isfinite(at) for at in value.values())
        elif field.name == "skipped_checkpoints":
            assert type(value) is tuple and len(value) <= 64
            for skipped in value:
                assert type(skipped.path) is str and len(skipped.path) <= 4096
                assert type(skipped.reason) is str and len(skipped.reason) <= 1024
        else:
            raise AssertionError(f"{field.name}: unexpected {type(value).__name__}")
    assert event.rank < event.world_size


@hostile(300)
@given(
    lines=st.lists(
        st.one_of(EVENT_LINES, EVENT_LINES.map(lambda text: text.encode("utf-8", "surrogatepass"))),
        min_size=1,
        max_size=4,
    )
)
def test_event_lines(lines: list[str | bytes]) -> None:
    reader, progress = EventReader(), RunProgress()
    with NothingEvaluated():
        for line in lines:
            event = reader.feed(line)
            if event is None:
                continue
            typed_event(event)
            progress.apply("b", event)
        summary = progress.format_line()
    assert isinstance(summary, str)
    assert reader.events + reader.garbled <= len(lines)


# A reader that took no line for an event would pass the test above: these are the events a
# trainer writes, every field of every type, and each must be read as written.

COUNTS = st.integers(0, 2**63 - 1)
TIMES = st.floats(0, MAX_EVENT_TIME, exclude_max=True)
TEXT_LINES = st.text(
    st.characters(categories=["L", "N", "P", "S", "Zs"], include_characters="\n\t"), max_size=40
)
"""A message or a traceback: newlines and tabs are kept in them."""
EVENT_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "config": st.dictionaries(
        SHOWN_TEXT,
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(allow_nan=False, allow_infinity=False),
            SHOWN_TEXT,
        ),
        max_size=4,
    ),
    "versions": st.dictionaries(st.sampled_from(["python", "torch", "cuda", "nccl"]), SHOWN_TEXT),
    "device": st.sampled_from(["cpu", "cuda:0", "cuda:7"]),
    "backend": st.sampled_from(["gloo", "nccl"]),
    "fsdp": st.booleans(),
    "task": SHOWN_TEXT,
    "parameters": COUNTS,
    "global_batch": COUNTS,
    "steps_per_epoch": COUNTS,
    "total_steps": COUNTS,
    "start_step": COUNTS,
    "start_epoch": COUNTS,
    "resumed_from": SHOWN_TEXT,
    "exact_resume": st.booleans(),
    "skipped_checkpoints": st.lists(
        st.fixed_dictionaries({"path": SHOWN_TEXT, "reason": SHOWN_TEXT}), max_size=3
    ),
    "hostname": SHOWN_TEXT,
    "pid": COUNTS,
    "launch": st.fixed_dictionaries({}, optional=dict.fromkeys(LAUNCH_STAMPS, TIMES)),
    "control": st.lists(st.sampled_from(["stop", "save"]), unique=True),
    "step": COUNTS,
    "epoch": COUNTS,
    "loss": st.floats(allow_nan=False, allow_infinity=False),
    "lr": st.floats(allow_nan=False, allow_infinity=False),
    "samples_per_s": st.floats(0, MAX_SAMPLES_PER_S),
    "step_time_s": st.floats(0, MAX_STEP_S),
    "compute_s": st.floats(0, MAX_STEP_S),
    "cuda_allocated_mib": st.floats(0, MAX_MIB),
    "cuda_reserved_mib": st.floats(0, MAX_MIB),
    "cuda_peak_mib": st.floats(0, MAX_MIB),
    "rss_mib": st.floats(0, MAX_MIB),
    "path": SHOWN_TEXT,
    "seconds": st.floats(0, MAX_EXPECT_S),
    "bytes": COUNTS,
    "rescue": SHOWN_TEXT,
    "phase": SHOWN_TEXT.filter(bool),
    "expect_s": st.floats(0, MAX_EXPECT_S, exclude_min=True),
    "source": st.sampled_from(["SIGTERM", "SIGINT", "control/stop", "peer"]),
    "reason": st.sampled_from(["completed", "stopped"]),
    "message": TEXT_LINES,
    "traceback": TEXT_LINES,
}
"""What a trainer writes in each field of an event, by name: a field an event gains fails
:func:`valid_events` until it is here."""


def typed_value(name: str, value: Any) -> Any:
    """What the reader makes of a field's valid ``value``: itself, unless JSON has no such type."""
    if name == "control":
        return frozenset(value)
    if name == "skipped_checkpoints":
        return tuple(SkippedCheckpoint(**item) for item in value)
    return value


@st.composite
def valid_events(draw: st.DrawFn) -> tuple[dict[str, Any], RankEvent]:
    """An event as a trainer writes it, and the event it is."""
    kind = draw(st.sampled_from(sorted(EVENT_TYPES)))
    world_size = draw(st.integers(1, 4096))
    common = {
        "rank": draw(st.integers(0, world_size - 1)),
        "local_rank": draw(st.integers(0, 7)),
        "node_rank": draw(st.integers(0, 511)),
        "world_size": world_size,
        "time": draw(TIMES),
    }
    written, fields = {}, {}
    for field in dataclasses.fields(EVENT_TYPES[kind]):
        if field.name in common:
            continue
        # A field with a default may go unsaid; the others make the event.
        optional = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        if optional and not draw(weighted((3, st.just(True)), (1, st.just(False)))):
            continue
        written[field.name] = draw(EVENT_VALUES[field.name])
        fields[field.name] = typed_value(field.name, written[field.name])
    document = {"v": EVENT_VERSION, "type": kind, **common, **written}
    return document, EVENT_TYPES[kind](**common, **fields)


@hostile(100)
@given(events=st.lists(valid_events(), min_size=1, max_size=4), data=st.data())
def test_the_trainers_event_lines_are_read(
    events: list[tuple[dict[str, Any], RankEvent]], data: st.DataObject
) -> None:
    reader = EventReader()
    for document, event in events:
        line = json.dumps(document) + data.draw(st.sampled_from(["", "\n"]))
        assert reader.feed(data.draw(st.sampled_from([line, line.encode()]))) == event
    assert (reader.events, reader.garbled) == (len(events), 0)


# --- the bandwidth benchmark's output ---------------------------------------------------------

PAIR_BYTES = 4 << 20
SECONDS = st.one_of(st.floats(1e-9, 10), st.just(5e-324), FLOATS)
"""Down to the smallest float above 0, which no size divides into a finite bandwidth."""


def bench_documents(hosts: int) -> st.SearchStrategy[dict[str, Any]]:
    """The benchmark's result on a cluster of ``hosts``, as node 0 might print it."""
    return st.fixed_dictionaries(
        {
            "world_size": maybe(weighted((4, st.just(hosts)), (1, st.integers(0, 5)))),
            "backend": maybe(weighted((4, st.sampled_from(["gloo", "nccl"])), (1, st.just("mpi")))),
            "sweep": maybe(
                st.lists(
                    maybe(
                        st.tuples(
                            maybe(st.one_of(st.integers(0, 2**41), SIZES)), maybe(SECONDS)
                        ).map(list)
                    ),
                    max_size=4,
                )
            ),
            "pairs": maybe(
                st.lists(
                    maybe(
                        st.tuples(
                            maybe(st.integers(-1, hosts)),
                            maybe(st.integers(-1, hosts)),
                            maybe(SECONDS),
                        ).map(list)
                    ),
                    max_size=2 * hosts + 1,
                )
            ),
        }
    )


@st.composite
def bench_outputs(draw: st.DrawFn) -> tuple[int, str]:
    """How many hosts ran the benchmark, and what node 0 printed."""
    hosts = draw(st.integers(2, 4))
    if draw(st.integers(0, 4)) == 0:
        return hosts, draw(RAW_LINES)
    before = draw(st.lists(RAW_LINES, max_size=2))
    # Lines after the result that start like JSON and are not: the result is still found.
    after = draw(st.lists(st.one_of(RAW_LINES, st.just("{not json")), max_size=2))
    return hosts, "\n".join([*before, draw(serialised(bench_documents(hosts))), *after])


@hostile(200)
@given(printed=bench_outputs())
def test_bandwidth_outputs(printed: tuple[int, str]) -> None:
    hosts, output = printed
    names = [f"h{index}" for index in range(hosts)]
    interfaces = [f"{name}=eth0" for name in names]
    try:
        with NothingEvaluated():
            report = read_result(output, names, PAIR_BYTES, interfaces)
    except BenchError as error:
        shown_safely(str(error), one_line=True)
        return
    assert type(report) is BandwidthReport and report.backend in ("gloo", "nccl")
    assert len(report.sweep) <= 64 and len(report.pairs) <= 2 * hosts
    for row in report.sweep:
        assert type(row.size) is int and 0 <= row.size <= 1 << 40
        assert math.isfinite(row.seconds) and row.seconds > 0
    for pair in report.pairs:
        assert pair.first in names and pair.second in names
        assert math.isfinite(pair.seconds) and pair.seconds > 0
    # How `check --bandwidth` and the health screen show it.
    console = Console(file=io.StringIO(), width=120)
    console.print(*bandwidth_lines(report), bandwidth_matrix(report))


# A reader that found no result in any output would pass the test above: this is what the
# benchmark prints on node 0, after torchrun's own lines, and every row must be read back.

TORCHRUN_LINES = st.sampled_from(
    [
        "W0101 00:00:00.000000 4242 torch/distributed/run.py:793] ",
        "W0101 00:00:00.000000 4242 torch/distributed/run.py:793] *****",
        "[W socket.cpp:697] [c10d] The client socket has failed to connect.",
    ]
)
BENCH_SECONDS = st.floats(0, 60, exclude_min=True)


@st.composite
def valid_bench_outputs(draw: st.DrawFn) -> tuple[list[str], str, BandwidthReport]:
    """The hosts a benchmark ran on, what node 0 printed, and the report it says."""
    names = [f"h{index}" for index in range(draw(st.integers(2, 4)))]
    interfaces = [f"{name}=eth0" for name in names]
    backend = draw(st.sampled_from(["gloo", "nccl"]))
    sweep = draw(st.lists(st.tuples(st.integers(0, 1 << 40), BENCH_SECONDS), max_size=4))
    pair = st.tuples(*[st.integers(0, len(names) - 1)] * 2, BENCH_SECONDS)
    pairs = draw(st.lists(pair.filter(lambda pair: pair[0] != pair[1]), max_size=2 * len(names)))
    document = {
        "backend": backend,
        "world_size": len(names),
        "sweep": [list(row) for row in sweep],
        "pairs": [list(pair) for pair in pairs],
    }
    before = draw(st.lists(TORCHRUN_LINES, max_size=2))
    report = BandwidthReport(
        backend,
        tuple(interfaces),
        tuple(SweepRow(size, seconds, len(names)) for size, seconds in sweep),
        tuple(PairRow(names[a], names[b], PAIR_BYTES, seconds) for a, b, seconds in pairs),
    )
    return names, "\n".join([*before, json.dumps(document)]) + "\n", report


@hostile(60)
@given(printed=valid_bench_outputs())
def test_the_benchmarks_results_are_read(printed: tuple[list[str], str, BandwidthReport]) -> None:
    names, output, report = printed
    assert read_result(output, names, PAIR_BYTES, report.interfaces) == report


# --- the probe's document ---------------------------------------------------------------------

TEXTS = maybe(HOSTILE_TEXT)
ADDRESSES = maybe(
    st.lists(
        st.one_of(st.sampled_from(["127.0.1.1", "::1", "10.0.0.1", "fe80::1%eth0", 7]), TEXTS),
        max_size=3,
    )
)
GPU_HEALTH = st.fixed_dictionaries(
    {},
    optional={
        "pci_bus_id": maybe(
            st.one_of(st.sampled_from(["00000000:3B:00.0", "0000:3b:00", "3B:00.0"]), TEXTS)
        ),
        "nvlinks_down": maybe(st.lists(maybe(st.integers(-1, 65)), max_size=4)),
    }
    | {
        key: maybe(st.booleans())
        for key in ("retired_pages_pending", "remapped_rows_pending", "remap_failed")
    }
    | {
        key: maybe(INTS)
        for key in (
            "throttle_reasons",
            "ecc_uncorrected",
            "remapped_rows_uncorrectable",
            "pcie_gen",
            "pcie_gen_max",
            "pcie_width",
            "pcie_width_max",
            "pcie_replays",
            "nvlinks",
            "nvlink_errors",
        )
    },
)
PROBE = st.fixed_dictionaries(
    {"probe_version": weighted((9, st.just(1)), (1, SCALARS))},
    optional={
        "host": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "hostname": TEXTS,
                    "fqdn": TEXTS,
                    "addresses": ADDRESSES,
                    "resolve_error": TEXTS,
                    "error": TEXTS,
                },
            )
        ),
        "interfaces": maybe(
            st.fixed_dictionaries(
                {
                    "items": maybe(
                        st.lists(
                            maybe(
                                st.fixed_dictionaries(
                                    {
                                        "name": TEXTS,
                                        "ipv4": maybe(
                                            st.lists(
                                                maybe(
                                                    st.fixed_dictionaries(
                                                        {
                                                            "address": maybe(
                                                                st.sampled_from(
                                                                    ["10.0.0.1", "1.2.3.4/8"]
                                                                )
                                                            ),
                                                            "prefixlen": maybe(st.integers(-1, 40)),
                                                        }
                                                    )
                                                ),
                                                max_size=2,
                                            )
                                        ),
                                    }
                                )
                            ),
                            max_size=2,
                        )
                    )
                }
            )
        ),
        "python": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "version": TEXTS,
                    "executable": TEXTS,
                    "is_conda": maybe(st.booleans()),
                    "conda_env": TEXTS,
                },
            )
        ),
        "torch": maybe(
            st.fixed_dictionaries(
                {"status": maybe(st.sampled_from(["ok", "missing", "timeout", "error"]))},
                optional={
                    "version": TEXTS,
                    "cuda": TEXTS,
                    "cuda_available": maybe(st.booleans()),
                    "device_count": maybe(INTS),
                    "nccl": TEXTS,
                    "gloo_available": maybe(st.booleans()),
                    "detail": TEXTS,
                    "error": TEXTS,
                    "flight_recorder": maybe(
                        st.dictionaries(
                            st.sampled_from(["buffer", "dump_on_timeout", "file"]),
                            maybe(st.sampled_from(["TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_x"])),
                        )
                    ),
                },
            )
        ),
        "gpus": maybe(
            st.fixed_dictionaries(
                {"source": maybe(st.sampled_from(["nvml", "nvidia-smi", "none"]))},
                optional={
                    "driver_version": TEXTS,
                    "cuda_driver_version": TEXTS,
                    "problem": TEXTS,
                    "devices": maybe(
                        st.one_of(
                            st.lists(
                                maybe(
                                    st.fixed_dictionaries(
                                        {"index": maybe(st.integers(-1, 65))},
                                        optional={
                                            key: maybe(INTS)
                                            for key in (
                                                "memory_total_mib",
                                                "memory_used_mib",
                                                "utilization_pct",
                                            )
                                        }
                                        | {
                                            "name": TEXTS,
                                            "uuid": TEXTS,
                                            "health": maybe(GPU_HEALTH),
                                            "processes": maybe(
                                                st.lists(
                                                    maybe(
                                                        st.fixed_dictionaries(
                                                            {"pid": maybe(PIDS), "name": TEXTS},
                                                            optional={
                                                                "used_memory_mib": maybe(INTS)
                                                            },
                                                        )
                                                    ),
                                                    max_size=2,
                                                )
                                            ),
                                        },
                                    )
                                ),
                                max_size=2,
                            ),
                            st.builds(lambda: [{}] * 65),
                        )
                    ),
                },
            )
        ),
        "disk": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "path": TEXTS,
                    "checked_path": TEXTS,
                    "free_bytes": maybe(INTS),
                    "total_bytes": maybe(INTS),
                },
            )
        ),
        "workdir": maybe(
            st.fixed_dictionaries(
                {
                    "path": maybe(st.sampled_from(["/home/u/ddptui-runs", "relative"])),
                    "uid": maybe(INTS),
                    "exists": maybe(st.booleans()),
                    "entries": maybe(
                        st.lists(
                            maybe(
                                st.fixed_dictionaries(
                                    {
                                        "path": maybe(st.sampled_from(["/", "/home", "x"])),
                                        "uid": maybe(INTS),
                                        "gid": maybe(INTS),
                                        "mode": maybe(
                                            st.sampled_from([0o40755, 0o41777, 0o120777, 0o100644])
                                        ),
                                    }
                                )
                            ),
                            max_size=3,
                        )
                    ),
                },
                optional={
                    "target": maybe(st.integers(-1, 3)),
                    "made": maybe(st.lists(maybe(st.integers(-1, 3)), max_size=3)),
                    "private_gid": maybe(st.one_of(st.none(), INTS)),
                    "error": TEXTS,
                },
            )
        ),
        "system": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "cpu_count": maybe(INTS),
                    "memory_total_bytes": maybe(INTS),
                    "memory_available_bytes": maybe(INTS),
                },
            )
        ),
        "packages": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "pip": maybe(st.dictionaries(HOSTILE_TEXT, TEXTS, max_size=3)),
                    "conda": maybe(st.dictionaries(HOSTILE_TEXT, TEXTS, max_size=3)),
                },
            )
        ),
        "port": maybe(
            st.fixed_dictionaries(
                {"port": maybe(INTS)},
                optional={"in_use": maybe(st.booleans()), "detail": TEXTS, "error": TEXTS},
            )
        ),
        "master": maybe(
            st.fixed_dictionaries({"name": TEXTS, "addresses": ADDRESSES, "error": TEXTS})
        ),
        "kernel_log": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "readable": maybe(st.booleans()),
                    "restricted": maybe(st.booleans()),
                    "why": TEXTS,
                    "error": TEXTS,
                    "xid_lines": maybe(st.lists(maybe(XID_TEXTS), max_size=3)),
                    "xid_count": maybe(INTS),
                },
            )
        ),
        "workdir_id": maybe(
            st.fixed_dictionaries(
                {
                    "id": maybe(st.one_of(st.just("0123456789abcdef" * 2), HOSTILE_TEXT)),
                    "inode": maybe(INTS),
                }
            )
        ),
        "time": maybe(st.one_of(FLOATS, INTS)),
    },
)


@st.composite
def probe_outputs(draw: st.DrawFn) -> str:
    banners = draw(st.lists(RAW_LINES, max_size=2))
    end = draw(st.sampled_from(["", "\n", "\r\n"]))
    return "\n".join([*banners, draw(serialised(PROBE))]) + end


@hostile(200)
@given(output=weighted((9, probe_outputs()), (1, RAW_LINES)))
def test_probe_outputs(output: str) -> None:
    try:
        with NothingEvaluated():
            facts = parse_facts(output)
    except ProbeError as error:
        shown_safely(str(error), one_line=False)
        return
    assert type(facts) is HostFacts
    for name in ("cpu_count", "memory_total_bytes", "memory_available_bytes"):
        value = getattr(facts, name)
        assert value is NA or type(value) is int
    assert facts.time is NA or (type(facts.time) is float and math.isfinite(facts.time))
    assert len(facts.gpus.devices) <= 64
    for gpu in facts.gpus.devices:
        assert type(gpu.index) is int and 0 <= gpu.index < 64
    assert isinstance(facts.loopback_addresses, tuple)
    shown_safely(facts.kernel_log.why, one_line=True, limit=300)
    for xid in facts.kernel_log.xids:
        shown_safely(xid.text, one_line=True, limit=200)
    # `check --json` prints every fact: it must be JSON, and finite.
    json.dumps(facts.to_json(), allow_nan=False)


# A parser that refused every document would pass the test above: these are what the probe
# prints on a host where every section could be read, and each fact must be read back.

PATHS = st.lists(
    st.text(string.ascii_lowercase + string.digits + "_.-", min_size=1, max_size=8), max_size=3
).map(lambda names: "/" + "/".join(names))
UIDS = st.integers(0, 2**32 - 1)
SMALL_COUNTS = st.integers(0, 2**40)
MAYBE_TEXT = st.one_of(st.none(), SHOWN_TEXT)
"""A name the probe may have found none of (an FQDN, a CUDA build, a conda env)."""


@st.composite
def valid_gpu_health(draw: st.DrawFn) -> tuple[dict[str, Any], GpuHealth]:
    """One GPU's health counters as the probe reads them from NVML, and the health they say."""
    bus_id, slot = draw(pci_bus_ids())
    links = draw(st.integers(0, 18))
    down = draw(st.lists(st.integers(0, max(links - 1, 0)), max_size=links, unique=True))
    counters = {
        key: draw(SMALL_COUNTS)
        for key in (
            "throttle_reasons",
            "ecc_uncorrected",
            "remapped_rows_uncorrectable",
            "pcie_replays",
            "nvlink_errors",
        )
    }
    links_of = {
        "pcie_gen": draw(st.integers(1, 6)),
        "pcie_gen_max": draw(st.integers(1, 6)),
        "pcie_width": draw(st.integers(1, 16)),
        "pcie_width_max": draw(st.integers(1, 16)),
        "nvlinks": links,
    }
    flags = {
        key: draw(st.booleans())
        for key in ("retired_pages_pending", "remapped_rows_pending", "remap_failed")
    }
    document = {"pci_bus_id": bus_id, **counters, **links_of, **flags, "nvlinks_down": down}
    return document, GpuHealth(
        pci_bus_id=slot, **counters, **links_of, **flags, nvlinks_down=tuple(sorted(down))
    )


@st.composite
def valid_gpus(draw: st.DrawFn) -> tuple[dict[str, Any], GpuInventory]:
    """The probe's GPU section, from NVML, nvidia-smi or neither, and the inventory it says."""
    source = draw(st.sampled_from(["nvml", "nvidia-smi", "none"]))
    problem = draw(SHOWN_TEXT)
    if source == "none":
        return {"source": source, "problem": problem}, GpuInventory(problem=problem)
    devices, facts = [], []
    for index in draw(st.lists(st.integers(0, MAX_GPUS - 1), unique=True, max_size=3)):
        processes = draw(
            st.lists(
                st.tuples(st.integers(0, 2**22), SHOWN_TEXT, st.integers(0, 2**30)), max_size=2
            )
        )
        health, health_facts = draw(valid_gpu_health())
        device = {
            "index": index,
            "uuid": draw(SHOWN_TEXT),
            "name": draw(SHOWN_TEXT),
            "memory_total_mib": draw(st.integers(0, 2**30)),
            "memory_used_mib": draw(st.integers(0, 2**30)),
            "utilization_pct": draw(st.integers(0, 100)),
            "processes": [
                {"pid": pid, "name": name, "used_memory_mib": used} for pid, name, used in processes
            ],
            "health": health,
        }
        devices.append(device)
        facts.append(
            GpuFacts(
                **{
                    key: device[key]
                    for key in (
                        "index",
                        "uuid",
                        "name",
                        "memory_total_mib",
                        "memory_used_mib",
                        "utilization_pct",
                    )
                },
                processes=tuple(GpuProcess(*process) for process in processes),
                health=health_facts,
            )
        )
    versions = {key: draw(SHOWN_TEXT) for key in ("driver_version", "cuda_driver_version")}
    document = {"source": source, **versions, "devices": devices, "problem": problem}
    return document, GpuInventory(source, **versions, devices=tuple(facts), problem=problem)


@st.composite
def valid_torch(draw: st.DrawFn) -> tuple[dict[str, Any], TorchFacts]:
    """What the probe found of torch, imported or not, and the facts it says."""
    status = draw(st.sampled_from(["ok", "missing", "timeout", "error"]))
    if status != "ok":
        detail = draw(SHOWN_TEXT.filter(bool))
        return {"status": status, "detail": detail}, TorchFacts(status=status, detail=detail)
    document = {
        "status": status,
        "version": draw(SHOWN_TEXT),
        "cuda": draw(MAYBE_TEXT),
        "cuda_available": draw(st.booleans()),
        "device_count": draw(st.integers(0, 64)),
        "nccl": draw(SHOWN_TEXT),
        "gloo_available": draw(st.booleans()),
        "flight_recorder": draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "buffer": st.just("TORCH_NCCL_TRACE_BUFFER_SIZE"),
                    "dump_on_timeout": st.just("TORCH_NCCL_DUMP_ON_TIMEOUT"),
                    "file": st.just("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
                },
            )
        ),
    }
    return document, TorchFacts(
        status=status,
        version=document["version"],
        cuda_build=document["cuda"],
        cuda_available=document["cuda_available"],
        device_count=document["device_count"],
        nccl_version=document["nccl"],
        gloo_available=document["gloo_available"],
        flight_recorder=document["flight_recorder"],
    )


@st.composite
def valid_kernel_logs(draw: st.DrawFn) -> tuple[dict[str, Any], KernelLog]:
    """The kernel log's Xid lines as the probe read them, or why it could not, and the log."""
    if not draw(st.booleans()):
        why, restricted = draw(SHOWN_TEXT), draw(st.booleans())
        document = {"readable": False, "why": why, "restricted": restricted}
        return document, KernelLog(readable=False, why=why, restricted=restricted)
    events = draw(
        st.lists(
            st.tuples(pci_bus_ids(), st.integers(0, 9999), SHOWN_TEXT.map(str.strip)), max_size=3
        )
    )
    lines = [
        f"[{index}.0] NVRM: Xid (PCI:{slot}): {code}, {text}"
        for index, ((_, slot), code, text) in enumerate(events)
    ]
    # The probe sends the newest lines and counts them all.
    counted = len(lines) + draw(st.integers(0, 100))
    document = {"readable": True, "xid_lines": lines, "xid_count": counted}
    xids = tuple(XidEvent(slot, code, text) for (_, slot), code, text in events)
    return document, KernelLog(readable=True, xids=xids, xid_count=counted)


@st.composite
def valid_workdirs(draw: st.DrawFn) -> tuple[dict[str, Any], WorkdirSafety]:
    """The way to the workdir as the probe walks it, and its safety facts."""
    rows = draw(
        st.lists(
            st.tuples(
                PATHS,
                UIDS,
                UIDS,
                st.sampled_from([stat.S_IFDIR, stat.S_IFLNK, stat.S_IFREG]),
                st.integers(0, 0o7777),
            ),
            min_size=1,
            max_size=4,
        )
    )
    entries = tuple(
        PathEntry(
            path,
            uid,
            gid,
            mode,
            "directory" if kind == stat.S_IFDIR else "link" if kind == stat.S_IFLNK else "other",
        )
        for path, uid, gid, kind, mode in rows
    )
    target = draw(st.one_of(st.none(), st.integers(0, len(rows) - 1)))
    made = draw(st.lists(st.integers(0, len(rows) - 1), max_size=len(rows)))
    document = {
        "path": draw(PATHS),
        "uid": draw(UIDS),
        "private_gid": draw(st.one_of(st.none(), UIDS)),
        "exists": draw(st.booleans()),
        "target": target,
        "entries": [
            {"path": path, "uid": uid, "gid": gid, "mode": kind | mode}
            for path, uid, gid, kind, mode in rows
        ],
        "made": made,
    }
    return document, WorkdirSafety(
        path=document["path"],
        uid=document["uid"],
        private_gid=document["private_gid"],
        exists=document["exists"],
        entries=entries,
        target=None if target is None else entries[target],
        made=tuple(entries[at] for at in made),
    )


@st.composite
def valid_probes(draw: st.DrawFn) -> tuple[str, HostFacts]:
    """What the probe prints (after a login script's lines), and the facts it says."""
    resolved = draw(st.lists(st.ip_addresses(), max_size=3))
    host = {
        "hostname": draw(SHOWN_TEXT),
        "fqdn": draw(MAYBE_TEXT),
        "addresses": [str(address) for address in resolved],
        "resolve_error": draw(SHOWN_TEXT),
    }
    interfaces = draw(
        st.lists(
            st.tuples(
                SHOWN_TEXT,
                st.lists(st.tuples(st.ip_addresses(v=4), st.integers(0, 32)), max_size=2),
            ),
            max_size=3,
        )
    )
    python = {
        "version": draw(SHOWN_TEXT),
        "executable": draw(PATHS),
        "is_conda": draw(st.booleans()),
        "conda_env": draw(MAYBE_TEXT),
    }
    torch, torch_facts = draw(valid_torch())
    gpus, gpu_facts = draw(valid_gpus())
    kernel_log, kernel_facts = draw(valid_kernel_logs())
    disk = {
        "path": draw(PATHS),
        "checked_path": draw(PATHS),
        "free_bytes": draw(SMALL_COUNTS),
        "total_bytes": draw(SMALL_COUNTS),
    }
    workdir, workdir_facts = draw(valid_workdirs())
    identity = {
        "id": draw(st.binary(min_size=16, max_size=16)).hex(),
        "inode": draw(st.integers(0, 2**64 - 1)),
    }
    system = {
        key: draw(SMALL_COUNTS)
        for key in ("cpu_count", "memory_total_bytes", "memory_available_bytes")
    }
    pip = draw(st.dictionaries(SHOWN_TEXT, SHOWN_TEXT, max_size=3))
    # None: no conda on the host.
    conda = draw(st.one_of(st.none(), st.dictionaries(SHOWN_TEXT, SHOWN_TEXT, max_size=3)))
    # The port and the master are looked at only when a check names them.
    port = draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"port": st.integers(1, 65535), "in_use": st.booleans(), "detail": SHOWN_TEXT}
            ),
        )
    )
    master = draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "name": SHOWN_TEXT,
                    "addresses": st.lists(st.ip_addresses(), max_size=2).map(
                        lambda found: [str(a) for a in found]
                    ),
                    "error": SHOWN_TEXT,
                }
            ),
        )
    )
    stamp = draw(st.floats(0, 4e9))
    document = {
        "probe_version": PROBE_VERSION,
        "host": host,
        "interfaces": {
            "source": "ioctl",
            "items": [
                {
                    "name": name,
                    "ipv4": [
                        {"address": str(address), "prefixlen": length} for address, length in ipv4
                    ],
                }
                for name, ipv4 in interfaces
            ],
        },
        "python": python,
        "torch": torch,
        "gpus": gpus,
        "kernel_log": kernel_log,
        "disk": disk,
        "workdir": workdir,
        "workdir_id": identity,
        "system": system,
        "packages": {"pip": pip, "conda": conda},
        "port": port,
        "time": stamp,
    }
    if master is not None:
        document["master"] = master
    facts = HostFacts(
        hostname=host["hostname"],
        fqdn=NA if host["fqdn"] is None else host["fqdn"],
        resolved=tuple(resolved),
        resolve_error=host["resolve_error"],
        interfaces=tuple(
            Interface(
                name,
                tuple(ipaddress.IPv4Interface(f"{address}/{length}") for address, length in ipv4),
            )
            for name, ipv4 in interfaces
        ),
        python=PythonFacts(
            python["version"], python["executable"], python["is_conda"], python["conda_env"]
        ),
        torch=torch_facts,
        gpus=gpu_facts,
        kernel_log=kernel_facts,
        disk=DiskFacts(**disk),
        workdir=workdir_facts,
        workdir_identity=f"{identity['id']}/{identity['inode']}",
        **system,
        pip_packages=pip,
        conda_packages=conda,
        port=None if port is None else PortFacts(**port),
        master=None
        if master is None
        else MasterResolution(
            master["name"],
            tuple(ipaddress.ip_address(a) for a in master["addresses"]),
            master["error"],
        ),
        time=stamp,
    )
    banners = draw(
        st.lists(
            st.sampled_from(["Welcome to ddpa2!", "Last login: Mon Jan  1 00:00:00 2099"]),
            max_size=2,
        )
    )
    return "\n".join([*banners, json.dumps(document)]) + "\n", facts


@hostile(60)
@given(probe=valid_probes())
def test_the_probes_documents_are_read(probe: tuple[str, HostFacts]) -> None:
    output, facts = probe
    assert parse_facts(output) == facts


# --- what the properties found ----------------------------------------------------------------


@pytest.mark.parametrize("missing", ["[[]]", "[{}]"])
def test_a_stage_answer_listing_a_list_as_missing_is_garbage(missing: str) -> None:
    remote = AnsweringHost({"stage": CommandResult(0, '{"missing":' + missing + "}", "")})
    with pytest.raises(GarbledAnswer):
        asyncio.run(code_upload.send(remote, HOST, "/cache", RUN_DIR, TREE, RECORD_TEXT))


def test_a_relayed_heartbeat_keeps_its_gpu_figures() -> None:
    record = two_host_record()
    follower = HostFollower.of_node(_CONFIG, record, record.nodes[1])
    sample = {"gpus": [{"index": "0", "memory.used": "81559", "pstate": "P0"}]}
    raw = json.dumps({"k": "hb", "time": 1.0, "groups": {"1": True}, "sample": sample})
    update = follower._parse(raw.encode())
    assert isinstance(update, Heartbeat)
    assert update.sample["gpus"] == [{"index": 0, "memory.used": 81559, "pstate": "P0"}]
    back = protocol.decode(protocol.message(update))
    assert isinstance(back, Heartbeat) and back.sample["gpus"] == update.sample["gpus"]


def test_a_host_cannot_name_its_events_file_twice() -> None:
    record = two_host_record()
    follower = HostFollower.of_node(_CONFIG, record, record.nodes[1])
    for path in ("events/rank2.jsonl", "events/rank02.jsonl", "events/rank2.jsonl\n"):
        follower._parse(json.dumps({"k": "line", "f": path, "o": 1, "t": "{}"}).encode())
    assert list(follower.offsets) == ["events/rank2.jsonl"]
