"""Recognising log lines: what one line a rank or torchrun wrote says, if anything.

A line loses its rank, logging and NCCL prefixes (:func:`strip_prefixes`), then is tried
against NCCL's errors, signals and the catalogue's patterns (:func:`classify`); what is left
is normalised (:func:`normalise`) so that the same failure on many ranks groups as one.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Final

from ddptui.run.diagnose.catalogue import LOOPBACK_CAUSE, Category
from ddptui.run.diagnose.limits import MAX_MESSAGE_CHARS
from ddptui.untrusted import plain


@dataclass(frozen=True)
class LogLine:
    """One line a rank or torchrun wrote, as the follower read it."""

    host: str
    node_rank: int
    rank: int | None
    """The global rank; ``None`` for torchrun's own output (a ``[rankN]:`` prefix then names it)."""
    stream: str
    """``stdout``, ``stderr``, ``torchrun``, or ``error.json`` (``text`` is then the whole file)."""
    time: float
    """When it was written, as near as known (Unix seconds): the first failure is the earliest,
    and events carry their rank's own clock, so times from the head node's clock should be
    close to those (read soon after written)."""
    text: str


RANK_PREFIX = re.compile(r"^\[rank([0-9]{1,9})\]:\s?")
# glog (torchrun's Python logging) and c10d's C++ log prefixes.
_GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")
_C10D_PREFIX = re.compile(r"^\[[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ \S+:\d+\] (?:\[c10d\] )?")
# NCCL: "host:pid:tid [dev] " and, on WARN lines, "[date time] " before it and "file.cc:N " after.
_NCCL_PREFIX = re.compile(r"^(?:\[[\d\- :]+\] )?\S+:\d+:\d+ \[\d+\] (?:\S+\.\w+:\d+ )?")
_NCCL_WARN = re.compile(r"\bNCCL WARN\b\s*(.*)")
_NCCL_INFO = re.compile(r"\bNCCL INFO\b")
# torchrun's own exception when it receives SIGTERM, SIGINT or SIGHUP (numbers on Linux).
_TERMINATED = re.compile(r"got signal: (?:15|2|1)\b")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)(?::\s?(.*))?$")
_MODULE_PREFIX = re.compile(r"^(?:[a-z_]\w*\.)+(?=[A-Z])")
TRACEBACK = "Traceback (most recent call last):"

_NOISE = re.compile(
    "|".join(
        [
            r"Failed to initialize NumPy",
            r"^\s*cpu = _conversion_method_template",
            r"destroy_process_group\(\) was not called",
            r"Sending process \d+ closing signal",
            r"no error file defined for parent",
            r"The hostname of the client socket cannot be retrieved",
            r"Setting OMP_NUM_THREADS environment variable",
            r"^\*+$",
            r"^\S+:\d+: \w*Warning: ",  # Python warnings: path:line: XWarning: text
            r"To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            r"^trainer: warning: ",
        ]
    )
)

# Tried in order on a line without its prefixes; the first that matches classifies it.
_PATTERNS: Final[tuple[tuple[Category, re.Pattern[str]], ...]] = (
    (Category.ADDRESS_IN_USE, re.compile(r"EADDRINUSE|[Aa]ddress already in use")),
    (
        Category.CUDA_OOM,
        re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"),
    ),
    (
        Category.COLLECTIVE_TIMEOUT,
        re.compile(
            r"Watchdog caught collective operation timeout|ran for \d+ milliseconds before "
            r"timing out|Timed out waiting \d+ms for (?:send|recv)|Some NCCL operations have "
            r"failed or timed out"
        ),
    ),
    (Category.GLOO_CONNECT, re.compile(r"connectFullMesh")),
    (
        Category.PEER_LOST,
        re.compile(r"Connection (?:closed|reset) by peer|ECONNRESET|Broken pipe|\bEPIPE\b"),
    ),
    (
        Category.STORE_TIMEOUT,
        re.compile(
            r"client socket has timed out|client socket has failed to connect|DistStoreError|"
            r"Rendezvous(?:Connection|Timeout|Closed)Error|Socket Timeout|"
            r"[Tt]imed out after \d+ seconds waiting for clients|wait timeout after \d+ms"
        ),
    ),
    (Category.TRAINER_ERROR, re.compile(r"^(?:[A-Za-z_]\w*\.)*TrainerError: ")),
)

# torch's "NCCL error in: <file>:<line>, <phrase>, NCCL version <x>", found with str.find: a
# regex with a lazy phrase, tried from every "NCCL error in: " a host repeats in a line, costs
# time quadratic in the line.
_NCCL_ERROR = "NCCL error in: "
_NCCL_VERSION = ", NCCL version"
NCCL_CODE = re.compile(r"^(nccl[A-Z]\w*): ")
_NCCL_KINDS: Final = {
    "invalid usage": Category.NCCL_INVALID_USAGE,
    "invalid argument": Category.NCCL_INVALID_USAGE,
    "unhandled system error": Category.NCCL_SYSTEM_ERROR,
    "remote process exited or there was a network error": Category.NCCL_REMOTE_ERROR,
    "internal error": Category.NCCL_INTERNAL_ERROR,
    "unhandled cuda error": Category.NCCL_CUDA_ERROR,
}
_NCCL_CODES: Final = {
    "ncclInvalidUsage": Category.NCCL_INVALID_USAGE,
    "ncclInvalidArgument": Category.NCCL_INVALID_USAGE,
    "ncclSystemError": Category.NCCL_SYSTEM_ERROR,
    "ncclRemoteError": Category.NCCL_REMOTE_ERROR,
    "ncclInternalError": Category.NCCL_INTERNAL_ERROR,
    "ncclUnhandledCudaError": Category.NCCL_CUDA_ERROR,
}
LAST_ERROR = re.compile(r"^Last error:\s*(.*)$")

_SIGNAL_TEXT = re.compile(r"Signal ([0-9]{1,3}) \((SIG\w+)\) received by PID")
_LOOPBACK = re.compile(r"\b127\.\d+\.\d+\.\d+\b")

# Normalisation: what differs between ranks and runs of the same failure.
_NORMALISE: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # Where in gloo's or torch's C++ sources: "[/__w/pytorch/…/pair.cc:553] ".
    # Without "[" in the path: with it, the path from each "[" of "[[[…" ran to the line's end.
    (re.compile(r"\[[^\[\]\s]*\.(?:cc|cpp|cxx|c|h|hpp):\d+\]\s*"), ""),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<id>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"torchelastic_\w+"), "torchelastic_<id>"),
    # [IPv6]:port. The lookahead asks for a colon before the last character once, where
    # "[0-9a-fA-F:]*:[0-9a-fA-F:]+" tried every colon of "[::::…" against the rest.
    (re.compile(r"\[(?=[0-9a-fA-F]*:[0-9a-fA-F:])[0-9a-fA-F:]+\](?::\d+)?"), "<addr>"),
    (re.compile(r"\[?\b\d{1,3}(?:\.\d{1,3}){3}\b\]?(?:[:<]\d+>?)?"), "<addr>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ _T]\d\d:\d\d:\d\d(?:[.,]\d+)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\d+"), "N"),
)


def normalise(text: str) -> str:
    """``text`` with what differs between ranks of one failure replaced, for grouping."""
    # Cut first: the regexes cost time in proportion to the text, and a message is short.
    # Plain as the events' texts are, so that a rank's error event and the same message on its
    # stderr group as one.
    text = plain(text[: MAX_MESSAGE_CHARS + 100])
    for pattern, replacement in _NORMALISE:
        text = pattern.sub(replacement, text)
    return text.strip()[:MAX_MESSAGE_CHARS]


def strip_prefixes(text: str) -> str:
    text = _GLOG_PREFIX.sub("", text, count=1)
    text = _C10D_PREFIX.sub("", text, count=1)
    return _NCCL_PREFIX.sub("", text, count=1)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class Finding:
    category: Category
    message: str
    """Already normalised."""
    cause: str | None = None
    """A cause more precise than the category's."""


def _body(text: str) -> str:
    """A line without its rank, logging and NCCL prefixes."""
    return strip_prefixes(RANK_PREFIX.sub("", text, count=1).rstrip())


def classify(text: str) -> Finding | None:
    """What one line (prefixes and all) says, if anything; tracebacks need :class:`Diagnoser`."""
    return _classify_body(_body(text))


def _classify_body(body: str) -> Finding | None:
    if not body or _NOISE.search(body) or _NCCL_INFO.search(body):
        return None
    warn = _NCCL_WARN.search(body)
    if warn:
        return Finding(Category.NCCL_WARN, normalise(warn.group(1)))
    nccl = _nccl_error_phrase(body)
    if nccl is not None:
        phrase = nccl.strip().lower()
        kind = next(
            (c for p, c in _NCCL_KINDS.items() if phrase.startswith(p)), Category.NCCL_ERROR
        )
        return Finding(kind, normalise(_without_exception_name(body)))
    code = NCCL_CODE.match(body)
    if code and code.group(1) in _NCCL_CODES:
        return Finding(_NCCL_CODES[code.group(1)], normalise(body))
    signalled = _SIGNAL_TEXT.search(body)
    if signalled:
        return killed(int(signalled.group(1)))
    for category, pattern in _PATTERNS:
        if pattern.search(body):
            return _finding(category, body)
    return None


def _nccl_error_phrase(body: str) -> str | None:
    """The phrase of torch's NCCL error, if ``body`` is one (its "(run with NCCL_DEBUG=INFO for
    details)" too: only the phrase's start is read).

    Each search starts where the one before stopped: linear in the line.
    """
    start = body.find(_NCCL_ERROR)
    while start != -1:
        comma = body.find(",", start + len(_NCCL_ERROR))
        if comma == -1:
            return None
        if body.startswith(", ", comma):
            end = body.find(_NCCL_VERSION, comma + 2)
            return None if end == -1 else body[comma + 2 : end]
        # The file name ends at its first comma: every start before it ends there as well.
        start = body.find(_NCCL_ERROR, comma + 1)
    return None


def marks_error(text: str) -> bool:
    """Whether a log line (prefixes and all) is one a person looking for the failure wants to
    land on: a classified error or warning, or the start of a Python traceback."""
    body = _body(text)
    return body.startswith(TRACEBACK) or _classify_body(body) is not None


def _finding(category: Category, body: str) -> Finding:
    if category is Category.TRAINER_ERROR:
        return Finding(category, normalise(_MODULE_PREFIX.sub("", body)))
    cause = LOOPBACK_CAUSE if category is Category.GLOO_CONNECT and _LOOPBACK.search(body) else None
    return Finding(category, normalise(_without_exception_name(body)), cause)


_TOLD_TO_STOP = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def killed(number: int) -> Finding:
    name = _signal_name(number)
    if number in _TOLD_TO_STOP:
        # torchrun ends a failed rank's peers with SIGTERM, and its report may name one of
        # them first: its failure times have whole seconds, so a peer can tie or lead.
        return Finding(Category.TERMINATED, f"terminated by {name} (exit code -{number})")
    return Finding(Category.KILLED_BY_SIGNAL, f"killed by {name} (exit code -{number})")


def _without_exception_name(body: str) -> str:
    """``torch.distributed.DistBackendError: text`` → ``text``: the log line and the
    exception that repeat one failure group together."""
    match = _EXCEPTION.match(body)
    if match and match.group(2) is not None and _looks_like_exception(match.group(1)):
        return match.group(2)
    return body


def _looks_like_exception(name: str) -> bool:
    return name.endswith(("Error", "Exception", "Interrupt", "Exit", "Failure"))


def python_error(body: str) -> Finding | None:
    """The generic finding for a traceback's exception line (no more specific one matched)."""
    match = _EXCEPTION.match(body)
    if match is None or not (_looks_like_exception(match.group(1)) or match.group(2) is not None):
        return None
    if match.group(1) == "SignalException" and _TERMINATED.search(body):
        return Finding(Category.TERMINATED, normalise(_MODULE_PREFIX.sub("", body)))
    return Finding(Category.PYTHON_ERROR, normalise(_MODULE_PREFIX.sub("", body)))
