"""Whatever a host sends for its flight recorders, the head reads a bounded trace or says why
not, evaluates nothing, and keeps the dump inside its own folder.

Hypothesis draws dumps of the recorder's shape with hostile values (pickled as torch and
Python pickle them, or as JSON), cut and spliced recordings of a real gloo job, and plain
bytes; the real :func:`~ddptui.run.evidence.flight.read_dump`, and the real
:func:`~ddptui.run.evidence.dump.take` and :func:`~ddptui.run.evidence.kept.save` over a transport
whose hosts answer as drawn.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.remote.commands import CommandResult
from ddptui.run.evidence import dump as stack_dump
from ddptui.run.evidence import kept as kept_dump
from ddptui.run.evidence.flight import MAX_SEQ, MAX_TEXT, FlightDumpError, RankTrace, read_dump
from tests.fixtures.flight.hostile import evaluating_dump, recorded
from tests.run.bed import two_host_record
from tests.run.hostile_answers import (
    CANARY,
    HOSTILE_TEXT,
    INTS,
    JSON_VALUES,
    AnsweringHost,
    NothingEvaluated,
    hostile,
    maybe,
    shown_safely,
    weighted,
)

TEXTS = weighted((3, HOSTILE_TEXT), (1, st.just(CANARY)), (1, JSON_VALUES))
SIZES = maybe(st.lists(maybe(st.lists(maybe(INTS), max_size=10)), max_size=10))
FRAMES = maybe(
    st.lists(
        maybe(
            st.fixed_dictionaries(
                {"filename": maybe(TEXTS), "name": maybe(TEXTS), "line": maybe(INTS)}
            )
        ),
        max_size=4,
    )
)
ENTRY = st.fixed_dictionaries(
    {
        "collective_seq_id": maybe(INTS),
        "profiling_name": maybe(TEXTS),
        "process_group": maybe(st.tuples(TEXTS, TEXTS)),
        "input_sizes": SIZES,
        "frames": FRAMES,
        "is_p2p": maybe(st.booleans()),
    }
)
DOCUMENT = st.fixed_dictionaries(
    {
        "entries": maybe(st.lists(maybe(ENTRY), max_size=6)),
        # What torch's analyser would `eval`: here only ever data.
        "pg_config": maybe(st.dictionaries(TEXTS.filter(lambda k: isinstance(k, str)), TEXTS)),
        "version": maybe(TEXTS),
    }
)


def _pickled(document: Any, protocol: int) -> bytes:
    try:
        return pickle.dumps(document, protocol=protocol)
    except (RecursionError, ValueError):
        return b""


def _spliced(data: bytes, at: int, cut: int, inserted: bytes) -> bytes:
    at %= len(data) + 1
    return data[:at] + inserted + data[at + cut :]


DUMPS = st.one_of(
    st.builds(_pickled, DOCUMENT, st.integers(2, 5)),
    DOCUMENT.map(lambda document: json.dumps(document, default=repr).encode()),
    st.builds(
        _spliced,
        st.sampled_from([recorded(s, r) for s in ("rank-behind", "mismatch") for r in range(3)]),
        st.integers(0, 2000),
        st.integers(0, 8),
        st.binary(max_size=16),
    ),
    st.binary(max_size=512),
    st.just(evaluating_dump(Path("/nonexistent/evaluated"))),
)


def read_safely(rank: int, data: bytes) -> RankTrace | None:
    with NothingEvaluated():
        try:
            trace = read_dump(rank, data)
        except FlightDumpError as error:
            shown_safely(str(error), one_line=True)
            return None
    assert trace.rank == rank
    for collective in trace.collectives:
        assert type(collective.seq) is int and 0 <= collective.seq <= MAX_SEQ
        for text in (collective.op, collective.sizes, collective.where):
            shown_safely(text, one_line=True, limit=MAX_TEXT)
        shown_safely(collective.group, one_line=True, limit=2 * MAX_TEXT + 3)
    return trace


@hostile(700)
@given(data=DUMPS)
def test_any_dump_is_a_bounded_trace_or_its_error(data: bytes) -> None:
    read_safely(0, data)


class DumpingHosts(AnsweringHost):
    """Hosts that answer ``dump`` as drawn, then serve the flight files they named."""

    def __init__(self, answers: Mapping[str, CommandResult], files: Sequence[bytes]) -> None:
        super().__init__(answers)
        self.files = files

    async def read_file(
        self, host: HostConfig, path: str, *, max_bytes: int, timeout: float
    ) -> bytes:
        rank = int(path.rpartition("_")[2])
        return self.files[rank % len(self.files)][:max_bytes]


RECORD = two_host_record()
CONFIG = Config(
    Path("hosts.toml"),
    ClusterConfig(),
    tuple(HostConfig(name=node.host, address=node.address) for node in RECORD.nodes),
    JobConfig(),
)
RANKS = weighted((4, st.integers(0, 3)), (1, INTS))
STACK = st.fixed_dictionaries(
    {
        "rank": RANKS,
        "pid": st.integers(2, 10**6),
        "via": st.sampled_from(["", "py-spy", "faulthandler"]),
        "text": HOSTILE_TEXT,
        "error": st.just(""),
        "note": st.just(""),
    }
)
DUMP_ANSWER = st.fixed_dictionaries(
    {
        "attempt": weighted((4, st.just(1)), (1, INTS)),
        "ranks": st.lists(STACK, max_size=4),
        "flight": st.lists(st.tuples(RANKS, st.integers(0, 2**40)).map(list), max_size=4),
    }
)


@hostile(300)
@given(answer=DUMP_ANSWER, files=st.lists(DUMPS, min_size=1, max_size=3))
def test_a_dump_keeps_to_the_run_s_folder_whatever_the_hosts_answer(
    answer: dict[str, Any], files: list[bytes]
) -> None:
    hosts = DumpingHosts({"dump": CommandResult(0, json.dumps(answer), "")}, files)
    with tempfile.TemporaryDirectory() as scratch, NothingEvaluated():
        root = Path(scratch)
        dumps = root / "run" / "dumps"
        taken = asyncio.run(stack_dump.take(CONFIG, RECORD, hosts))
        saved = kept_dump.save(taken, dumps)
        assert saved.saved_in is not None and saved.saved_in.parent == dumps
        written = {path.relative_to(saved.saved_in) for path in saved.saved_in.rglob("*")}
        assert {path.parent for path in written} <= {Path()}
        assert set(root.rglob("*")) == {root / "run", dumps, saved.saved_in} | {
            saved.saved_in / path for path in written
        }
    for stack in taken.stacks:
        assert stack.rank in RECORD.ranks_of(RECORD.nodes[stack.node_rank])
    assert all(0 <= rank < RECORD.world_size for rank in taken.flight_dumps)
    for line in (*taken.unanswered, *taken.flight_errors, *(f.text for f in taken.flight)):
        shown_safely(line, one_line=False)
