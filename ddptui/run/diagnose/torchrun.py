"""What torchrun itself writes: its console's lines about its workers, and the ChildFailedError
block it prints when a worker fails.

The block lists every failed worker as an ``[N]:`` entry (time, host, rank, exit code, error
file, traceback), the root cause first, after its "Root Cause" line. :class:`Block` reads it
line by line; :func:`entry_finding` says what an entry tells.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from ddptui.run.diagnose.catalogue import Category
from ddptui.run.diagnose.limits import (
    MAX_KEPT_TRACEBACK_CHARS,
    MAX_KEPT_TRACEBACK_LINES,
    MAX_TRACEBACK_LINES,
)
from ddptui.run.diagnose.lines import Finding, classify, killed, python_error

TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?[0-9]{1,9})\) local_rank: ([0-9]{1,9})")
# torchrun ending its other workers: their deaths by these signals are its doing.
TORCHRUN_CLOSING = re.compile(
    r"Sending process ([0-9]{1,9}) closing signal|Unable to shutdown process ([0-9]{1,9}) via"
)

_BLOCK_FIELD = re.compile(r"^\s+(time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_BLOCK_ENTRY = re.compile(r"^\[\d+\]:\s*$")
_BLOCK_RANK = re.compile(r"^([0-9]{1,9}) \(local_rank: ([0-9]{1,9})\)")
_BLOCK_EXIT = re.compile(r"^(-?[0-9]{1,9})(?: \(pid: ([0-9]{1,9})\))?")


@dataclass
class Entry:
    """One ``[N]:`` entry of torchrun's ChildFailedError block."""

    root: bool
    rank: int | None = None
    local_rank: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    traceback: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_KEPT_TRACEBACK_LINES))


class BlockRead(NamedTuple):
    """What one line of the block did."""

    ended: Entry | None = None
    """The entry it ended: the next began, or the block did."""
    named: tuple[int, int] | None = None
    """(local rank, rank) of an entry whose ``rank`` field it was."""
    done: bool = False
    """The block ended (or ran past :data:`MAX_TRACEBACK_LINES`)."""


@dataclass
class Block:
    """torchrun's ChildFailedError block, as far as one stream has written it."""

    lines: int = 0
    root: bool = False
    """Past its "Root Cause" line."""
    entry: Entry | None = None
    """The entry being read; a root cause entry is recorded when the next begins."""
    in_field: str | None = None

    def read(self, text: str) -> BlockRead:
        self.lines += 1
        stripped = text.strip()
        entry = self.entry
        if self.lines > MAX_TRACEBACK_LINES or (stripped.startswith("====") and self.root):
            return BlockRead(ended=self._end_entry(), done=True)
        if stripped.startswith("Root Cause"):
            ended = self._end_entry()
            self.root = True
            return BlockRead(ended=ended)
        if _BLOCK_ENTRY.match(stripped):
            ended = self._end_entry()
            self.entry = Entry(root=self.root)
            return BlockRead(ended=ended)
        if entry is not None and (field_match := _BLOCK_FIELD.match(text)):
            name, value = field_match.groups()
            self.in_field = name
            if name == "rank" and (ranks := _BLOCK_RANK.match(value)):
                entry.rank, entry.local_rank = int(ranks.group(1)), int(ranks.group(2))
                return BlockRead(named=(entry.local_rank, entry.rank))
            if name == "exitcode" and (code := _BLOCK_EXIT.match(value)):
                entry.exitcode = int(code.group(1))
                entry.pid = int(code.group(2)) if code.group(2) else None
            elif name == "traceback":
                entry.traceback.append(value[:MAX_KEPT_TRACEBACK_CHARS])
        elif entry is not None and self.in_field == "traceback" and text[:1].isspace():
            entry.traceback.append(stripped[:MAX_KEPT_TRACEBACK_CHARS])
        return BlockRead()

    def _end_entry(self) -> Entry | None:
        entry, self.entry, self.in_field = self.entry, None, None
        return entry


def entry_finding(entry: Entry) -> Finding:
    if entry.exitcode is not None and entry.exitcode < 0:
        return killed(-entry.exitcode)
    for text in entry.traceback:
        finding = classify(text)
        if finding is not None and finding.category.role != "warning":
            return finding
    for text in reversed(entry.traceback):
        finding = python_error(text)
        if finding is not None:
            return finding
    return Finding(Category.CHILD_FAILED, f"exited with code {entry.exitcode}")
