"""Why a run failed: log lines and error events sorted into categories with a cause and a fix.

:class:`Diagnoser` reads what the ranks and torchrun wrote (every rank's stdout and stderr, the
``error.json`` files torchrun's ``--log-dir`` keeps, torchrun's own console, the trainer's
``error`` and ``step`` events) and groups what went wrong: the same message from many ranks is
one :class:`Diagnosis` (pids, addresses, ports, times and ids normalised away), naming its ranks
and hosts. :meth:`Diagnoser.first_failure` names the rank that failed first, preferring a root
cause (a rank killed by a signal, out of memory, a refused connection) over its consequences
(peers that lost their connection to it, collectives that timed out) and over torchrun's report.

Multi-line messages are followed per (host, rank, stream): a Python traceback ends at its
exception line; torch's ``DistBackendError`` is followed by NCCL's code and, after ``Last
error:``, NCCL's own message (kept as the diagnosis' ``detail``); torchrun's ``ChildFailedError``
block names the root-cause rank, its exit code and the signal that killed it.

Everything here came from hosts: lines are cut to :data:`MAX_LINE_CHARS`, memory is bounded
(:data:`MAX_GROUPS` groups, :data:`MAX_STREAMS` followed streams, :data:`MAX_OBSERVATIONS`
failures kept for ordering), and text stays raw (sanitise it to show it).
"""

from __future__ import annotations

import enum
import json
import re
import signal
from collections import deque
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from .events import DoneEvent, ErrorEvent, RankEvent, StartEvent, StepEvent

MAX_LINE_CHARS: Final = 4096
MAX_ERROR_FILE_CHARS: Final = 1 << 20
"""An ``error.json`` longer than this is not read (torch's are a few KiB: message + stack)."""
MAX_GROUPS: Final = 200
MAX_STREAMS: Final = 4096
MAX_OBSERVATIONS: Final = 512
"""Per role (root causes, consequences, reports): the earliest are kept, one per rank and kind."""
MAX_RANKS_PER_GROUP: Final = 4096
MAX_HOSTS_PER_GROUP: Final = 256
MAX_MESSAGE_CHARS: Final = 300
MAX_EXAMPLE_CHARS: Final = 1000
MAX_TRACEBACK_LINES: Final = 2000
"""A traceback (or torchrun block) longer than this is given up on; a later one starts fresh."""
MAX_KEPT_TRACEBACK_LINES: Final = 64
MAX_KEPT_TRACEBACK_CHARS: Final = 1000
"""Of a root cause's traceback in torchrun's block, only the end is kept, cut short: it is read
for its exception, and every followed stream may be in the middle of one."""

Role: TypeAlias = Literal["root", "consequence", "report", "warning"]


class Category(str, enum.Enum):
    NCCL_INVALID_USAGE = "nccl_invalid_usage"
    NCCL_SYSTEM_ERROR = "nccl_system_error"
    NCCL_REMOTE_ERROR = "nccl_remote_error"
    NCCL_INTERNAL_ERROR = "nccl_internal_error"
    NCCL_CUDA_ERROR = "nccl_cuda_error"
    NCCL_ERROR = "nccl_error"
    """An NCCL error whose kind torch did not name."""
    NCCL_WARN = "nccl_warn"
    COLLECTIVE_TIMEOUT = "collective_timeout"
    GLOO_CONNECT = "gloo_connect"
    PEER_LOST = "peer_lost"
    STORE_TIMEOUT = "store_timeout"
    ADDRESS_IN_USE = "address_in_use"
    CUDA_OOM = "cuda_oom"
    NONFINITE_LOSS = "nonfinite_loss"
    KILLED_BY_SIGNAL = "killed_by_signal"
    TERMINATED = "terminated"
    TRAINER_ERROR = "trainer_error"
    """The bundled trainer refused its options or inputs (``TrainerError``)."""
    CHILD_FAILED = "child_failed"
    """torchrun reports a worker failed, and nothing says more."""
    PYTHON_ERROR = "python_error"

    @property
    def role(self) -> Role:
        """``root``: a failure of its own; ``consequence``: the echo of another rank's failure;
        ``report``: torchrun telling of a failure; ``warning``: not a failure by itself."""
        return _ABOUT[self][0]

    @property
    def cause(self) -> str:
        return _ABOUT[self][1]

    @property
    def fix(self) -> str:
        return _ABOUT[self][2]


_ABOUT: Final[dict[Category, tuple[Role, str, str]]] = {
    Category.NCCL_INVALID_USAGE: (
        "root",
        "NCCL refused its setup: no usable network interface (NCCL_SOCKET_IFNAME matches none), "
        "two ranks on one GPU, or ranks that disagree about a collective. NCCL's last error "
        "says which.",
        "Read NCCL's last error. Make NCCL_SOCKET_IFNAME name an interface present on every host "
        "(`ip -br addr`), give each local rank its own GPU (CUDA_VISIBLE_DEVICES, processes per "
        "node ≤ GPUs), and relaunch with --debug (NCCL_DEBUG=INFO) for the details.",
    ),
    Category.NCCL_SYSTEM_ERROR: (
        "root",
        "A system call inside NCCL failed: usually the network (a socket, a peer that cannot be "
        "reached, a firewall) or shared memory (a small /dev/shm in a container).",
        "Check that the hosts reach each other on the chosen interface and that no firewall drops "
        "NCCL's ports; in a container, enlarge /dev/shm (--shm-size). --debug shows NCCL's INFO.",
    ),
    Category.NCCL_REMOTE_ERROR: (
        "consequence",
        "A peer rank went away or the network between ranks broke; usually the echo of another "
        "rank's failure.",
        "Find the rank that failed first (on top) and fix that; check its host's link and logs.",
    ),
    Category.NCCL_INTERNAL_ERROR: (
        "root",
        "NCCL hit an internal error: often driver, CUDA and NCCL versions that do not fit, or a "
        "broken network plugin.",
        "Make driver, CUDA and NCCL versions match on every host (`ddptui check`) and relaunch "
        "with --debug.",
    ),
    Category.NCCL_CUDA_ERROR: (
        "root",
        "A CUDA call inside NCCL failed: a GPU fault (Xid), a lost GPU or memory exhausted.",
        "Check `nvidia-smi` and the kernel log (`dmesg -T | grep -i xid`) on that host.",
    ),
    Category.NCCL_ERROR: (
        "root",
        "NCCL failed.",
        "Read NCCL's last error and relaunch with --debug (NCCL_DEBUG=INFO) for the details.",
    ),
    Category.NCCL_WARN: (
        "warning",
        "NCCL printed a warning (on the rank's stdout); it often names the failing setting.",
        "Read the warning; --debug (NCCL_DEBUG=INFO) shows what NCCL did before it.",
    ),
    Category.COLLECTIVE_TIMEOUT: (
        "consequence",
        "A collective did not complete in time: a rank stopped joining (it hung, crashed or fell "
        "far behind) or the network dropped.",
        "Look for the rank that failed or stalled first, and for a rank that skips a collective "
        "(uneven data, a conditional all_reduce). Raise --dist-timeout only if steps are slow.",
    ),
    Category.GLOO_CONNECT: (
        "root",
        "gloo could not connect the ranks to each other: a rank advertised an address its peers "
        "cannot reach, or the wrong network interface was used.",
        'Set GLOO_SOCKET_IFNAME to the interface on node 0\'s subnet (socket_ifname = "auto" in '
        "the hosts file) and run `ddptui check`.",
    ),
    Category.PEER_LOST: (
        "consequence",
        "A peer closed or reset its connection in the middle of a collective: another rank died "
        "or its host went away.",
        "This rank is a bystander: fix the rank that failed first (on top).",
    ),
    Category.STORE_TIMEOUT: (
        "root",
        "This node could not reach the c10d store on node 0's master address and port: node 0's "
        "torchrun is not running (or already gone), the address is wrong, or a firewall drops it.",
        "Check that node 0 runs and listens on the master port, that the master address "
        "reaches node 0 from this host, and that no firewall drops the port (`ddptui check`).",
    ),
    Category.ADDRESS_IN_USE: (
        "root",
        "The master port on node 0 is taken by another process, often an earlier run still alive.",
        "Stop that process (`ss -ltnp 'sport = :PORT'` on node 0 names it) or set "
        'master_port = "auto".',
    ),
    Category.CUDA_OOM: (
        "root",
        "The GPU ran out of memory.",
        "Lower --batch-size (keep the global batch with --grad-accum), train in bf16, or shard "
        "with --fsdp; check that no other process holds the GPU (`ddptui check`).",
    ),
    Category.NONFINITE_LOSS: (
        "warning",
        "The loss became NaN or infinite (too high a learning rate, fp16 overflow, bad data), "
        "or a failing GPU lost it before it could be read.",
        "Lower --lr or lengthen --warmup-steps, keep --grad-clip, prefer bf16 to fp16, check the "
        "data; resume from the last checkpoint before it happened.",
    ),
    Category.KILLED_BY_SIGNAL: (
        "root",
        "The process was killed by a signal. SIGKILL is most often the kernel's out-of-memory "
        "killer (or kill -9); SIGSEGV or SIGABRT a crash in native code.",
        "Read the host's kernel log (`dmesg -T | grep -i -e oom -e killed`) and its free memory; "
        "lower the batch size or the processes per node.",
    ),
    Category.TERMINATED: (
        "consequence",
        "torchrun or a rank was told to stop (SIGTERM, SIGINT or SIGHUP): torchrun ending a "
        "failed rank's peers, ddptui stopping the other nodes after a failure, a `ddptui stop`, "
        "or someone's kill.",
        "Nothing to fix here: the first failure, if any, is listed first.",
    ),
    Category.TRAINER_ERROR: (
        "root",
        "The bundled trainer refused its options or inputs.",
        "The message names the option or file to change.",
    ),
    Category.CHILD_FAILED: (
        "report",
        "torchrun reports that a worker process failed.",
        "Read that rank's own stderr and error.json (`ddptui logs --rank N`).",
    ),
    Category.PYTHON_ERROR: (
        "root",
        "The script raised an exception.",
        "Read the traceback's last lines: the exception and where it was raised.",
    ),
}

_LOOPBACK_CAUSE: Final = (
    "gloo could not connect the ranks: a rank advertised a loopback address (127.x) to its "
    "peers, because its hostname resolves to 127.0.1.1 or 127.0.0.1 (the Debian /etc/hosts "
    "default) and GLOO_SOCKET_IFNAME is not set."
)


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


@dataclass(frozen=True)
class Diagnosis:
    """One kind of failure, grouped over every rank that reported it."""

    category: Category
    cause: str
    fix: str
    message: str
    """The message with pids, addresses, ports, times, ids and numbers normalised away."""
    example: str
    """One line as a rank wrote it (raw: sanitise to show)."""
    ranks: tuple[int, ...]
    """Sorted; the first :data:`MAX_RANKS_PER_GROUP` to report it (``count`` counts them all)."""
    hosts: tuple[str, ...]
    count: int
    first_time: float
    detail: str | None = None
    """What explains it further, e.g. NCCL's ``Last error:`` message."""


@dataclass(frozen=True)
class Failure:
    """Where the run failed first: the rank (``None`` if no line named it), host and time."""

    rank: int | None
    host: str
    node_rank: int
    time: float
    category: Category


# --- recognising lines -------------------------------------------------------------------

_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")
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
_TRACEBACK = "Traceback (most recent call last):"

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

_NCCL_ERROR = re.compile(
    r"NCCL error in: [^,]*, (.*?)(?:\s*\(run with NCCL_DEBUG=\w+.*?\))?, NCCL version"
)
_NCCL_CODE = re.compile(r"^(nccl[A-Z]\w*): ")
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
_LAST_ERROR = re.compile(r"^Last error:\s*(.*)$")

_SIGNAL_TEXT = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID")
_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
# torchrun ending its other workers: their deaths by these signals are its doing.
_TORCHRUN_CLOSING = re.compile(
    r"Sending process (\d+) closing signal|Unable to shutdown process (\d+) via"
)
_LOOPBACK = re.compile(r"\b127\.\d+\.\d+\.\d+\b")

# Normalisation: what differs between ranks and runs of the same failure.
_NORMALISE: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # Where in gloo's or torch's C++ sources: "[/__w/pytorch/…/pair.cc:553] ".
    (re.compile(r"\[[^\]\s]*\.(?:cc|cpp|cxx|c|h|hpp):\d+\]\s*"), ""),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<id>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"torchelastic_\w+"), "torchelastic_<id>"),
    (re.compile(r"\[[0-9a-fA-F:]*:[0-9a-fA-F:]+\](?::\d+)?"), "<addr>"),  # [IPv6]:port
    (re.compile(r"\[?\b\d{1,3}(?:\.\d{1,3}){3}\b\]?(?:[:<]\d+>?)?"), "<addr>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ _T]\d\d:\d\d:\d\d(?:[.,]\d+)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\d+"), "N"),
)


def normalise(text: str) -> str:
    """``text`` with what differs between ranks of one failure replaced, for grouping."""
    # Cut first: the regexes cost time in proportion to the text, and a message is short.
    text = text[: MAX_MESSAGE_CHARS + 100]
    for pattern, replacement in _NORMALISE:
        text = pattern.sub(replacement, text)
    return text.strip()[:MAX_MESSAGE_CHARS]


def _strip_prefixes(text: str) -> str:
    text = _GLOG_PREFIX.sub("", text, count=1)
    text = _C10D_PREFIX.sub("", text, count=1)
    return _NCCL_PREFIX.sub("", text, count=1)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class _Finding:
    category: Category
    message: str
    """Already normalised."""
    cause: str | None = None
    """A cause more precise than the category's."""


def _body(text: str) -> str:
    """A line without its rank, logging and NCCL prefixes."""
    return _strip_prefixes(_RANK_PREFIX.sub("", text, count=1).rstrip())


def _classify(text: str) -> _Finding | None:
    """What one line (prefixes and all) says, if anything; tracebacks need :class:`Diagnoser`."""
    return _classify_body(_body(text))


def _classify_body(body: str) -> _Finding | None:
    if not body or _NOISE.search(body) or _NCCL_INFO.search(body):
        return None
    warn = _NCCL_WARN.search(body)
    if warn:
        return _Finding(Category.NCCL_WARN, normalise(warn.group(1)))
    nccl = _NCCL_ERROR.search(body)
    if nccl:
        phrase = nccl.group(1).strip().lower()
        kind = next(
            (c for p, c in _NCCL_KINDS.items() if phrase.startswith(p)), Category.NCCL_ERROR
        )
        return _Finding(kind, normalise(_without_exception_name(body)))
    code = _NCCL_CODE.match(body)
    if code and code.group(1) in _NCCL_CODES:
        return _Finding(_NCCL_CODES[code.group(1)], normalise(body))
    killed = _SIGNAL_TEXT.search(body)
    if killed:
        return _killed(int(killed.group(1)))
    for category, pattern in _PATTERNS:
        if pattern.search(body):
            return _finding(category, body)
    return None


def marks_error(text: str) -> bool:
    """Whether a log line (prefixes and all) is one a person looking for the failure wants to
    land on: a classified error or warning, or the start of a Python traceback."""
    body = _body(text)
    return body.startswith(_TRACEBACK) or _classify_body(body) is not None


def _finding(category: Category, body: str) -> _Finding:
    if category is Category.TRAINER_ERROR:
        return _Finding(category, normalise(_MODULE_PREFIX.sub("", body)))
    cause = (
        _LOOPBACK_CAUSE if category is Category.GLOO_CONNECT and _LOOPBACK.search(body) else None
    )
    return _Finding(category, normalise(_without_exception_name(body)), cause)


_TOLD_TO_STOP = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def _killed(number: int) -> _Finding:
    name = _signal_name(number)
    if number in _TOLD_TO_STOP:
        # torchrun ends a failed rank's peers with SIGTERM, and its report may name one of
        # them first: its failure times have whole seconds, so a peer can tie or lead.
        return _Finding(Category.TERMINATED, f"terminated by {name} (exit code -{number})")
    return _Finding(Category.KILLED_BY_SIGNAL, f"killed by {name} (exit code -{number})")


def _without_exception_name(body: str) -> str:
    """``torch.distributed.DistBackendError: text`` → ``text``: the log line and the
    exception that repeat one failure group together."""
    match = _EXCEPTION.match(body)
    if match and match.group(2) is not None and _looks_like_exception(match.group(1)):
        return match.group(2)
    return body


def _looks_like_exception(name: str) -> bool:
    return name.endswith(("Error", "Exception", "Interrupt", "Exit", "Failure"))


def _python_error(body: str) -> _Finding | None:
    """The generic finding for a traceback's exception line (no more specific one matched)."""
    match = _EXCEPTION.match(body)
    if match is None or not (_looks_like_exception(match.group(1)) or match.group(2) is not None):
        return None
    if match.group(1) == "SignalException" and _TERMINATED.search(body):
        return _Finding(Category.TERMINATED, normalise(_MODULE_PREFIX.sub("", body)))
    return _Finding(Category.PYTHON_ERROR, normalise(_MODULE_PREFIX.sub("", body)))


# --- state --------------------------------------------------------------------------------

_Key: TypeAlias = tuple[str, "int | None", str]


@dataclass
class _Group:
    category: Category
    message: str
    cause: str
    example: str
    first_time: float
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    count: int = 0
    detail: str | None = None

    def add(self, host: str, rank: int | None, time: float) -> None:
        self.count += 1
        self.first_time = min(self.first_time, time)
        if rank is not None and len(self.ranks) < MAX_RANKS_PER_GROUP:
            self.ranks.add(rank)
        if len(self.hosts) < MAX_HOSTS_PER_GROUP:
            self.hosts.add(host)


@dataclass(frozen=True)
class _Observation:
    time: float
    order: int
    host: str
    node_rank: int
    rank: int | None
    category: Category
    role: Role
    group: tuple[Category, str] | None


@dataclass
class _Entry:
    """One ``[N]:`` entry of torchrun's ChildFailedError block."""

    root: bool
    rank: int | None = None
    local_rank: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    traceback: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_KEPT_TRACEBACK_LINES))


@dataclass
class _RankAttempt:
    """Where a rank's events file is: which attempt, and whether it has started or ended."""

    number: int = 1
    started: bool = False
    ended: bool = False


@dataclass
class _Stream:
    """What one (host, rank, stream) is in the middle of."""

    in_traceback: bool = False
    lines: int = 0
    nccl_group: _Group | None = None
    """A DistBackendError whose NCCL code and ``Last error:`` may follow."""
    expect_last_error: bool = False
    in_block: bool = False
    """Inside torchrun's ChildFailedError block."""
    block_root: bool = False
    """Past its "Root Cause" line."""
    entry: _Entry | None = None
    """The block's entry being read; a root cause entry is recorded when the next begins."""
    in_field: str | None = None


_BLOCK_FIELD = re.compile(r"^\s+(time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_BLOCK_ENTRY = re.compile(r"^\[\d+\]:\s*$")
_BLOCK_RANK = re.compile(r"^(\d+) \(local_rank: (\d+)\)")
_BLOCK_EXIT = re.compile(r"^(-?\d+)(?: \(pid: (\d+)\))?")


class Diagnoser:
    """Reads a run's lines and events; says what went wrong, where first."""

    def __init__(self, attempt: int | None = None) -> None:
        """``attempt``: read only that attempt's events (1: the first launch; ``None``: all).

        A rank's events file keeps every attempt's events. Its attempt ends with its ``done``
        or ``error`` event, or when a second ``start`` comes without either (it was killed).
        """
        self._attempt = attempt
        self._rank_attempts: dict[int, _RankAttempt] = {}
        self._groups: dict[tuple[Category, str], _Group] = {}
        self._streams: dict[_Key, _Stream] = {}
        self._observations: dict[Role, list[_Observation]] = {}
        self._observed: set[tuple[str, int | None, Category, Role]] = set()
        self._ranks: dict[tuple[int, int], int] = {}
        self._closed_by_torchrun: set[tuple[str, int]] = set()
        """(host, pid) of every worker torchrun said it signalled to end it."""
        self._order = 0
        self.dropped = 0
        """Findings not kept because :data:`MAX_GROUPS` groups were full."""
        self.unreadable_error_files = 0

    # --- input ----------------------------------------------------------------------------

    def feed(self, line: LogLine) -> None:
        if line.stream == "error.json":
            self._error_file(line)
            return
        text = line.text[:MAX_LINE_CHARS].rstrip("\r\n")
        rank = line.rank
        prefixed = _RANK_PREFIX.match(text)
        if prefixed:
            text = text[prefixed.end() :]
            if rank is None:
                rank = int(prefixed.group(1))
        self._line(line, rank, text)

    def feed_event(self, host: str, event: RankEvent) -> None:
        """Take any event, in the rank's order: an ``error`` event or a ``step`` event with a
        non-finite loss is a finding; every event tells which rank runs where, and which
        attempt the rank is in."""
        if len(self._ranks) < MAX_STREAMS:
            self._ranks[(event.node_rank, event.local_rank)] = event.rank
        if self._attempt is not None and self._attempt_of(event) != self._attempt:
            return
        if isinstance(event, StepEvent) and event.loss is None:
            finding = _Finding(Category.NONFINITE_LOSS, "loss is NaN or infinite")
            group = self._record(
                finding,
                host,
                event.node_rank,
                event.rank,
                event.time,
                f"step {event.step}: loss null",
            )
            if group is not None and group.detail is None:
                group.detail = f"first at step {event.step} on rank {event.rank}"
        elif isinstance(event, ErrorEvent) and event.message:
            self._message(host, event.node_rank, event.rank, event.time, event.message, "event")

    def _attempt_of(self, event: RankEvent) -> int:
        seen = self._rank_attempts.get(event.rank)
        if seen is None:
            if len(self._rank_attempts) >= MAX_STREAMS:
                return self._attempt or 1  # past any real world size: a host's nonsense
            seen = self._rank_attempts[event.rank] = _RankAttempt()
        if seen.ended or (isinstance(event, StartEvent) and seen.started):
            seen.number, seen.started, seen.ended = seen.number + 1, False, False
        seen.started = seen.started or isinstance(event, StartEvent)
        seen.ended = isinstance(event, (DoneEvent, ErrorEvent))
        return seen.number

    def _error_file(self, line: LogLine) -> None:
        """torchrun's error file: ``{"message": {"message": "Type: text", "extraInfo": …}}``."""
        message = None
        if len(line.text) <= MAX_ERROR_FILE_CHARS:
            try:
                doc = json.loads(line.text)
            except (ValueError, RecursionError):
                doc = None
            inner = doc.get("message") if isinstance(doc, dict) else None
            if isinstance(inner, dict):
                inner = inner.get("message")
            message = inner if isinstance(inner, str) else None
        if message is None:
            self.unreadable_error_files += 1
            return
        self._message(line.host, line.node_rank, line.rank, line.time, message, "error.json")

    def _message(
        self, host: str, node_rank: int, rank: int | None, time: float, message: str, stream: str
    ) -> None:
        """An exception's message (``Type: text`` and maybe more lines): the lines are read as
        a stream of their own, and the first line is a Python error if nothing else matched."""
        before = self._order
        line = LogLine(host, node_rank, rank, stream, time, "")
        for text in message[: MAX_LINE_CHARS * 4].splitlines()[:64]:
            self._line(line, rank, text[:MAX_LINE_CHARS])
        self._streams.pop((host, rank, stream), None)
        first = message.strip().splitlines()[0] if message.strip() else ""
        if self._order == before and first:
            finding = _python_error(first[:MAX_LINE_CHARS]) or _Finding(
                Category.PYTHON_ERROR, normalise(first)
            )
            self._record(finding, host, node_rank, rank, time, first)

    # --- one line -----------------------------------------------------------------------

    def _stream(self, key: _Key) -> _Stream:
        state = self._streams.get(key)
        if state is None:
            if len(self._streams) >= MAX_STREAMS:
                # The stream heard from longest ago goes: it is the least likely to continue.
                del self._streams[next(iter(self._streams))]
            state = self._streams[key] = _Stream()
        return state

    def _line(self, line: LogLine, rank: int | None, text: str) -> None:
        state = self._stream((line.host, rank, line.stream))
        if state.nccl_group is not None and self._nccl_continues(state, text):
            return
        if state.in_block:
            self._block_line(line, state, text)
            return
        body = _strip_prefixes(text.rstrip())
        indented = text[:1].isspace()
        closing = _TORCHRUN_CLOSING.search(body)
        if closing is not None and len(self._closed_by_torchrun) < MAX_STREAMS:
            self._closed_by_torchrun.add((line.host, int(closing.group(1) or closing.group(2))))
        if "ChildFailedError" in body and not indented:
            state.in_traceback = False
            state.in_block, state.block_root, state.entry, state.lines = True, False, None, 0
            return
        if body.startswith(_TRACEBACK):
            state.in_traceback, state.lines = True, 0
            return
        if state.in_traceback and indented:
            # A frame: its source line may well say "RendezvousConnectionError" or "OOM".
            self._traceback_line(line, rank, state, text, body)
            return
        finding = _classify(text)
        if finding is None and (exited := _TORCHRUN_FAILED.search(body)):
            code, local_rank = int(exited.group(1)), int(exited.group(2))
            if code < 0:
                # torchrun's "failed (exitcode: -9) local_rank: 0": a worker killed by a signal.
                finding = _killed(-code)
                rank = self._ranks.get((line.node_rank, local_rank), rank)
        if finding is not None:
            group = self._record(finding, line.host, line.node_rank, rank, line.time, text)
            if (
                finding.category.name.startswith("NCCL_")
                and finding.category is not Category.NCCL_WARN
            ):
                state.nccl_group, state.expect_last_error = group, False
            state.in_traceback = False
            return
        if state.in_traceback:
            self._traceback_line(line, rank, state, text, body)

    def _traceback_line(
        self, line: LogLine, rank: int | None, state: _Stream, text: str, body: str
    ) -> None:
        state.lines += 1
        if state.lines > MAX_TRACEBACK_LINES:
            state.in_traceback = False
        elif text and not text[0].isspace():
            # Interleaved output of two processes may put other lines here; only an exception
            # line ends the traceback.
            finding = _python_error(body)
            if finding is not None:
                state.in_traceback = False
                self._record(finding, line.host, line.node_rank, rank, line.time, text)

    def _nccl_continues(self, state: _Stream, text: str) -> bool:
        """Whether ``text`` continues the NCCL error before it (code, ``Last error:``, detail)."""
        group = state.nccl_group
        assert group is not None
        body = text.strip()
        if state.expect_last_error:
            state.nccl_group, state.expect_last_error = None, False
            if body and group.detail is None:
                group.detail = body[:MAX_MESSAGE_CHARS]
            return True
        if _NCCL_CODE.match(body):
            return True
        last = _LAST_ERROR.match(body)
        if last:
            if last.group(1):
                state.nccl_group = None
                group.detail = group.detail or last.group(1)[:MAX_MESSAGE_CHARS]
            else:
                state.expect_last_error = True
            return True
        state.nccl_group = None
        return False

    def _block_line(self, line: LogLine, state: _Stream, text: str) -> None:
        state.lines += 1
        stripped = text.strip()
        entry = state.entry
        if state.lines > MAX_TRACEBACK_LINES or (stripped.startswith("====") and state.block_root):
            self._end_entry(line, state)
            state.in_block = False
        elif stripped.startswith("Root Cause"):
            self._end_entry(line, state)
            state.block_root = True
        elif _BLOCK_ENTRY.match(stripped):
            self._end_entry(line, state)
            state.entry = _Entry(root=state.block_root)
        elif entry is not None and (field_match := _BLOCK_FIELD.match(text)):
            name, value = field_match.groups()
            state.in_field = name
            if name == "rank" and (ranks := _BLOCK_RANK.match(value)):
                entry.rank, entry.local_rank = int(ranks.group(1)), int(ranks.group(2))
                self._ranks[(line.node_rank, entry.local_rank)] = entry.rank
            elif name == "exitcode" and (code := _BLOCK_EXIT.match(value)):
                entry.exitcode = int(code.group(1))
                entry.pid = int(code.group(2)) if code.group(2) else None
            elif name == "traceback":
                entry.traceback.append(value[:MAX_KEPT_TRACEBACK_CHARS])
        elif entry is not None and state.in_field == "traceback" and text[:1].isspace():
            entry.traceback.append(stripped[:MAX_KEPT_TRACEBACK_CHARS])

    def _end_entry(self, line: LogLine, state: _Stream) -> None:
        """Record the entry just read if it is torchrun's root cause, or a worker killed by a
        signal torchrun did not send.

        torchrun's root cause is the failure with the earliest time, in whole seconds and, for
        a killed worker, when torchrun noticed: a worker SIGKILLed a moment before a second
        ticks over comes after the peer whose collective broke because of it.
        """
        entry, state.entry, state.in_field = state.entry, None, None
        if entry is None:
            return
        killed = entry.exitcode is not None and entry.exitcode < 0
        if not entry.root and not (
            killed and (line.host, entry.pid) not in self._closed_by_torchrun
        ):
            return
        finding = _entry_finding(entry)
        example = next((t for t in reversed(entry.traceback) if t), f"exitcode {entry.exitcode}")
        self._record(
            finding, line.host, line.node_rank, entry.rank, line.time, example, report=True
        )

    # --- recording ----------------------------------------------------------------------

    def _record(
        self,
        finding: _Finding,
        host: str,
        node_rank: int,
        rank: int | None,
        time: float,
        example: str,
        *,
        report: bool = False,
    ) -> _Group | None:
        self._order += 1
        key = (finding.category, finding.message)
        group = self._groups.get(key)
        if group is None and len(self._groups) < MAX_GROUPS:
            group = self._groups[key] = _Group(
                finding.category,
                finding.message,
                finding.cause or finding.category.cause,
                example.strip()[:MAX_EXAMPLE_CHARS],
                time,
            )
        if group is None:
            self.dropped += 1
        else:
            group.add(host, rank, time)
        role = finding.category.role
        if report and role == "root" and finding.category is not Category.KILLED_BY_SIGNAL:
            # torchrun repeating a rank's own error: the rank's lines (if read) came first.
            role = "report"
        if role != "warning":
            self._observe(
                _Observation(
                    time,
                    self._order,
                    host,
                    node_rank,
                    rank,
                    finding.category,
                    role,
                    key if group is not None else None,
                )
            )
        return group

    def _observe(self, obs: _Observation) -> None:
        # Only the first of each rank's failures of a kind can be a first failure; and a flood
        # of one role (a thousand peers losing their connection) never crowds out another.
        seen = (obs.host, obs.rank, obs.category, obs.role)
        kept = self._observations.setdefault(obs.role, [])
        if seen not in self._observed and len(kept) < MAX_OBSERVATIONS:
            self._observed.add(seen)
            kept.append(obs)

    # --- output -------------------------------------------------------------------------

    def first_failure(self) -> Failure | None:
        """The earliest root cause; else torchrun's report; else the earliest consequence.

        A root cause whose line named no rank (torchrun's console) takes the rank torchrun's
        report names on the same host.
        """
        found = self._first()
        if found is None:
            return None
        obs, rank = found
        return Failure(rank, obs.host, obs.node_rank, obs.time, obs.category)

    def _first(self) -> tuple[_Observation, int | None] | None:
        observed = (obs for kept in self._observations.values() for obs in kept)
        by_time = sorted(observed, key=lambda o: (o.time, o.order))
        reports = [o for o in by_time if o.role == "report" and o.rank is not None]
        for role in ("root", "report", "consequence"):
            for obs in by_time:
                # Being told to stop is never where a run failed first: someone else did that.
                if obs.role != role or obs.category is Category.TERMINATED:
                    continue
                if obs.rank is not None:
                    return obs, obs.rank
                return obs, _named_rank(obs, by_time, reports)
        return None

    def diagnoses(self) -> list[Diagnosis]:
        """Every group: the first failure's on top, then root causes, consequences, torchrun's
        reports and warnings, each by time; the generic Python error after the specific ones."""
        found = self._first()
        top = found[0].group if found is not None else None
        order = {"root": 0, "consequence": 1, "report": 2, "warning": 3}

        def rank(group: _Group) -> tuple[int, int, int, float]:
            generic = group.category in (Category.PYTHON_ERROR, Category.CHILD_FAILED)
            first = (group.category, group.message) != top
            return (first, order[group.category.role], generic, group.first_time)

        return [_diagnosis(g) for g in sorted(self._groups.values(), key=rank)]


def _named_rank(
    obs: _Observation, by_time: list[_Observation], reports: list[_Observation]
) -> int | None:
    """The rank of a failure read from a console that does not say: the rank another line
    on that host names for the same category, else the one torchrun's report names."""
    same = (o.rank for o in by_time if o.host == obs.host and o.category is obs.category)
    named = next((rank for rank in same if rank is not None), None)
    if named is None:
        named = next((r.rank for r in reports if r.host == obs.host), None)
    return named


def _entry_finding(entry: _Entry) -> _Finding:
    if entry.exitcode is not None and entry.exitcode < 0:
        return _killed(-entry.exitcode)
    for text in entry.traceback:
        finding = _classify(text)
        if finding is not None and finding.category.role != "warning":
            return finding
    for text in reversed(entry.traceback):
        finding = _python_error(text)
        if finding is not None:
            return finding
    return _Finding(Category.CHILD_FAILED, f"exited with code {entry.exitcode}")


def _diagnosis(group: _Group) -> Diagnosis:
    return Diagnosis(
        category=group.category,
        cause=group.cause,
        fix=group.category.fix,
        message=group.message,
        example=group.example,
        ranks=tuple(sorted(group.ranks)),
        hosts=tuple(sorted(group.hosts)),
        count=group.count,
        first_time=group.first_time,
        detail=group.detail,
    )
