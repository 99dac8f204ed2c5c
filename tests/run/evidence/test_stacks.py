"""Reading and grouping the ranks' stacks (:mod:`ddptui.run.evidence.stacks`), and their words."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ddptui.present.stacks import dump_lines
from ddptui.run.evidence.kept import StackDump
from ddptui.run.evidence.stacks import Frame, RankStack, group, parse_stacks, rank_spans

FAULTHANDLER = """\
Thread 0x00007f2a8e7fc640 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f2a9f4a3b80 (most recent call first):
  File "/venv/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/w/runs/r1/code/train.py", line 40 in step
  File "/w/runs/r1/code/train.py", line 55 in <module>
"""
PY_SPY = """\
Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    sleep_here (train.py:12)
    step (train.py:41)
    <module> (train.py:55)
Thread 4250 (idle): "pin_memory"
    select (selectors.py:415)
"""


def _rank(rank: int, text: str, host: str = "node0") -> RankStack:
    return RankStack(host, rank // 2, rank, 1000 + rank, "faulthandler", parse_stacks(text))


def test_faulthandler_s_threads_are_read_and_the_main_one_found() -> None:
    threads = parse_stacks(FAULTHANDLER)
    assert [len(thread.frames) for thread in threads] == [2, 3]
    main = _rank(0, FAULTHANDLER).main
    assert main is not None and main.frames[0] == Frame(
        "all_reduce",
        "/venv/torch/distributed/distributed_c10d.py",
        3252,
    )
    assert main.frames[-1].function == "<module>"


def test_the_same_frame_from_py_spy_and_faulthandler_is_the_same() -> None:
    spied = parse_stacks(
        'Thread 7 (idle): "MainThread"\n'
        "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)\n"
    )
    handled = parse_stacks(
        "Current thread 0x1 (most recent call first):\n"
        '  File "/venv/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
    )
    assert spied[0].frames[0].key == handled[0].frames[0].key


def test_py_spy_s_threads_are_read_by_name() -> None:
    threads = parse_stacks(PY_SPY)
    assert [thread.name for thread in threads] == ["MainThread", "pin_memory"]
    main = _rank(0, PY_SPY).main
    assert main is not None
    assert [frame.where for frame in main.frames] == ["train.py:12", "train.py:41", "train.py:55"]


def test_the_odd_rank_comes_first_with_the_frames_it_differs_in() -> None:
    # The same stack on other hosts sits under other directories: it is still the same stack.
    waiting = [
        _rank(rank, FAULTHANDLER.replace("/w/runs", f"/home/n{rank // 2}/runs"), f"node{rank // 2}")
        for rank in (0, 2, 3, 4, 5)
    ]
    groups = group([*waiting, _rank(1, PY_SPY)])
    assert [[stack.rank for stack in g.ranks] for g in groups] == [[1], [0, 2, 3, 4, 5]]
    assert [frame.function for frame in groups[0].differing] == ["sleep_here", "step"]
    assert groups[1].differing == ()
    dump = StackDump("r1", 0.0, groups[0].ranks + groups[1].ranks)
    lines = [line.plain for line in dump_lines(dump)]
    assert lines[0] == "2 different stacks; the odd ones first:"
    assert lines[1] == "rank 1 on node0: sleep_here ← step ← <module> at train.py:12"
    assert lines[2] == "    train.py:12 in sleep_here"
    assert lines[4] == (
        "ranks 0, 2–5 on node0, node1, node2: all_reduce ← step ← <module> at "
        "distributed_c10d.py:3252"
    )


def test_ranks_without_a_stack_and_hosts_without_an_answer_are_named() -> None:
    without = RankStack("node1", 1, 3, 77, error="no stack handler in this process: not signalled")
    dump = StackDump(
        "r1",
        0.0,
        (_rank(0, FAULTHANDLER), without),
        unanswered=("node2: connection refused",),
        saved_in=Path("/state/r1/dumps/t"),
    )
    lines = [line.plain for line in dump_lines(dump)]
    assert "rank 3 on node1 (pid 77): no stack handler in this process: not signalled" in lines
    assert "no answer from node2: connection refused" in lines
    assert lines[-1] == "kept as the hosts sent them: /state/r1/dumps/t"


def test_rank_spans() -> None:
    assert rank_spans([5, 0, 2, 3, 4, 9]) == "0, 2–5, 9"
    assert rank_spans([7]) == "7"


@given(st.text(alphabet='File "line in ()Thread0x:12\n \t<>', max_size=3000))
def test_any_text_reads_as_threads_or_nothing(text: str) -> None:
    for thread in parse_stacks(text):
        for frame in thread.frames:
            assert frame.line >= 0 and "\n" not in frame.function
