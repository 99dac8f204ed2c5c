"""Every rank's Python stacks, as ``ddptui dump`` gathers them: read from what the hosts sent,
and grouped, so that the one rank a hung run waits for stands out from the many waiting.

Pure: the text comes from the node agent's ``dump`` (``py-spy dump`` or faulthandler's format),
untrusted, and is read with string operations alone (no pattern to backtrack on), within caps.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ddptui.untrusted import plain

MAX_THREADS = 256
MAX_FRAMES = 256
"""Per thread; deeper stacks keep their innermost frames."""
MAX_NAME_CHARS = 200
MAX_FILE_CHARS = 400
MODULE_FRAME = "<module>"


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    @property
    def where(self) -> str:
        return f"{posixpath.basename(self.file)}:{self.line}"

    @property
    def key(self) -> tuple[str, str]:
        """The same frame on every host: the directories differ (each node's run directory,
        each host's Python), the file, line and function do not. py-spy names a function by
        its qualified name (``_exception_logger.<locals>.wrapper``), faulthandler by its own."""
        return self.function.rpartition(".")[2], self.where


@dataclass(frozen=True)
class ThreadStack:
    name: str
    frames: tuple[Frame, ...]
    """Innermost first, as both formats print them."""

    @property
    def is_main(self) -> bool:
        # faulthandler names no thread; only the main thread runs the script's module frame.
        return self.name == "MainThread" or (
            bool(self.frames) and self.frames[-1].function == MODULE_FRAME
        )


@dataclass(frozen=True)
class RankStack:
    """One rank's answer: its threads, or why there are none."""

    host: str
    node_rank: int
    rank: int
    pid: int
    via: str = ""
    """``py-spy`` or ``faulthandler``; empty when no stack came."""
    threads: tuple[ThreadStack, ...] = ()
    error: str = ""
    note: str = ""
    """Why py-spy was not used on a host that has it (ptrace refused, say)."""
    text: str = ""
    """What the host sent, as it sent it (capped by the agent)."""

    @property
    def main(self) -> ThreadStack | None:
        return next((thread for thread in self.threads if thread.is_main), None) or next(
            iter(self.threads), None
        )

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        """What ranks doing the same thing share: their main thread's frames."""
        main = self.main
        return () if main is None else tuple(frame.key for frame in main.frames)


@dataclass(frozen=True)
class StackGroup:
    ranks: tuple[RankStack, ...]
    frames: tuple[Frame, ...]
    differing: tuple[Frame, ...] = field(default=())
    """Frames of this group's stack not in the largest group's, innermost first (empty for the
    largest group itself)."""


def parse_stacks(text: str) -> tuple[ThreadStack, ...]:
    """The threads in faulthandler's or ``py-spy dump``'s text; what is neither is skipped."""
    threads: list[ThreadStack] = []
    name: str | None = None
    frames: list[Frame] = []

    def close() -> None:
        if name is not None and len(threads) < MAX_THREADS:
            threads.append(ThreadStack(name, tuple(frames[:MAX_FRAMES])))

    for raw in text.splitlines():
        line = raw.strip()
        header = _thread_name(line)
        if header is not None:
            close()
            name, frames = header, []
            continue
        frame = _faulthandler_frame(line) or _py_spy_frame(line)
        if frame is not None and name is not None:
            frames.append(frame)
    close()
    return tuple(threads)


def _thread_name(line: str) -> str | None:
    # faulthandler: "Thread 0x00007f… (most recent call first):", "Current thread 0x…";
    # py-spy: 'Thread 1234 (idle): "MainThread"'.
    if line.endswith("(most recent call first):"):
        words = line.split()
        return plain(words[-5] if len(words) >= 5 else "thread", limit=MAX_NAME_CHARS)
    if line.startswith("Thread ") and line.endswith('"') and ': "' in line:
        return plain(line[line.rindex(': "') + 3 : -1], limit=MAX_NAME_CHARS, one_line=True)
    return None


def _faulthandler_frame(line: str) -> Frame | None:
    # File "/code/loop.py", line 123 in step
    if not line.startswith('File "'):
        return None
    file, found, rest = line[len('File "') :].rpartition('", line ')
    number, found_in, function = rest.partition(" in ")
    if not (found and found_in and number.isascii() and number.isdigit()):
        return None
    return _frame(function, file, number)


def _py_spy_frame(line: str) -> Frame | None:
    # step (loop.py:123), or with --locals and idle markers after it on other lines
    if not line.endswith(")"):
        return None
    function, found, where = line[:-1].rpartition(" (")
    file, colon, number = where.rpartition(":")
    if not (found and colon and number.isascii() and number.isdigit()):
        return None
    return _frame(function, file, number)


def _frame(function: str, file: str, number: str) -> Frame:
    return Frame(
        plain(function, limit=MAX_NAME_CHARS, one_line=True),
        plain(file, limit=MAX_FILE_CHARS, one_line=True),
        int(number[:12]),
    )


def group(stacks: Iterable[RankStack]) -> list[StackGroup]:
    """Ranks with the same main-thread stack together, the odd ones first: the smallest groups,
    then by their lowest rank. Ranks that sent no stack are in no group."""
    by_key: dict[tuple[tuple[str, str], ...], list[RankStack]] = {}
    for stack in sorted(stacks, key=lambda stack: stack.rank):
        if stack.threads:
            by_key.setdefault(stack.key, []).append(stack)
    ordered = sorted(by_key.values(), key=lambda ranks: (len(ranks), ranks[0].rank))
    if not ordered:
        return []
    usual = set(ordered[-1][0].key)
    groups = []
    for index, ranks in enumerate(ordered):
        main = ranks[0].main
        frames = () if main is None else main.frames
        odd = index < len(ordered) - 1
        differing = tuple(f for f in frames if f.key not in usual) if odd else ()
        groups.append(StackGroup(tuple(ranks), frames, differing))
    return groups


def rank_spans(ranks: Sequence[int]) -> str:
    """``0, 2–5, 9``: runs of consecutive ranks as spans."""
    spans: list[str] = []
    ordered = sorted(set(ranks))
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            first, last = ordered[start], ordered[index - 1]
            spans.append(str(first) if first == last else f"{first}–{last}")
            start = index
    return ", ".join(spans)
