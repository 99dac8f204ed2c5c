"""The failure catalogue: every :class:`Category` with its role, cause and fix, and the values a
diagnosis is given as (:class:`Diagnosis` per group, :class:`Failure` for the first failure).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

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

LOOPBACK_CAUSE: Final = (
    "gloo could not connect the ranks: a rank advertised a loopback address (127.x) to its "
    "peers, because its hostname resolves to 127.0.1.1 or 127.0.0.1 (the Debian /etc/hosts "
    "default) and GLOO_SOCKET_IFNAME is not set."
)


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
