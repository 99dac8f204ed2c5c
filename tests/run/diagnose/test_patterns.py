"""What reading a hostile line costs: every pattern run on host text takes time linear in the
line, at most :data:`BUDGET_S` of CPU on a whole line (:data:`MAX_LINE_CHARS`).

The patterns are found by walking the globals of the modules that read host text; one not in
:data:`HOST_PATTERNS` fails :func:`test_every_pattern_on_host_text_is_listed` until someone has
looked at it, and is timed either way. The lines are what makes a regex backtrack: its own
literal pieces ("NCCL error in: ", "local_rank: ", …) and the characters its classes take or
stop at, repeated to a whole line and ending where the match fails; and the lines that did
(the NCCL error pattern took up to 0.4 s on one, and ``ddptui logs`` reads thousands).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import statistics
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

import ddptui.health
import ddptui.run.diagnose
from ddptui.run.diagnose import Category, Diagnoser, LogLine, normalise
from ddptui.run.diagnose.limits import MAX_LINE_CHARS
from ddptui.run.diagnose.lines import _nccl_error_phrase, classify

BUDGET_S = 1e-3
"""Per pattern and line: a linear regex reads 4 KiB in a few tenths of that at most, one that
backtracks in tens to hundreds of milliseconds."""
LINEAR_GROWTH = 8.0
"""How much more a line four times longer may cost: 4× for a linear regex, 16× for one whose
cost grows with the square of the line. Asked only over :data:`BUDGET_S`, where a slow or busy
machine can put a linear one (substituting every character of a line costs near the budget)."""
REPEATS = 7
"""Runs per measure, of which the median counts: caches, the garbage collector and the clock's
grain make single runs vary."""
FED_LINES = 200
FEED_BUDGET_S = 1.0
"""For :data:`FED_LINES` whole hostile lines through :class:`Diagnoser`, which tries each against
some twenty patterns: about 0.3 s."""

MODULES = (
    *(
        info.name
        for package in (ddptui.run.diagnose, ddptui.health)
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")
    ),
    "ddptui.probe.facts",
    "ddptui.remote.srun",
    "ddptui.run.following.event_fields",
    "ddptui.run.following.events",
    "ddptui.layout",
    "ddptui.run.following.logloss",
    "ddptui.run.following.model",
    "ddptui.run.protocol",
    "ddptui.run.backends.slurm.job",
    "ddptui.run.following.state",
    "ddptui.untrusted",
)
"""Every module that reads what hosts send: lines, events, paths, facts and findings."""

HOST_PATTERNS = frozenset(
    {
        "health.slurm._GPUS",
        "health.slurm._NODE",
        "run.diagnose.lines.LAST_ERROR",
        "run.diagnose.lines.NCCL_CODE",
        "run.diagnose.lines.RANK_PREFIX",
        "run.diagnose.lines._C10D_PREFIX",
        "run.diagnose.lines._EXCEPTION",
        "run.diagnose.lines._GLOG_PREFIX",
        "run.diagnose.lines._LOOPBACK",
        "run.diagnose.lines._MODULE_PREFIX",
        "run.diagnose.lines._NCCL_INFO",
        "run.diagnose.lines._NCCL_PREFIX",
        "run.diagnose.lines._NCCL_WARN",
        "run.diagnose.lines._NOISE",
        "run.diagnose.lines._NORMALISE",
        "run.diagnose.lines._PATTERNS",
        "run.diagnose.lines._SIGNAL_TEXT",
        "run.diagnose.lines._TERMINATED",
        "run.diagnose.torchrun.TORCHRUN_CLOSING",
        "run.diagnose.torchrun.TORCHRUN_FAILED",
        "run.diagnose.torchrun._BLOCK_ENTRY",
        "run.diagnose.torchrun._BLOCK_EXIT",
        "run.diagnose.torchrun._BLOCK_FIELD",
        "run.diagnose.torchrun._BLOCK_RANK",
        "layout.ATTEMPT_FILE",
        "layout.ERROR_FILE",
        "layout.EVENTS",
        "layout.FOLLOWED",
        "layout.NODE_DIR",
        "layout.NODE_EXIT",
        "layout.NODE_OUT",
        "layout.RANK_LOG",
        "run.following.logloss._ESCAPE",
        "run.following.logloss._LOSS_PATTERNS",
        "run.following.logloss._STEP",
        "run.following.model._STEP",
        "run.protocol._UNESCAPE",
        "run.backends.slurm.job._FIELDS",
        "run.backends.slurm.job._JOB_ID",
        "run.backends.slurm.job._STATE",
        "run.backends.slurm.job.NODE_NAME",
        "run.backends.slurm.job._ADDRESS",
        "untrusted._UNSAFE",
        "untrusted._UNSAFE_ONE_LINE",
    }
)
"""Every pattern (or collection of them) that runs on host text, by module and name."""


def _patterns_in(value: Any) -> Iterator[re.Pattern[str]]:
    if isinstance(value, re.Pattern):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _patterns_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _patterns_in(item)


def _found() -> dict[int, tuple[re.Pattern[str], list[str]]]:
    """Every compiled pattern in the modules' globals (and in their tuples, lists and dicts),
    by identity, with the names it is found under (a module's import of another's counts)."""
    found: dict[int, tuple[re.Pattern[str], list[str]]] = {}
    for module_name in MODULES:
        module: ModuleType = importlib.import_module(module_name)
        for name, value in vars(module).items():
            for pattern in _patterns_in(value):
                entry = found.setdefault(id(pattern), (pattern, []))
                entry[1].append(f"{module_name.removeprefix('ddptui.')}.{name}")
    return found


FOUND = _found()
PATTERNS = [pattern for pattern, _ in FOUND.values()]
LABELS = [f"{min(names)}:{pattern.pattern[:24]}" for pattern, names in FOUND.values()]

# One of each kind of character the patterns' classes take or stop at.
CHARACTERS = tuple('aZx_07 \t:.,-/[]()<>"\\*=')
ENDINGS = ("", "!", "x", " ", "1")
"""What a line ends in: a character the match fails on makes the regex try every way back."""

REPEATED_STARTS = ("NCCL error in: , " * 300)[:MAX_LINE_CHARS]
KNOWN_HOSTILE = [
    line[:MAX_LINE_CHARS]
    for line in (
        # Each NCCL error start scanned the rest of the line for its end.
        REPEATED_STARTS,
        "NCCL error in: a, b" * 300,
        "NCCL error in: a, " + " " * 5000 + "x",
        "NCCL error in: a, " + "(run with NCCL_DEBUG=A" * 300,
        "NCCL error in: a, " + " (run with NCCL_DEBUG=A " * 300 + "x",
        "NCCL error in: " + "," * 5000,
        # A source path from every "[" to the end; an IPv6 address from every colon.
        "[" * 5000,
        "[" + "a." * 3000,
        "[" + ":" * 5000 + "x",
        "[::" * 2000,
        "a" * 5000,
        "a." * 3000 + "!",
        ":1" * 3000,
        "1:" * 3000 + "!",
        "[1:" * 2000,
        "1." * 3000,
        "127." * 2000,
        "0x" * 3000 + "g",
        "[rank" * 1000,
        "\t" * 5000 + "x",
        "00:00:00." * 1000,
        '"type"' + " " * 5000,
        "Signal 1 (SIG" + "A" * 5000,
        "logs/attempt-1/" + "1/" * 3000,
        "Traceback (most recent call last):" * 150,
    )
]


def _cost(work: Callable[[], object]) -> float:
    """The CPU time ``work`` takes: other processes on a busy machine do not count."""
    times = []
    for _ in range(REPEATS):
        began = time.thread_time()
        work()
        times.append(time.thread_time() - began)
    return statistics.median(times)


def _quarter_cost(read: Callable[[str], object], line: str) -> float:
    # The line's end is kept: it is where a match fails and the regex tries every way back.
    quarter = line[-(len(line) // 4) :]
    return max(_cost(lambda: read(quarter)), 1e-9)


def _assert_cheap(what: str, read: Callable[[str], object], line: str) -> None:
    cost = _cost(lambda: read(line))
    if cost <= BUDGET_S:
        return
    growth = cost / _quarter_cost(read, line)
    assert cost <= 10 * BUDGET_S and growth <= LINEAR_GROWTH, (
        f"{what} took {cost * 1e3:.2f} ms (median of {REPEATS}) on a {len(line)}-character "
        f"line {line[:48]!r}…, over the {BUDGET_S * 1e3:.0f} ms budget, and {growth:.1f}× what "
        "a quarter of the line costs: it backtracks"
    )


def _line(lead: str, unit: list[str], ending: str) -> str:
    """``unit`` repeated after ``lead`` to a whole line, ending in ``ending``."""
    joined = "".join(unit)
    repeated = lead + joined * (MAX_LINE_CHARS // len(joined) + 1)
    return repeated[: MAX_LINE_CHARS - len(ending)] + ending


def _own_pieces(source: str) -> tuple[str, ...]:
    """The literal text between a pattern's syntax ("NCCL error in: ", "local_rank: ", …)."""
    pieces = (piece for piece in re.split(r"\\.|[][(){}?*+|^$]", source) if piece)
    return tuple(dict.fromkeys(pieces)) or CHARACTERS


def _lines(source: str) -> st.SearchStrategy[str]:
    """Whole lines made of a pattern's own pieces and of characters its classes take."""
    piece = st.sampled_from(_own_pieces(source)) | st.sampled_from(CHARACTERS)
    lead = st.just("") | piece
    return st.builds(_line, lead, st.lists(piece, min_size=1, max_size=4), st.sampled_from(ENDINGS))


def test_every_pattern_on_host_text_is_listed() -> None:
    unlisted = [names for _, names in FOUND.values() if not HOST_PATTERNS.intersection(names)]
    assert not unlisted, (
        f"patterns not looked at: {unlisted}. If one reads host text, make sure it cannot "
        "backtrack (these tests time it already) and add it to HOST_PATTERNS."
    )


@pytest.mark.parametrize("pattern", PATTERNS, ids=LABELS)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_line_of_repeated_pieces_costs_a_pattern_little(
    pattern: re.Pattern[str], data: st.DataObject
) -> None:
    line = data.draw(_lines(pattern.pattern), label="line")
    # A substitution tries every start and every match: a search can stop at an early match
    # and never reach the part of the line that backtracks.
    _assert_cheap(repr(pattern.pattern), lambda text: pattern.sub("", text), line)


@pytest.mark.parametrize("pattern", PATTERNS, ids=LABELS)
def test_known_hostile_lines_cost_a_pattern_little(pattern: re.Pattern[str]) -> None:
    for line in KNOWN_HOSTILE:
        _assert_cheap(repr(pattern.pattern), lambda text: pattern.sub("", text), line)


NCCL_PIECES = ("NCCL error in: ", ", NCCL version", ", ", ",", " ", "(run with NCCL_DEBUG=", "a")


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        _line,
        st.sampled_from(("", *NCCL_PIECES)),
        st.lists(st.sampled_from(NCCL_PIECES), min_size=1, max_size=4),
        st.sampled_from(ENDINGS),
    )
)
def test_finding_an_nccl_error_costs_little(line: str) -> None:
    _assert_cheap("the NCCL error's phrase", _nccl_error_phrase, line)


@pytest.mark.parametrize("line", KNOWN_HOSTILE, ids=range(len(KNOWN_HOSTILE)))
def test_finding_an_nccl_error_in_known_hostile_lines_costs_little(line: str) -> None:
    _assert_cheap("the NCCL error's phrase", _nccl_error_phrase, line)


def test_the_lines_catch_a_pattern_that_backtracks() -> None:
    """The NCCL error pattern before it was rewritten: the generated lines must find it out."""
    quadratic = re.compile(
        r"NCCL error in: [^,]*, (.*?)(?:\s*\(run with NCCL_DEBUG=\w+.*?\))?, NCCL version"
    )
    # Ten times the budget: a line found near it might pass when Hypothesis runs it again.
    slow = find(
        _lines(quadratic.pattern),
        lambda line: _cost(lambda: quadratic.sub("", line)) > 10 * BUDGET_S,
        settings=settings(max_examples=2000, phases=[Phase.generate], database=None),
    )
    assert "NCCL error in: " in slow

    # A busy machine's excuse for a line over the budget must not excuse this one either.
    def read(line: str) -> str:
        return quadratic.sub("", line)

    assert _cost(lambda: read(slow)) / _quarter_cost(read, slow) > LINEAR_GROWTH


def test_the_diagnosis_reads_hostile_lines_at_a_linear_cost() -> None:
    lines = [
        LogLine("h", 0, i % 8, ("stderr", "stdout", "torchrun")[i % 3], float(i), text)
        for i, text in enumerate(KNOWN_HOSTILE * (FED_LINES // len(KNOWN_HOSTILE) + 1))
    ][:FED_LINES]
    diagnoser = Diagnoser()
    began = time.thread_time()
    for line in lines:
        diagnoser.feed(line)
    took = time.thread_time() - began
    assert took < FEED_BUDGET_S, f"{FED_LINES} hostile lines took {took:.2f} s of CPU to diagnose"


# --- what the rewritten patterns still read ----------------------------------------------


def test_an_nccl_error_is_read_after_starts_that_are_not_one() -> None:
    line = (
        "NCCL error in: a,b "
        * 100
        + "torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1"
    )
    finding = classify(line)
    assert finding is not None and finding.category is Category.NCCL_SYSTEM_ERROR


def test_repeated_starts_without_an_end_are_no_nccl_error() -> None:
    assert _nccl_error_phrase(REPEATED_STARTS) is None
    finding = classify(REPEATED_STARTS)
    assert finding is None or not finding.category.name.startswith("NCCL")


def test_source_places_and_ipv6_addresses_are_still_normalised_away() -> None:
    message = "[/__w/pytorch/gloo/transport/tcp/pair.cc:553] Connection closed by [fe80::1]:29500"
    assert normalise(message) == "Connection closed by <addr>"
    assert normalise("[" + ":" * 5000) == "[" + ":" * 299
