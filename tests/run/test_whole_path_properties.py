"""Whatever host b sends while it is followed, the whole path from its lines to what a person
reads holds: parsing, the run's model, the supervisor's judging, the record it writes, what
``ddptui status`` prints (words and ``--json``) and the console's rank table.

Each example is one followed attempt of the two-host record (host b runs ranks 2 and 3): the
lines arrive through the real follower into a real :class:`~ddptui.run.following.model.RunModel`,
judged the way the supervisor's tick does (:meth:`Supervising.tick` follows ``Supervisor._judge``)
into a real :class:`~ddptui.run.store.RunStore`; then the monotonic clock jumps past the hang
window and the run is judged once more, and shown. Nothing may raise on the way; nothing a
terminal acts on (escapes, C1 controls, bidi marks) nor a lone surrogate may reach a printed
line, the ``--json`` document (but a rank's last line of output, documented raw, which is still
valid Unicode) or the record's file; the record reads back and takes the next change; each
example keeps to the ``hostile()`` deadline, and what it keeps in memory is bounded.

Most examples are stories (:func:`stories`): well-formed v1 events of the right ranks, from a
start through steps (enough of them, some ranks slower, for stragglers to be named) to a
phase, an error or the end, with a few fields made hostile, so that the hostile values reach
the parts that judge and show them instead of being turned away as garbage at the door. The
rest is the followed-lines strategy of the hostile answers tests, as it comes.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import resource
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from ddptui.present.status import status_lines
from ddptui.remote.failures import remote_reason
from ddptui.run import protocol
from ddptui.run.following.events import (
    MAX_EVENT_TIME,
    MAX_EXPECT_S,
    MAX_MESSAGE_CHARS,
    MAX_PHASE_CHARS,
    MAX_STEP_S,
)
from ddptui.run.following.files import HostFollower
from ddptui.run.following.model import RunModel
from ddptui.run.following.progress import LOSS_POINTS, STRAGGLER_EVENTS
from ddptui.run.following.state import LOG_LINE_CHARS, LOG_TAIL_LINES, Hang, Steps
from ddptui.run.following.updates import FileLine, Heartbeat, HostSilent, Update
from ddptui.run.record import RunRecord, RunState
from ddptui.run.store import RunStore
from ddptui.run.supervisor import judging
from ddptui.run.supervisor.stragglers import StragglerNotes
from ddptui.run.supervisor.timing import LaunchTiming
from ddptui.run.view import RunView
from ddptui.ui.widgets.rank_table import _flat_rows, _grouped_rows, _Marks
from tests.run.agent.test_answer_properties import _CONFIG, FOLLOWED_RAW, Ticking, followed_update
from tests.run.bed import two_host_record
from tests.run.hostile_answers import (
    FLOATS,
    HOSTILE_TEXT,
    INTS,
    SPECIAL,
    NothingEvaluated,
    Raw,
    hostile,
    raw_controls,
    shown_safely,
    weighted,
)

HEAD_WALL = 1_750_000_000.0
"""The head node's wall clock as an example starts (2025): fixed, so examples repeat."""
HOSTS_TOML = '[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n'
JUDGE_EVERY = 8
"""Updates between two ticks of the supervisor: it judges twice a second while lines arrive,
so stragglers are named, and hangs judged, part-way through a story too."""
STORY_OFFSET = 2 * 10**9
"""Where a story's offsets start: past the offsets of the noise lines (at most 10**9 but for
a few), so a noise line seldom makes a story's later lines read as replays."""
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
"""Where the examples' run stores go: memory where there is some, as the store syncs every
change of a record to its disk."""
MEMORY_GROWTH = 64 << 20
"""How much one example may raise the process's peak RSS: its lines are a few megabytes at
most, and what the model keeps of them is capped by the plan (:func:`within_caps`). Over the
whole test, Hypothesis itself keeps some 90 KB of every example, which would hide a leak
bounded by a total."""

# --- what a host may put in an event's fields -------------------------------------------------

TIMES = weighted(
    (
        4,
        st.sampled_from(
            [
                1e17,
                -1e17,
                0,
                0.0,
                -0.0,
                5e-324,
                -1,
                2**32 - 1,
                2**32,
                2**63,
                1e308,
                -1e308,
                HEAD_WALL + 3600,
                HEAD_WALL + 10 * 365 * 86400,
                HEAD_WALL - 60 * 365 * 86400,
            ]
        ),
    ),
    (1, st.sampled_from([Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999")])),
    (1, st.sampled_from(["nan", "1e17", "", True, None])),
    (1, FLOATS),
)
"""Times no clock gives (a year past 2106 or before 1970, past what ``time.localtime`` takes),
times a while ahead of the head node's clock, and what is no number at all."""
STORY_STARTS = weighted(
    (5, st.floats(HEAD_WALL - 600, HEAD_WALL + 60)),
    (
        3,
        st.sampled_from(
            [1e17, -1e17, 0.0, 5e-324, 2.0**32 - 100, 1e308, HEAD_WALL + 10 * 365 * 86400]
        ),
    ),
)
"""When a story's ranks start, on their clock: every later time of theirs follows on."""
DURATIONS = weighted(
    (
        4,
        st.sampled_from(
            [
                1e308,
                1e17,
                1e6,
                86400.0,
                86400.5,
                3600.0,
                3600.5,
                -1,
                -1e308,
                0,
                -0.0,
                5e-324,
                1e-300,
                2**63,
                2**1100,
                True,
            ]
        ),
    ),
    (1, st.sampled_from([Raw("NaN"), Raw("Infinity"), Raw("1e999"), "1e17", None])),
    (1, FLOATS),
)
"""Seconds: a day and an hour (the caps) and just past them, far past, below zero, none."""
PHASES = weighted(
    (
        4,
        st.sampled_from(
            [
                "\x1b]52;c;b3duZWQ=\x07",
                "\x1b[2J\x1b[H",
                "\x1b]0;owned\x07eval",
                "\x9b31mcheckpoint",
                "\ud800",
                "save \udfff",
                "eval\n[rank0]: RuntimeError: CUDA error: fake",
                "save\r\x1b[Kdone",
                "\u202eevil",
                "\x00",
                "\x85\u2028",
                "[bold red]markup[/]",
                "x" * (MAX_PHASE_CHARS + 1),
                "é" * (MAX_PHASE_CHARS + 1),
                "😀" * (MAX_PHASE_CHARS + 1),
                "\x1b" * (MAX_PHASE_CHARS + 1),
            ]
        ),
    ),
    (2, HOSTILE_TEXT),
    (1, st.sampled_from(["checkpoint", "eval", "train"])),
)
"""What a rank may call its phase: the hang's words name it."""
TEXTS = st.one_of(HOSTILE_TEXT, PHASES, st.sampled_from(SPECIAL))
COUNTS = st.one_of(INTS, st.sampled_from([2**63 - 1, 2**64, -1]))
NUMBERS = st.one_of(FLOATS, DURATIONS)

KINDS: dict[str, dict[str, tuple[str, ...]]] = {
    "time": {
        "start": ("time", "launch.process", "launch.imported", "launch.rendezvous"),
        "step": ("time",),
        "phase": ("time",),
        "checkpoint": ("time",),
        "error": ("time",),
        "done": ("time",),
        "stop_requested": ("time",),
    },
    "duration": {
        "step": ("compute_s", "step_time_s"),
        "phase": ("expect_s",),
        "checkpoint": ("seconds",),
    },
    "text": {
        "start": ("resumed_from", "hostname", "device", "backend", "task"),
        "phase": ("phase",),
        "error": ("message", "traceback"),
        "done": ("reason",),
        "stop_requested": ("source",),
        "checkpoint": ("path",),
    },
    "count": {
        "start": ("start_step", "total_steps"),
        "step": ("step", "epoch"),
        "done": ("step",),
    },
    "number": {
        "step": ("loss", "samples_per_s", "rss_mib", "cuda_peak_mib", "lr"),
    },
}
"""For each kind of hostile value, the fields of each event type it may go in."""
VALUES = {
    "time": TIMES,
    "duration": DURATIONS,
    "text": TEXTS,
    "count": COUNTS,
    "number": NUMBERS,
}


@dataclasses.dataclass(frozen=True)
class Injection:
    """One hostile value put into one field of a story's event: the ``at``-th event (modulo
    their number) that has a field of ``kind``, in its ``which``-th such field."""

    at: int
    kind: str
    which: int
    value: Any


INJECTIONS = st.one_of(
    *(
        st.builds(Injection, st.integers(0, 99), st.just(kind), st.integers(0, 4), values)
        for kind, values in VALUES.items()
    )
)


@dataclasses.dataclass(frozen=True)
class Ending:
    """How one rank's story ends: its last event after its steps, or none."""

    type: str | None
    phase: str = "checkpoint"
    expect_s: Any = None
    text: str = ""


ENDINGS = weighted(
    (
        6,
        st.builds(
            Ending,
            st.just("phase"),
            PHASES,
            weighted((2, st.none()), (2, st.sampled_from([30.0, 900.0])), (3, DURATIONS)),
        ),
    ),
    (3, st.builds(Ending, st.none())),
    (1, st.builds(Ending, st.just("checkpoint"), text=TEXTS)),
    (1, st.builds(Ending, st.just("error"), text=TEXTS)),
    (1, st.builds(Ending, st.just("done"), text=st.sampled_from(["completed", "stopped"]))),
    (1, st.builds(Ending, st.just("stop_requested"), text=TEXTS)),
)
PROCESSES = st.tuples(st.sampled_from(["R", "S", "D", "T", "Z"]), st.sampled_from([0.0, 2.0, 99.0]))
"""A rank's process as the agent's heartbeat samples it: state letter and CPU."""


@dataclasses.dataclass(frozen=True)
class Story:
    """What host b sends in one followed attempt, drawn as its few choices (Hypothesis shows
    these, not the hundred lines they make): see :meth:`lines`."""

    steps: Steps
    start: float
    every_s: float
    """Seconds between a rank's step events, on its clock."""
    step_counts: tuple[int, int]
    slower: float
    """How much more work per step rank 3 does than rank 2: past 1.1, it is a straggler."""
    endings: tuple[Ending, Ending]
    injections: tuple[Injection, ...]
    ascii: bool
    """Whether the lines escape what is not ASCII (else lone surrogates travel raw)."""
    processes: tuple[tuple[str, float], tuple[str, float]]
    silent: str | None
    """The reason the follower gives when host b goes silent at the end (what its agent's
    channel said of its end), or None while it answers."""
    output: tuple[tuple[int, str], ...]
    """Lines the ranks print last (local rank, text), to their stdout logs."""
    exit: str | None
    """What host b's torchrun exit file says at the end, if it is written."""
    noise: tuple[tuple[int, bytes], ...]
    """Followed lines of any shape, each put in at a position."""

    def events(self) -> list[tuple[int, dict[str, Any]]]:
        """Each rank's events in order, as (rank, document), with the injections in."""
        events: list[tuple[int, dict[str, Any]]] = []
        for rank in (2, 3):
            events.append((rank, self._event("start", rank, self.start, start_step=0)))
            events[-1][1].update(
                launch={"process": self.start - 9, "imported": self.start - 5},
                hostname="hostb",
                resumed_from="ckpt/step-0.pt",
                control=["stop", "save"],
            )
        for index in range(max(self.step_counts)):
            for rank, count in zip((2, 3), self.step_counts, strict=True):
                if index >= count:
                    continue
                work = 0.1 * (self.slower if rank == 3 else 1.0)
                at = self.start + (index + 1) * self.every_s
                step = self._event(
                    "step", rank, at, step=index + 1, epoch=0, loss=2.0 / (index + 1)
                )
                step.update(compute_s=work, step_time_s=0.1 * self.slower, samples_per_s=320.0)
                events.append((rank, step))
        for rank, ending, count in zip((2, 3), self.endings, self.step_counts, strict=True):
            at = self.start + (count + 1) * self.every_s
            if ending.type == "phase":
                fields = {"phase": ending.phase, "expect_s": ending.expect_s}
            elif ending.type == "checkpoint":
                fields = {"path": ending.text, "step": count, "seconds": 2.0}
            elif ending.type == "error":
                fields = {"message": ending.text, "traceback": ending.text}
            elif ending.type == "done":
                fields = {"step": count, "reason": ending.text}
            elif ending.type == "stop_requested":
                fields = {"step": count, "source": ending.text}
            else:
                continue
            events.append((rank, self._event(ending.type, rank, at, **fields)))
        for injection in self.injections:
            _inject(events, injection)
        return events

    @staticmethod
    def _event(kind: str, rank: int, at: float, **fields: Any) -> dict[str, Any]:
        common = {"v": 1, "type": kind, "rank": rank, "local_rank": rank - 2, "node_rank": 1}
        return {**common, "world_size": 4, "time": at, **fields}

    def lines(self) -> list[bytes | Update]:
        """What arrives from host b, in order: its agent's documents (events files' lines,
        heartbeats, noise) as bytes, and the follower's own word that it went silent."""
        offsets: dict[str, int] = {}

        def line(path: str, text: str) -> bytes:
            offsets[path] = offsets.get(path, STORY_OFFSET) + len(text) + 1
            document = {"k": "line", "f": path, "o": offsets[path], "t": text}
            return dumps(document, self.ascii).encode("utf-8", "surrogatepass")

        arrived: list[bytes | Update] = []
        for index, (rank, document) in enumerate(self.events()):
            if index % 10 == 0:
                arrived.append(self._beat(index))
            arrived.append(line(f"events/rank{rank}.jsonl", dumps(document, self.ascii)))
        for at, raw in self.noise:
            arrived.insert(at % (len(arrived) + 1), raw)
        for local, text in self.output:
            arrived.append(line(f"logs/attempt-1/x/attempt_0/{local}/stdout.log", text))
        if self.exit is not None:
            arrived.append(line("node/attempt-1.exit", self.exit))
        if self.silent is not None:
            arrived.append(HostSilent("b", 13.0, self.silent))
        else:
            arrived.append(self._beat(len(arrived)))
        return arrived

    def _beat(self, index: int) -> bytes:
        ranks = {
            str(rank): {"state": state, "cpu_pct": cpu}
            for rank, (state, cpu) in zip((2, 3), self.processes, strict=True)
        }
        sample = {"procs": 2, "cpu_pct": 50.0, "rss_mib": 900.0, "ranks": ranks}
        beat = {"k": "hb", "time": HEAD_WALL + index, "groups": {"1": True}, "sample": sample}
        return dumps(beat, True).encode()


def dumps(document: dict[str, Any], ascii: bool) -> str:
    """:func:`~tests.run.hostile_answers.to_json` of a document, by the json module: a story
    writes a hundred of them, of plain values but for a few :class:`Raw` hostile ones."""
    raws: list[str] = []

    def held(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value.text)
            return f"\x00raw{len(raws) - 1}\x00"
        if isinstance(value, dict):
            return {key: held(item) for key, item in value.items()}
        return value

    text = json.dumps(held(document), ensure_ascii=ascii, separators=(",", ":"))
    for index, raw in enumerate(raws):
        text = text.replace(f'"\\u0000raw{index}\\u0000"', raw)
    return text


def _inject(events: list[tuple[int, dict[str, Any]]], injection: Injection) -> None:
    fields = KINDS[injection.kind]
    holding = [document for _, document in events if document["type"] in fields]
    if not holding:
        return
    document = holding[injection.at % len(holding)]
    names = fields[document["type"]]
    name = names[injection.which % len(names)]
    if name.startswith("launch."):
        document["launch"][name.removeprefix("launch.")] = injection.value
    else:
        document[name] = injection.value


def stories() -> st.SearchStrategy[Story]:
    common = {
        "start": STORY_STARTS,
        "every_s": st.sampled_from([2.0, 3.0]),
        "endings": st.tuples(ENDINGS, ENDINGS),
        "injections": st.lists(INJECTIONS, max_size=4).map(tuple),
        "ascii": weighted((3, st.just(True)), (1, st.just(False))),
        "processes": st.tuples(PROCESSES, PROCESSES),
        "silent": weighted((5, st.none()), (1, HOSTILE_TEXT.map(remote_reason))),
        "output": st.lists(st.tuples(st.sampled_from([0, 1]), TEXTS), max_size=2).map(tuple),
        "exit": weighted((6, st.none()), (1, st.sampled_from(["0", "1", "137", "255"]))),
        "noise": st.lists(st.tuples(st.integers(0, 200), FOLLOWED_RAW), max_size=2).map(tuple),
    }
    few = st.integers(0, 5)
    many = st.integers(30, 36)
    short = st.builds(
        Story,
        # Every step event as a console reads them, else as the supervisor and a follower do.
        steps=st.sampled_from(list(Steps)),
        step_counts=st.tuples(weighted((3, few), (1, many)), weighted((3, few), (1, many))),
        slower=st.sampled_from([1.0, 1.5, 3.0]),
        **common,
    )
    # Enough steps for rank 3 to be named a straggler, read as the console reads them: 20
    # step events to judge its pace by, then 20 s of its clock slower than the others.
    straggling = st.builds(
        Story,
        steps=st.just(Steps.EVERY),
        step_counts=st.tuples(many, many),
        slower=st.sampled_from([1.5, 3.0]),
        **common,
    )
    return weighted((3, short), (1, straggling))


# --- the supervisor's side --------------------------------------------------------------------


class Supervising:
    """What the supervisor does with a followed attempt, without its event loop: the model
    fed the follower's updates, and each tick judged as ``Supervisor._judge`` does, every
    change to the record made through a real store."""

    def __init__(self, root: Path, steps: Steps) -> None:
        self.clock, self.wall = Ticking(1000.0), Ticking(HEAD_WALL)
        record = two_host_record()
        for state in (RunState.STAGING, RunState.STARTING, RunState.RUNNING):
            record.transition(state, f"{state.value} as planned", now=HEAD_WALL - 60)
        self.store = RunStore(root)
        self.store.create(record, HOSTS_TOML)
        # The record keeps the attempt's launch timeline from its start on: the ranks' own
        # stamps (their start events) join it as they arrive.
        self.timing = LaunchTiming(self.wall)
        self.timing.begin(1)
        self.timing.started(record.nodes)
        self.record = self.store.update(record.id, self.timing.applied(lambda record: None))
        [node] = [node for node in self.record.nodes if node.host == "b"]
        self.follower = HostFollower.of_node(_CONFIG, self.record, node)
        self.model = RunModel(self.record, clock=self.clock, wall=self.wall, steps=steps)
        self.stragglers = StragglerNotes()
        self.hang: Hang | None = None
        self.following = True
        """Until the attempt is concluded (or its hang is being stopped): then the supervisor
        judges it no more."""
        self.said: list[str] = []
        """What the supervisor said on the way (its log, its viewers' lines)."""

    def receive(self, arrived: bytes | Update) -> None:
        if isinstance(arrived, bytes):
            update = self.follower._parse(arrived)
            if update is None:
                return
            assert isinstance(update, FileLine | Heartbeat), update
            followed_update(update)
        else:
            update = arrived
        self.model.apply(update)

    def change(self, change: Callable[[RunRecord], None]) -> None:
        self.record = self.store.update(self.record.id, self.timing.applied(change))
        self.model.record = self.record

    def tick(self) -> None:
        """``Supervisor._judge``, each part of it let raise: a part the supervisor sets aside
        is a fault, not what it should do with a host's lines."""
        model = self.model
        model.read_steps()
        if self.timing.observe(self.record, model):
            self.change(lambda record: None)
            summary = self.timing.summary(self.record)
            if summary is not None:
                self.said.append(f"launch: {summary}")
        if not self.following:
            return
        notes = self.stragglers.changes(model.attempt, model.progress)
        if notes:
            self.said += notes
            self.change(lambda record: record.add_to_detail(notes))
        decision = judging.judge(model, self.record.state, _CONFIG.job)
        event(f"judged: {type(decision).__name__}")
        if isinstance(decision, judging.Conclude):
            verdict = decision.verdict
            self.said.append(verdict.detail)
            self.change(
                lambda record: record.end_attempt(verdict.state, verdict.detail, now=self.wall())
            )
            model.conclude(self.record.state)
            self.hang, self.following = None, False
        elif isinstance(decision, judging.Hung):
            self.hang = decision.hang
            if decision.newly:
                summary = decision.hang.summary(self.wall())
                self.said.append(summary)
                self.change(
                    lambda record: record.transition(RunState.HUNG, summary, now=self.wall())
                )
            self.following = not decision.stop
        elif isinstance(decision, judging.SteppingAgain):
            self.hang = None
            self.change(
                lambda record: record.transition(
                    RunState.RUNNING, "stepping again", now=self.wall()
                )
            )
        else:
            self.hang = None

    def past_the_hang_window(self) -> None:
        """Move the monotonic clock past every window a hang is judged by, as the model has
        them now: a run that went quiet is judged hung at the next tick."""
        model = self.model
        window = max(
            judging.hang_window(model, _CONFIG.job.hang_timeout_s),
            judging.FIRST_STEP_HANG_S,
            judging.QUIET_HANG_S,
            judging.phase_window(model) or 0.0,
        )
        assert math.isfinite(window), window
        heard = [*model.stepped_at.values(), *model.phased_at.values(), *model.said_at.values()]
        self.clock.now = max([model.began, *heard]) + window + 1.0

    def judgement(self, record: RunRecord) -> Any:
        hang = self.hang if record.state is RunState.HUNG else None
        return self.model.judgement(record, hang, self.stragglers.named(self.model.attempt))


# --- what a person reads ----------------------------------------------------------------------

SURROGATE = re.compile("[\ud800-\udfff]")
RAW_FIELDS = frozenset({"last_line"})
"""``--json`` fields that carry a host's text as it wrote it, documented raw (sanitise to
show): they are still valid Unicode, but may hold what a terminal acts on."""


def safe(text: object, *, one_line: bool, limit: int | None = None) -> None:
    """:func:`~tests.run.hostile_answers.shown_safely`, checked line by line, at once for the
    printable ASCII that nearly all of it is: an example shows thousands of texts."""
    assert isinstance(text, str), repr(text)
    if limit is not None:
        assert len(text) <= limit, (len(text), limit)
    for line in (text,) if one_line else text.split("\n"):
        if not (line.isascii() and line.isprintable()):
            shown_safely(line, one_line=one_line)


def strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a JSON value (keys too), with the key it is under."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield key, name
            yield from strings(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item, key)


def rendered(lines: Sequence[Text]) -> str:
    """``lines`` as a console prints them (no terminal: the text without its styles)."""
    output = io.StringIO()
    Console(file=output, force_terminal=False, width=200).print(Text("\n").join(lines))
    return output.getvalue()


def record_file(store: RunStore, run_id: str) -> None:
    """The record's file is UTF-8 (strict), with nothing a terminal acts on in it (a person
    reads it with ``cat``; TOML's own escapes are text)."""
    data = store.files(run_id).record.read_bytes()
    safe(data.decode("utf-8"), one_line=False)


def record_texts(record: RunRecord) -> None:
    for change in record.states:
        safe(change.detail, one_line=True)
    for attempt in record.attempts:
        safe(attempt.detail, one_line=True)


def within_caps(model: RunModel) -> None:
    """What the model keeps of each rank stays within the caps documented for it."""
    for rank in model.progress.ranks:
        assert len(rank.losses) <= LOSS_POINTS and len(rank.paces) <= STRAGGLER_EVENTS
        for name in ("step_time_s", "compute_s"):
            value = getattr(rank, name)
            assert value is None or 0 <= value <= MAX_STEP_S, (name, value)
        assert rank.phase_expect_s is None or 0 < rank.phase_expect_s <= MAX_EXPECT_S, (
            rank.phase_expect_s
        )
        if rank.phase is not None:
            safe(rank.phase, one_line=True, limit=MAX_PHASE_CHARS)
        if rank.error is not None:
            safe(rank.error, one_line=False, limit=MAX_MESSAGE_CHARS)
        for name in ("started_at", "last_step_at"):
            value = getattr(rank, name)
            assert value is None or 0 <= value < MAX_EVENT_TIME, (name, value)
    for logs in model.logs.values():
        assert len(logs) <= LOG_TAIL_LINES
        assert all(len(log.text) <= LOG_LINE_CHARS for log in logs)


def shown(supervising: Supervising) -> None:
    """Everything the path shows of the run: the record as it reads back, ``status`` (its
    words and its ``--json``), the console's rank table, what the supervisor said."""
    store, model = supervising.store, supervising.model
    record = store.load(supervising.record.id)
    assert record.to_toml() == supervising.record.to_toml()
    record_file(store, record.id)
    record_texts(record)
    # Still the supervisor's to change: the next change (a hang's stacks noted…) is written.
    store.update(record.id, lambda record: record.add_to_detail(["next"]))
    assert store.load(record.id).attempt.detail.endswith("next")

    judgement = supervising.judgement(record)
    assert protocol.decode(protocol.message(protocol.Judged(judgement))) == protocol.Judged(
        judgement
    )
    if record.state.final:
        # `status` of an ended run reads its hosts: the same lines, concluded.
        model.conclude(record.state)
        view = RunView.of(record, model, model.judgement(record))
    else:
        # Of a live run it asks the supervisor for a snapshot (`Supervisor._snapshot`).
        model.read_steps()
        snapshot = RunView.of(record, model, judgement).live_document()
        reply = protocol.decode(protocol.message(protocol.Reply("1", True, "", snapshot)))
        assert isinstance(reply, protocol.Reply), "the snapshot did not read back"
        view = RunView.from_live_document(record, reply.data)

    lines = status_lines(view, now=supervising.wall())
    for line in lines:
        safe(line.plain, one_line=True)
    safe(rendered(lines), one_line=False)

    # `status --json`, as the command writes it.
    text = json.dumps(view.document(), indent=2, allow_nan=False, ensure_ascii=True)
    safe(text, one_line=False)
    document = json.loads(text)
    for key, value in strings(document):
        # A lone surrogate's escape is no character: strict decoders refuse the document.
        assert value.isascii() or not SURROGATE.search(value), (key, value[:200])
        if key not in RAW_FIELDS and not (value.isascii() and value.isprintable()):
            assert not raw_controls(value, one_line=False), (key, value[:200])

    marks = _Marks.of_judgement(judgement)
    for rows in (
        _flat_rows(model.progress.ranks, marks),
        _grouped_rows(model.progress.ranks, marks, {0, 1}),
    ):
        for row in rows.values():
            safe(row.words, one_line=True)
            for cell in row.cells:
                safe(cell.plain, one_line=True)

    for said in supervising.said:
        safe(said, one_line=True)
    for straggler in judgement.stragglers:
        assert 0 <= straggler.since < MAX_EVENT_TIME, straggler
    within_caps(model)


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def followed(arrivals: Sequence[bytes | Update], steps: Steps) -> Supervising:
    """``arrivals`` followed, judged, recorded and shown: see the module's docstring."""
    peak = peak_rss()
    with tempfile.TemporaryDirectory(prefix="ddptui-whole-path-", dir=SCRATCH) as root:
        supervising = Supervising(Path(root), steps)
        with NothingEvaluated():
            for index, arrived in enumerate(arrivals):
                supervising.receive(arrived)
                if index % JUDGE_EVERY == JUDGE_EVERY - 1:
                    supervising.tick()
            supervising.tick()
            supervising.past_the_hang_window()
            supervising.tick()
            shown(supervising)
        event(f"record: {supervising.record.state.value}")
        if supervising.stragglers.named(supervising.model.attempt):
            event("a straggler named")
    assert peak_rss() - peak < MEMORY_GROWTH, (peak_rss() - peak) >> 20
    return supervising


@hostile(1600)
@given(story=stories())
def test_host_b_stories(story: Story) -> None:
    supervising = followed(story.lines(), story.steps)
    hang = supervising.hang
    if hang is not None and any(rank.why and "phase" in rank.why for rank in hang.ranks):
        event("a hang names a rank's phase")


@hostile(400)
@given(lines=st.lists(FOLLOWED_RAW, min_size=1, max_size=6), steps=st.sampled_from(list(Steps)))
def test_followed_lines_whole_path(lines: list[bytes], steps: Steps) -> None:
    followed(lines, steps)
