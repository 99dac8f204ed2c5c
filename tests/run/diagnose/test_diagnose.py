"""Diagnosing failures from real recordings: NCCL on an H200, gloo and c10d on the test bed."""

from __future__ import annotations

import itertools
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.run.diagnose import (
    MAX_GROUPS,
    MAX_RANKS_PER_GROUP,
    Category,
    Diagnoser,
    Diagnosis,
    LogLine,
    normalise,
)
from ddptui.run.following.events import ErrorEvent, RankEvent, StartEvent, StepEvent, parse_event
from tests.helpers import check_first_failure, replay, top_diagnosis

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NCCL = FIXTURES / "nccl"
GLOO = FIXTURES / "gloo"


def _feed_file(
    diagnoser: Diagnoser, path: Path, stream: str, rank: int | None, host: str = "vm", t0: float = 0
) -> None:
    for i, text in enumerate(path.read_text().splitlines()):
        diagnoser.feed(LogLine(host, 0, rank, stream, t0 + i / 1000, text))


def _by_category(diagnoser: Diagnoser) -> dict[Category, list[Diagnosis]]:
    found: dict[Category, list[Diagnosis]] = {}
    for d in diagnoser.diagnoses():
        found.setdefault(d.category, []).append(d)
    return found


# --- the H200 recordings (NCCL) -------------------------------------------------------------


def test_bad_socket_interface_is_nccl_invalid_usage_with_nccls_last_error() -> None:
    diagnoser = Diagnoser()
    # One process: its stdout file is rank 0's; the stderr is torchrun's console.
    _feed_file(diagnoser, NCCL / "bad-socket-ifname.stdout.txt", "stdout", 0)
    _feed_file(diagnoser, NCCL / "bad-socket-ifname.stderr.txt", "torchrun", None, t0=1)
    failure = diagnoser.first_failure()
    assert failure is not None
    assert (failure.category, failure.rank, failure.host) == (Category.NCCL_INVALID_USAGE, 0, "vm")
    top = top_diagnosis(diagnoser)
    assert top.category is Category.NCCL_INVALID_USAGE
    assert top.detail == "Bootstrap : no socket interface found"
    assert top.ranks == (0,) and top.hosts == ("vm",)
    assert top.example.startswith("torch.distributed.DistBackendError: NCCL error in:")
    assert "NCCL_SOCKET_IFNAME" in top.fix
    # rank 0's traceback and torchrun's report of it are one failure, not two.
    assert len(_by_category(diagnoser)[Category.NCCL_INVALID_USAGE]) == 1
    (warn,) = _by_category(diagnoser)[Category.NCCL_WARN]
    assert warn.message == "Bootstrap : no socket interface found" and warn.ranks == (0,)
    assert Category.PYTHON_ERROR not in _by_category(diagnoser)


def test_duplicate_gpu_groups_both_ranks_and_takes_the_rank_from_torchruns_report() -> None:
    diagnoser = Diagnoser()
    _feed_file(diagnoser, NCCL / "duplicate-gpu.stdout.txt", "stdout", None)
    _feed_file(diagnoser, NCCL / "duplicate-gpu.stderr.txt", "torchrun", None, t0=1)
    failure = diagnoser.first_failure()
    assert failure is not None
    # Two interleaved processes on one console: only torchrun's "Root Cause" names rank 0.
    assert (failure.category, failure.rank) == (Category.NCCL_INVALID_USAGE, 0)
    top = top_diagnosis(diagnoser)
    assert top.category is Category.NCCL_INVALID_USAGE and top.count == 2
    assert top.detail is not None and top.detail.startswith("Duplicate GPU detected : rank ")
    (warn,) = _by_category(diagnoser)[Category.NCCL_WARN]
    assert warn.count == 2, "rank 0's and rank 1's warning differ only in numbers"
    assert warn.message == "Duplicate GPU detected : rank N and rank N both on CUDA device N"


def test_the_trainers_refusal_names_the_root_cause_rank() -> None:
    diagnoser = Diagnoser()
    _feed_file(diagnoser, NCCL / "trainer-nccl-too-few-gpus.stderr.txt", "torchrun", None)
    failure = diagnoser.first_failure()
    assert failure is not None
    # Rank 0 shows in torchrun's list with exit code -15: torchrun stopped it after rank 1 failed.
    assert (failure.category, failure.rank) == (Category.TRAINER_ERROR, 1)
    top = top_diagnosis(diagnoser)
    assert top.category is Category.TRAINER_ERROR
    assert (
        top.message == "TrainerError: --backend nccl needs one GPU per local rank: "
        "N local ranks, N GPUs visible"
    )
    assert Category.KILLED_BY_SIGNAL not in _by_category(diagnoser)


def test_a_healthy_nccl_start_diagnoses_nothing() -> None:
    diagnoser = Diagnoser()
    _feed_file(diagnoser, NCCL / "healthy-init.NCCL_DEBUG=INFO.stdout.txt", "stdout", 0)
    assert diagnoser.diagnoses() == [] and diagnoser.first_failure() is None


def test_the_recorded_nccl_error_event_carries_nccls_last_error() -> None:
    event = parse_event((FIXTURES / "events" / "nccl-error.rank0.jsonl").read_text())
    assert isinstance(event, ErrorEvent)
    diagnoser = Diagnoser()
    diagnoser.feed_event("vm", event)
    top = top_diagnosis(diagnoser)
    assert top.category is Category.NCCL_INVALID_USAGE
    assert top.detail == "Bootstrap : no socket interface found" and top.ranks == (0,)
    failure = diagnoser.first_failure()
    assert failure is not None and (failure.rank, failure.time) == (0, event.time)


def test_every_nccl_recording_is_covered() -> None:
    # A new recording needs a test above saying what it is.
    assert sorted(p.name for p in NCCL.iterdir()) == [
        "bad-socket-ifname.stderr.txt",
        "bad-socket-ifname.stdout.txt",
        "duplicate-gpu.stderr.txt",
        "duplicate-gpu.stdout.txt",
        "healthy-init.NCCL_DEBUG=INFO.stdout.txt",
        "trainer-nccl-too-few-gpus.stderr.txt",
    ]


# --- the test-bed recordings (gloo, c10d), replayed in the order they arrived ----------------

SCENARIOS = sorted(p.name for p in GLOO.iterdir() if (p / "expected.json").exists())


def test_the_recordings_are_all_here() -> None:
    assert SCENARIOS == [
        "hostname-loopback",
        "master-port-in-use",
        "master-unreachable",
        "rank-frozen",
        "sigkill-mid-allreduce",
        "sigkill-peer-named-root",
    ]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("sources", ["everything", "no events", "consoles only"])
def test_each_recorded_failure_gets_its_category_and_first_failing_node(
    scenario: str, sources: str
) -> None:
    diagnoser = Diagnoser()
    replayed = replay(
        diagnoser, GLOO / scenario, events=sources == "everything", ranks=sources != "consoles only"
    )
    check_first_failure(diagnoser, replayed)


def test_a_sigkilled_rank_is_the_root_cause_and_its_peers_are_bystanders() -> None:
    diagnoser = Diagnoser()
    replay(diagnoser, GLOO / "sigkill-mid-allreduce")
    top = top_diagnosis(diagnoser)
    assert top.category is Category.KILLED_BY_SIGNAL
    assert top.message == "killed by SIGKILL (exit code -9)" and top.ranks == (2,)
    assert "out-of-memory killer" in top.cause
    lost = _by_category(diagnoser)[Category.PEER_LOST]
    assert {rank for d in lost for rank in d.ranks} == {0, 1, 3}
    # "closed by peer" and "reset by peer", each one group across ranks, ports and addresses.
    assert len(lost) == 2
    assert all("<addr>" in d.message for d in lost)
    assert Category.PYTHON_ERROR not in _by_category(diagnoser)


def test_the_loopback_hostname_trap_is_named_as_such() -> None:
    diagnoser = Diagnoser()
    replay(diagnoser, GLOO / "hostname-loopback")
    failure = diagnoser.first_failure()
    assert failure is not None and failure.rank in (0, 1)
    top = top_diagnosis(diagnoser)
    assert top.category is Category.GLOO_CONNECT and "127.0.1.1" in top.cause
    assert "GLOO_SOCKET_IFNAME" in top.fix


def test_a_store_timeout_on_a_worker_names_the_worker_node() -> None:
    diagnoser = Diagnoser()
    replay(diagnoser, GLOO / "master-unreachable")
    failure = diagnoser.first_failure()
    assert failure is not None and failure.rank is None, "no worker process ever started"
    top = top_diagnosis(diagnoser)
    assert top.category is Category.STORE_TIMEOUT
    assert (
        top.message
        == "The client socket has timed out after Nms while trying to connect to (<addr>, N)."
    )


def test_a_taken_master_port_is_address_in_use() -> None:
    diagnoser = Diagnoser()
    replay(diagnoser, GLOO / "master-port-in-use")
    (diagnosis,) = diagnoser.diagnoses()
    assert diagnosis.category is Category.ADDRESS_IN_USE and diagnosis.hosts == ("ddpr-node0",)
    assert "EADDRINUSE" in diagnosis.example


# --- lines, noise and bounds -----------------------------------------------------------------


def _feed(diagnoser: Diagnoser, text: str, rank: int | None = 0, stream: str = "stderr") -> None:
    diagnoser.feed(LogLine("gpu-a", 0, rank, stream, 1.0, text))


def test_known_noise_is_no_diagnosis() -> None:
    diagnoser = Diagnoser()
    for text in [
        "/venv/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py:368: "
        "UserWarning: Failed to initialize NumPy: No module named 'numpy' (Triggered internally)",
        '  cpu = _conversion_method_template(device=torch.device("cpu"))',
        "[W1130 23:19:30.034621059 socket.cpp:207] [c10d] The hostname of the client socket "
        "cannot be retrieved. err=-3",
        "W1130 23:19:33.702000 19016 torch/distributed/elastic/multiprocessing/api.py:1028] "
        "Sending process 19050 closing signal SIGTERM",
        "vm:614:614 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>",
        "trainer: warning: no checkpoint in /runs/x/checkpoints: starting from scratch",
    ]:
        _feed(diagnoser, text)
    assert diagnoser.diagnoses() == [] and diagnoser.first_failure() is None


@pytest.mark.parametrize(
    ("text", "category"),
    [
        # Message shapes from torch's and NCCL's sources, for failures this machine cannot make.
        (
            "[rank1]:[E1130 22:25:36.602951756 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
            Category.COLLECTIVE_TIMEOUT,
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a "
            "total capacity of 139.81 GiB of which 1.50 GiB is free.",
            Category.CUDA_OOM,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            "c10d/ProcessGroupNCCL.cpp:2084, unhandled system error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.21.5",
            Category.NCCL_SYSTEM_ERROR,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, "
            "remote process exited or there was a network error, NCCL version 2.19.3",
            Category.NCCL_REMOTE_ERROR,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, internal error - please "
            "report this issue to the NCCL developers, NCCL version 2.18.1",
            Category.NCCL_INTERNAL_ERROR,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, NCCL operation in "
            "progress, NCCL version 2.18.1",
            Category.NCCL_ERROR,
        ),
        ("ncclInternalError: Internal check failed.", Category.NCCL_INTERNAL_ERROR),
        (
            "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. "
            "1/2 clients joined.",
            Category.STORE_TIMEOUT,
        ),
        (
            "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection "
            "to the C10d store has failed.",
            Category.STORE_TIMEOUT,
        ),
        ("  traceback : Signal 11 (SIGSEGV) received by PID 4242", Category.KILLED_BY_SIGNAL),
    ],
)
def test_single_lines_of_other_failures(text: str, category: Category) -> None:
    diagnoser = Diagnoser()
    _feed(diagnoser, text)
    assert top_diagnosis(diagnoser).category is category


def test_a_traceback_ends_at_its_exception_and_frames_are_not_findings() -> None:
    diagnoser = Diagnoser()
    for text in [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "    raise RendezvousConnectionError('CUDA out of memory')  # a frame, not a finding",
        "ValueError: bad shape (3, 4)",
        "ValueError: not in a traceback, so not a finding",
    ]:
        _feed(diagnoser, text)
    (diagnosis,) = diagnoser.diagnoses()
    assert diagnosis.category is Category.PYTHON_ERROR
    assert diagnosis.message == "ValueError: bad shape (N, N)"


def test_tracebacks_are_followed_per_rank_and_stream() -> None:
    diagnoser = Diagnoser()
    _feed(diagnoser, "Traceback (most recent call last):", rank=0)
    _feed(diagnoser, "KeyError: 'lr'", rank=1)  # another rank: no traceback open there
    _feed(diagnoser, '  File "x.py", line 1', rank=0)
    _feed(diagnoser, "KeyError: 'lr'", rank=0)
    (diagnosis,) = diagnoser.diagnoses()
    assert diagnosis.ranks == (0,) and diagnosis.count == 1


def test_an_error_event_without_a_known_pattern_is_a_python_error() -> None:
    diagnoser = Diagnoser()
    event = ErrorEvent(
        rank=3, local_rank=1, node_rank=1, world_size=4, time=5.0, message="ZeroDivisionError: x"
    )
    diagnoser.feed_event("gpu-b", event)
    failure = diagnoser.first_failure()
    assert failure is not None
    assert (failure.rank, failure.host, failure.node_rank, failure.category) == (
        3,
        "gpu-b",
        1,
        Category.PYTHON_ERROR,
    )


def test_a_nonfinite_loss_is_diagnosed_but_is_no_failure() -> None:
    diagnoser = Diagnoser()
    for step in (7, 8):
        diagnoser.feed_event(
            "gpu-a",
            StepEvent(rank=0, local_rank=0, node_rank=0, world_size=1, time=step, step=step),
        )
    diagnoser.feed_event(
        "gpu-a",
        StepEvent(rank=0, local_rank=0, node_rank=0, world_size=1, time=9, step=9, loss=0.5),
    )
    (diagnosis,) = diagnoser.diagnoses()
    assert diagnosis.category is Category.NONFINITE_LOSS and diagnosis.count == 2
    assert diagnosis.detail == "first at step 7 on rank 0"
    assert diagnoser.first_failure() is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"message": 3}',
        '{"message": {"message": null}}',
        "[" * 100_000,
        "x" * (2 << 20),
    ],
)
def test_unreadable_error_files_are_counted_not_raised(text: str) -> None:
    diagnoser = Diagnoser()
    _feed(diagnoser, text, stream="error.json")
    assert diagnoser.unreadable_error_files == 1 and diagnoser.diagnoses() == []


def _rank0(kind: type[RankEvent], time: float, **fields: Any) -> RankEvent:
    return kind(rank=0, local_rank=0, node_rank=0, world_size=2, time=time, **fields)


def test_only_the_asked_attempts_events_count() -> None:
    events = [
        _rank0(StartEvent, 1.0),
        _rank0(ErrorEvent, 2.0, message="ValueError: attempt one"),
        # Attempt 2 fails before its start event (the process group did not come up).
        _rank0(ErrorEvent, 3.0, message="RuntimeError: attempt two"),
        # Attempt 3 is killed without a word; attempt 4 starts.
        _rank0(StartEvent, 4.0),
        _rank0(StepEvent, 5.0, step=1, loss=None),
        _rank0(StartEvent, 6.0),
        _rank0(ErrorEvent, 7.0, message="KeyError: attempt four"),
    ]
    found = {}
    for attempt in (None, 1, 2, 3, 4, 5):
        diagnoser = Diagnoser(attempt)
        for event in events:
            diagnoser.feed_event("gpu-a", event)
        found[attempt] = sorted(d.message for d in diagnoser.diagnoses())
    assert found == {
        None: sorted(
            [
                "ValueError: attempt one",
                "RuntimeError: attempt two",
                "KeyError: attempt four",
                "loss is NaN or infinite",
            ]
        ),
        1: ["ValueError: attempt one"],
        2: ["RuntimeError: attempt two"],
        3: ["loss is NaN or infinite"],
        4: ["KeyError: attempt four"],
        5: [],
    }


def test_normalise_makes_ranks_of_one_failure_alike() -> None:
    a = "Connection closed by peer [10.213.1.11]:53476 at 2026-11-30_23:19:33 (pid 19048) 0x7fb0cb"
    b = "Connection closed by peer [10.0.0.2]:9 at 2026-12-01_01:02:03 (pid 7) 0x1"
    assert (
        normalise(a) == normalise(b) == "Connection closed by peer <addr> at <time> (pid N) <hex>"
    )


def _word(i: int) -> str:
    """A different word for every ``i``, of letters only: normalising leaves it distinct."""
    letters = ""
    while True:
        i, digit = divmod(i, 26)
        letters += chr(ord("a") + digit)
        if i == 0:
            return letters


def _flood(n: int) -> Iterator[LogLine]:
    """``n`` lines, each different from all others after normalising, from ever new streams."""
    for i in range(n // 2):
        host, word = f"host-{_word(i)}", _word(i)
        yield LogLine(host, i % 64, i, "stderr", float(i), "Traceback (most recent call last):")
        yield LogLine(host, i % 64, i, "stderr", float(i), f"RuntimeError: failure {word}")


def test_a_flood_of_distinct_lines_stays_bounded() -> None:
    diagnoser = Diagnoser()
    flood = _flood(100_000)
    tracemalloc.start()
    try:
        # Past every cap after half the lines: the other half must not grow what is kept.
        for line in itertools.islice(flood, 50_000):
            diagnoser.feed(line)
        half, _ = tracemalloc.get_traced_memory()
        for line in flood:
            diagnoser.feed(line)
        full, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert full - half < 64 * 1024, f"grew by {(full - half) / 1024:.0f} KiB"
    diagnoses = diagnoser.diagnoses()
    assert len(diagnoses) == MAX_GROUPS and diagnoser.dropped == 50_000 - MAX_GROUPS
    assert sum(d.count for d in diagnoses) == MAX_GROUPS
    failure = diagnoser.first_failure()
    assert failure is not None and (failure.rank, failure.host) == (0, "host-a")


def test_a_crowd_of_bystanders_does_not_hide_the_rank_that_died() -> None:
    diagnoser = Diagnoser()
    for rank in range(1, 5000):
        text = f"RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.{rank % 250}]:{rank}"
        diagnoser.feed(LogLine(f"node{rank // 8}", rank // 8, rank, "stderr", 10.0, text))
    # torchrun's report of the SIGKILL arrives after every peer's complaint.
    killed = "E1130 23:19:33.770000 19016 api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 1)"
    diagnoser.feed(LogLine("node0", 0, None, "torchrun", 11.0, killed))
    failure = diagnoser.first_failure()
    assert failure is not None
    assert (failure.category, failure.host) == (Category.KILLED_BY_SIGNAL, "node0")
    (lost,) = [d for d in diagnoser.diagnoses() if d.category is Category.PEER_LOST]
    assert lost.count == 4999 and len(lost.ranks) == MAX_RANKS_PER_GROUP  # the first ones


def test_a_peer_torchrun_ended_with_sigterm_is_never_the_first_failure() -> None:
    # Recorded on the test bed: rank 3 SIGKILLed, rank 2 losing it and then ended by torchrun
    # with SIGTERM; torchrun's whole-second failure times named rank 2 first.
    diagnoser = Diagnoser()
    lost = "[rank2]: RuntimeError: [pair.cc:537] Read error [10.0.0.1]:2: Connection reset by peer"
    diagnoser.feed(LogLine("node1", 1, 2, "stderr", 10.0, lost))
    termed = "E1201 03:26:04.100000 9 api.py:1002] failed (exitcode: -15) local_rank: 0 (pid: 7)"
    diagnoser.feed(LogLine("node1", 1, None, "torchrun", 10.1, termed))
    killed = "E1201 03:26:04.100000 9 api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 8)"
    diagnoser.feed(LogLine("node1", 1, 3, "torchrun", 10.2, killed))
    failure = diagnoser.first_failure()
    assert failure is not None
    assert (failure.category, failure.rank) == (Category.KILLED_BY_SIGNAL, 3)
    terminated = [d for d in diagnoser.diagnoses() if d.category is Category.TERMINATED]
    assert terminated and terminated[0].message == "terminated by SIGTERM (exit code -15)"


def test_one_long_stream_of_warnings_is_one_group() -> None:
    diagnoser = Diagnoser()
    for i in range(20_000):
        diagnoser.feed(
            LogLine(
                "gpu-a", 0, i % 8, "stdout", float(i), f"h:{i}:{i} [0] x.cc:1 NCCL WARN slow {i}"
            )
        )
    (diagnosis,) = diagnoser.diagnoses()
    assert diagnosis.count == 20_000 and diagnosis.ranks == tuple(range(8))
    assert diagnosis.message == "slow N"


LINE_PARTS = [
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in f',
    "[rank3]: ",
    "torch.distributed.DistBackendError: NCCL error in: a.cpp:1, invalid usage, NCCL version 2",
    "ncclInvalidUsage: x",
    "Last error:",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "====",
    "Root Cause (first observed failure):",
    "[0]:",
    "  rank      : 2 (local_rank: 0)",
    "  exitcode  : -9 (pid: 1)",
    "  traceback : Signal 9 (SIGKILL) received by PID 1",
    "vm:1:1 [0] NCCL WARN ",
    "failed (exitcode: -11) local_rank: 5 (pid: 2)",
    "ValueError: ",
    "\x1b[31m",
    "[",
    ":",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(LINE_PARTS) | st.text(max_size=30), max_size=4),
            st.sampled_from(["stdout", "stderr", "torchrun", "error.json"]),
            st.none() | st.integers(min_value=0, max_value=3),
        ),
        max_size=30,
    )
)
def test_any_lines_in_any_order_never_raise(lines: list[tuple[list[str], str, int | None]]) -> None:
    diagnoser = Diagnoser()
    for i, (parts, stream, rank) in enumerate(lines):
        diagnoser.feed(LogLine("h", 0, rank, stream, float(i), "".join(parts)))
    diagnoses = diagnoser.diagnoses()
    failure = diagnoser.first_failure()
    assert (failure is None) or any(d.category is failure.category for d in diagnoses)


@pytest.mark.parametrize(
    "text",
    [
        "a" * 5000,
        "a." * 2500,
        ":1" * 2500,
        "[" + ":" * 5000,
        "1." * 2500,
        "NCCL error in: " + "," * 5000,
        "Traceback (most recent call last):" * 150,
    ],
)
def test_hostile_lines_cost_little(text: str) -> None:
    diagnoser = Diagnoser()
    began = time.perf_counter()
    for _ in range(20):
        diagnoser.feed(LogLine("h", 0, 0, "stderr", 0.0, text))
    # Linear regexes on a line cut to 4 KiB: well under a millisecond each; a slow shared
    # machine still stays far below this.
    assert time.perf_counter() - began < 1.0


def _diagnose_run(events: list[RankEvent]) -> Diagnoser:
    diagnoser = Diagnoser()
    for event in events:
        diagnoser.feed_event("this-host", event)
    return diagnoser


@pytest.mark.slow
def test_real_cpu_runs_are_diagnosed_from_their_events(
    cpu_events: dict[str, list[RankEvent]],
) -> None:
    assert _diagnose_run(cpu_events["completed"]).diagnoses() == []
    assert _diagnose_run(cpu_events["stopped"]).diagnoses() == []
    (diverged,) = _diagnose_run(cpu_events["diverged"]).diagnoses()
    assert diverged.category is Category.NONFINITE_LOSS and diverged.count == 7
    assert diverged.detail == "first at step 2 on rank 0"
    failed = _diagnose_run(cpu_events["failed"])
    failure = failed.first_failure()
    assert failure is not None and (failure.category, failure.rank) == (Category.TRAINER_ERROR, 0)
    assert top_diagnosis(failed).message.startswith(
        "TrainerError: cannot resume: unreadable manifest"
    )
