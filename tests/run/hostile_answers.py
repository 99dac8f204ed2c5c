"""What a hostile host can send, as hypothesis strategies, and the fakes and checks the
property tests share: a transport whose host answers as drawn, a guard that fails if host text
is evaluated, and the checks that a value shown is safe to print."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import json
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ddptui.config.model import HostConfig
from ddptui.remote.commands import CommandResult, Overflow
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.transport import Command
from ddptui.run.agent.call import (
    MAX_ANSWER_BYTES,
    NodeError,
)
from ddptui.run.following.progress import MAX_RANKS
from tests.remote.doubles import CommandsOnly

_T = TypeVar("_T")

HOST = HostConfig(name="ddpa2", address="192.0.2.7")
RUN_DIR = "/nonexistent/ddptui-runs/20990101-000000-abcd/node0"


def hostile(examples: int) -> settings:
    """One test's settings: ``examples`` of them. No deadline: on two shared cores a wall-clock
    limit per example fails by load, not by a slow parser; what a host's answer may cost is
    bounded by the caps each reader applies before parsing, which the tests assert."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        # Documents of 5000-digit numbers and 100,000-deep brackets are the point, not a slip.
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --- what a host can put in text and JSON -----------------------------------------------------

EVALUATED: list[str] = []
"""Filled only if some parser runs a host's text as Python (see :data:`CANARY`)."""
CANARY = "__import__('tests.run.hostile_answers').run.hostile_answers.EVALUATED.append('canary')"
"""Python that, if anything evaluates it, leaves a mark the tests look for."""

SPECIAL = (
    "\x1b]0;owned\x07",
    "\x1b[2J\x1b[H",
    "\x1b]52;c;b3duZWQ=\x07",
    "\x9b31m",
    "\x00",
    "\x7f",
    "\r",
    "\n",
    "\t",
    "\x0b",
    "\x1c",
    "\x85",
    "\u2028",
    "\u202e",
    "\u2066",
    "\u200d",
    "\ufe0f",
    "\ufeff",
    "\ud800",
    "\udfff",
    "\udcff",
    "😀",
    "é",
    "٣",
    "²",
    "..",
    "/",
    "../../etc/passwd",
    "[bold red]markup[/]",
    "{0.__class__.__init__.__globals__}",
    "%s%n%x",
    "$(id)`id`",
    CANARY,
)
"""Pieces a hostile host likes: terminal escapes, bidi and line controls, lone surrogates (as
JSON's ``\\ud800`` gives them), lookalike digits, paths out, markup, format strings, code."""


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each drawn as often as its weight. ``one_of`` does not weigh
    (naming a branch twice there hardly makes it likelier); a parser needs most parts of a
    document right to reach the rest, so the right shape must be the likely one."""
    total = sum(weight for weight, _ in choices)

    def pick(number: int) -> st.SearchStrategy[Any]:
        for weight, strategy in choices:
            if number < weight:
                return strategy
            number -= weight
        raise AssertionError(number)

    return st.integers(0, total - 1).flatmap(pick)


def hostile_text(max_pieces: int = 5) -> st.SearchStrategy[str]:
    pieces = st.one_of(st.text(max_size=12), st.sampled_from(SPECIAL))
    short = st.lists(pieces, max_size=max_pieces).map("".join)
    # Longer than every cut the parsers make (64, 500, 1024, 64 KiB), in one and several bytes.
    long = st.builds(
        lambda piece, times: piece * times,
        st.sampled_from(["x", "\x1b", "é", "😀"]),
        st.sampled_from([63, 64, 65, 501, 1025, 70_000]),
    )
    return weighted((5, short), (1, long))


HOSTILE_TEXT = hostile_text()


@dataclasses.dataclass(frozen=True)
class Raw:
    """JSON text written as is: what Python's own encoder cannot or will not write."""

    text: str


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def any_of(values: Sequence[_T]) -> st.SearchStrategy[_T]:
    """``sampled_from(values)``, drawn by index: Hypothesis shows a strategy's repr, and some of
    these values are hundreds of kilobytes."""
    return st.sampled_from(range(len(values))).map(values.__getitem__)


RAW_TOKENS = (
    "9" * 5000,
    "-" + "9" * 5000,
    "1" + "0" * 4300,
    "1e999",
    "-1e999",
    "1E400",
    "4.9e-324",
    "1e-400",
    "-0",
    "-0.0",
    "NaN",
    "Infinity",
    "-Infinity",
    '"\\ud800"',
    '"\\udfff\\ud800x"',
    '"\\u0000\\u001b]0;owned\\u0007"',
    '"\\u202e\\u2028"',
    deep(50),
    deep(900),
    deep(100_000),
)
"""Numbers past what ``int()`` converts (4300 digits), past a float's range and below it, the
values JSON lacks, escapes of lone surrogates and controls, and nesting up to the parser's
limit and far past it."""

INTS = st.one_of(
    st.integers(-3, 300),
    st.sampled_from(
        [2**22 - 1, 2**22, 2**31, 2**50, 2**50 + 1, 2**62, 2**63 - 1, 2**63, 65535, 65536]
    ),
    st.sampled_from([MAX_RANKS - 1, MAX_RANKS, 10**9 - 1, 10**9, -(2**63)]),
    st.integers(),
)
FLOATS = st.floats()
"""NaN, both infinities, subnormals and -0.0 among them."""
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    INTS,
    FLOATS,
    HOSTILE_TEXT,
    any_of(RAW_TOKENS).map(Raw),
)
KEYS = st.one_of(
    HOSTILE_TEXT,
    st.sampled_from(["attempts", "pgid", "port", "error", "files", "ranks", "k", "type", "v"]),
)


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value, nested, with every hostile scalar above among its leaves."""
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5), st.dictionaries(KEYS, inner, max_size=5)
        ),
        max_leaves=8,
    )


JSON_VALUES = json_values()


def to_json(value: Any, ascii: bool = True) -> str:
    """``value`` as JSON text, :class:`Raw` parts as they are; ``ascii=False`` leaves every
    character (lone surrogates too) unescaped, as a host's encoder might."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = (
            f"{json.dumps(k, ensure_ascii=ascii)}:{to_json(v, ascii)}" for k, v in value.items()
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(to_json(item, ascii) for item in value) + "]"
    return json.dumps(value, ensure_ascii=ascii)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a value of the right shape, else anything: a document has many parts, and one
    wrong part ends its parsing, so most parts must be right for a parser to reach the rest."""
    return weighted((9, valid), (1, JSON_VALUES))


NOT_JSON = (
    "",
    "Welcome to ddpa2! \x1b]0;owned\x07",
    "Last login: Mon Jan  1 00:00:00 2099 from 192.0.2.1",
    '{"attempts": {',
    "{",
    "}",
    "\ufeff{}",
    "null",
    "true",
    "[]",
    '"attempts"',
    "7",
    "{'pgid': 4242}",
    '{"pgid": 4242,}',
    '{"error": "x\x1b"}',
    deep(100_000),
)
RAW_LINES = st.one_of(
    HOSTILE_TEXT,
    st.binary(max_size=40).map(lambda data: data.decode("utf-8", "surrogateescape")),
    any_of(NOT_JSON),
)
"""Lines that are not the agent's JSON: banners, truncations, Python reprs, bytes."""


def serialised(documents: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    # Escaped mostly: unescaped, a line separator in any string splits the line in two.
    ascii = weighted((3, st.just(True)), (1, st.just(False)))
    return st.tuples(documents, ascii).map(lambda pair: to_json(*pair))


def answer_lines(documents: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    """One answer line: mostly a document shaped like the command's, else any JSON, an
    ``error`` document, or no JSON at all."""
    shaped = serialised(documents)
    return weighted(
        (12, shaped),
        (1, serialised(JSON_VALUES)),
        (1, serialised(st.fixed_dictionaries({"error": maybe(HOSTILE_TEXT)}))),
        (1, RAW_LINES),
    )


STATUSES = st.one_of(st.none(), st.integers(-1, 256))


@st.composite
def _answered(draw: st.DrawFn, lines: st.SearchStrategy[str]) -> CommandResult:
    # A login script may print before the agent does, and a line may end any way.
    banners = draw(st.lists(RAW_LINES, max_size=2))
    end = draw(st.sampled_from(["", "\n", "\r\n", " \n\n"]))
    stdout = "\n".join([*banners, draw(lines)]) + end
    if len(stdout.encode("utf-8", "surrogatepass")) > MAX_ANSWER_BYTES:
        # The transport hangs up on a host that floods, keeping what came first.
        kept = stdout.encode("utf-8", "surrogatepass")[:MAX_ANSWER_BYTES]
        stdout = kept.decode("utf-8", "replace")
        return CommandResult(None, stdout, "", overflow=Overflow("stdout", MAX_ANSWER_BYTES))
    return CommandResult(draw(STATUSES), stdout, draw(HOSTILE_TEXT))


def command_results(lines: st.SearchStrategy[str]) -> st.SearchStrategy[CommandResult]:
    """What the transport reports of one agent command on a host that answers ``lines``:
    mostly the answer, else no connection, no answer in time, too much of it, or nothing."""
    unreached = st.builds(
        lambda reach, detail, stderr: CommandResult(
            None, "", stderr, reach=Reachability(reach, detail)
        ),
        st.sampled_from(list(Reach)),
        HOSTILE_TEXT,
        HOSTILE_TEXT,
    )
    late = st.builds(
        lambda stdout, stderr: CommandResult(None, stdout, stderr, timed_out=True),
        lines,
        HOSTILE_TEXT,
    )
    flooded = st.builds(
        lambda stdout, stderr: CommandResult(
            None, stdout, stderr, overflow=Overflow("stdout", MAX_ANSWER_BYTES)
        ),
        lines,
        HOSTILE_TEXT,
    )
    silent = st.builds(
        CommandResult, STATUSES, st.sampled_from(["", " \n", "\r\n\r\n"]), HOSTILE_TEXT
    )
    return weighted((36, _answered(lines)), (1, unreached), (1, late), (1, flooded), (1, silent))


# --- what every test checks -------------------------------------------------------------------

_BIDI_AND_LINES = frozenset(
    "\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def raw_controls(text: str, *, one_line: bool) -> list[str]:
    """The characters of ``text`` a terminal would act on rather than show; written apart from
    :mod:`ddptui.untrusted` so that a slip there shows here."""
    found = []
    for char in text:
        code = ord(char)
        if char in "\t\n":
            unsafe = one_line
        else:
            unsafe = (
                code < 0x20
                or 0x7F <= code <= 0x9F
                or 0xD800 <= code <= 0xDFFF
                or char in _BIDI_AND_LINES
            )
        if unsafe:
            found.append(char)
    return found


def shown_safely(text: object, *, one_line: bool, limit: int | None = None) -> None:
    assert isinstance(text, str), repr(text)
    assert not raw_controls(text, one_line=one_line), repr(text[:200])
    if limit is not None:
        assert len(text) <= limit, (len(text), limit)


class NothingEvaluated:
    """Within the block, ``eval`` or ``exec`` of text (not the code objects imports run) is
    recorded, and so is :data:`CANARY` having run; leaving the block fails on either."""

    def __init__(self) -> None:
        self.ran: list[object] = []

    def __enter__(self) -> NothingEvaluated:
        self._eval, self._exec = builtins.eval, builtins.exec
        real_eval, real_exec = self._eval, self._exec

        def watched_eval(source: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(source, str | bytes):
                self.ran.append(source)
            return real_eval(source, *args, **kwargs)

        def watched_exec(source: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(source, str | bytes):
                self.ran.append(source)
            return real_exec(source, *args, **kwargs)

        builtins.eval, builtins.exec = watched_eval, watched_exec
        return self

    def __exit__(self, *exc: object) -> None:
        builtins.eval, builtins.exec = self._eval, self._exec
        assert not self.ran, f"host text was evaluated: {self.ran[:3]!r}"
        assert not EVALUATED, "the canary in a host's text ran"


def node_error(error: NodeError) -> None:
    """The one error a client function may raise: it names the host and shows nothing a
    terminal would act on (a host's error text may keep its tabs and newlines)."""
    message = str(error)
    assert message.startswith(HOST.name), message
    shown_safely(message, one_line=False)


def answered(call: Coroutine[Any, Any, _T]) -> _T | NodeError:
    """What ``call`` returned, or the :class:`NodeError` it raised; any other exception fails
    the test with its traceback."""
    try:
        with NothingEvaluated():
            return asyncio.run(call)
    except NodeError as error:
        node_error(error)
        return error


class AnsweringHost(CommandsOnly):
    """A transport whose host answers each agent command with the given result, whatever was
    sent."""

    def __init__(self, answers: Mapping[str, CommandResult]) -> None:
        self.answers = dict(answers)
        self.asked: list[str] = []

    def python(self, host: HostConfig, *args: str) -> list[str]:
        return ["python3", *args]

    async def _execute(self, host: HostConfig, command: Command) -> CommandResult:
        assert command.argv[:2] == ("python3", "-"), command.argv
        asked = command.argv[2]
        self.asked.append(asked)
        return self.answer(host, asked)

    def answer(self, host: HostConfig, command: str) -> CommandResult:
        """What ``host`` answers the agent's ``command`` (the same on every host here)."""
        return self.answers[command]

    async def read_file(
        self, host: HostConfig, path: str, *, max_bytes: int, timeout: float
    ) -> bytes:
        raise AssertionError("no agent command reads a file whole")
