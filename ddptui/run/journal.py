"""The run's journal on the head node: every followed line, in the order the supervisor took it.

Viewers replay it (from any position) before they follow live, so N viewers cost the hosts
nothing; a restarted supervisor resumes following from the byte offsets it records, so no line
is lost or repeated. It lives in segments named by the global position of their first byte
(``journal-<start>.jsonl``); once a segment is full a new one begins, and only the newest
:data:`SEGMENTS_KEPT` are kept, so a run of days takes bounded room on the head. A viewer that
asks for a position no longer kept starts at the oldest one kept and is told what it missed
(the lines are still on the hosts).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ddptui.atomic import write_atomic
from ddptui.run.following.updates import FileLine
from ddptui.run.protocol import decode, line_record

SEGMENT_BYTES = 128 * 1024 * 1024
SEGMENTS_KEPT = 4
"""At most about 512 MiB of a run's lines on the head node."""
READ_BYTES = 1 << 20
_SEGMENT = re.compile(r"^journal-(\d{20})\.jsonl$")
_OFFSETS = "offsets.json"
MAX_FILES_PER_HOST = 65536
"""Offsets kept per host: a host that invents files past this many is not followed for more."""
_SET_ASIDE = "set-aside.jsonl"
MAX_SET_ASIDE = 4096
"""Lines remembered as set aside: past this many, a replay meets the rest again (and sets them
aside again), which costs time, never the supervisor."""


class Journal:
    """One run's journal in ``directory`` (created if missing); the supervisor's alone."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = SEGMENT_BYTES,
        kept: int = SEGMENTS_KEPT,
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.kept = kept
        directory.mkdir(mode=0o700, exist_ok=True)
        self._segments: list[int] = sorted(
            int(match.group(1))
            for entry in directory.iterdir()
            if (match := _SEGMENT.match(entry.name))
        )
        if not self._segments:
            self._segments = [0]
            self._path(0).touch(mode=0o600)
        self._fd = os.open(self._path(self._segments[-1]), os.O_RDWR | os.O_APPEND)
        size = _whole_lines(self._fd)
        self.end = self._segments[-1] + size
        """Where the next line goes: every byte before it is a whole line, readable."""
        self._pending = bytearray()
        self._readers: dict[int, int] = {}
        self.offsets: dict[str, dict[str, int]] = {}
        """Host → path → the byte offset after the last line taken from it."""
        self._recover_offsets()
        self._set_aside = _read_set_aside(directory / _SET_ASIDE)

    @property
    def start(self) -> int:
        """The oldest position still kept."""
        return self._segments[0]

    def append(self, line: FileLine) -> bool:
        """Take ``line`` (written out at the next :meth:`flush`); False, and nothing kept, when
        it repeats one already taken or its host has too many files to follow more."""
        taken = self.offsets.setdefault(line.host, {})
        if line.offset <= taken.get(line.path, 0):
            return False
        if line.path not in taken and len(taken) >= MAX_FILES_PER_HOST:
            return False
        taken[line.path] = line.offset
        self._pending += line_record(line)
        return True

    def set_aside(self, line: FileLine) -> None:
        """Remember that ``line`` could not be taken, so that a replay skips it instead of
        meeting the same fault again (a supervisor that crashed on it would crash again)."""
        key = (line.host, line.path, line.offset)
        if key in self._set_aside or len(self._set_aside) >= MAX_SET_ASIDE:
            return
        self._set_aside.add(key)
        entry = json.dumps({"host": line.host, "path": line.path, "offset": line.offset})
        fd = os.open(self.directory / _SET_ASIDE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, entry.encode() + b"\n")
        finally:
            os.close(fd)

    def was_set_aside(self, line: FileLine) -> bool:
        return (line.host, line.path, line.offset) in self._set_aside

    @property
    def unwritten(self) -> int:
        """Bytes appended and not written out yet."""
        return len(self._pending)

    def flush(self) -> bool:
        """Write out what was appended; whether anything was."""
        if not self._pending:
            return False
        data = bytes(self._pending)
        self._pending.clear()
        os.write(self._fd, data)
        self.end += len(data)
        if self.end - self._segments[-1] >= self.segment_bytes:
            self._rotate()
        return True

    def read(self, position: int, limit: int = READ_BYTES) -> tuple[int, bytes]:
        """Whole lines from ``position`` (or from :attr:`start`, if that is later) up to about
        ``limit`` bytes: ``(where they start, the bytes)``; no bytes once at :attr:`end`."""
        position = min(max(position, self.start), self.end)
        base = max(start for start in self._segments if start <= position)
        following = [start for start in self._segments if start > base]
        segment_end = following[0] if following else self.end
        wanted = min(limit, segment_end - position)
        if wanted <= 0:
            return position, b""
        fd = self._reader(base)
        data = os.pread(fd, wanted, position - base)
        while b"\n" not in data and position + len(data) < segment_end:
            data += os.pread(fd, limit, position - base + len(data))
        return position, data[: data.rfind(b"\n") + 1]

    def _reader(self, base: int) -> int:
        """A descriptor to read the segment starting at ``base`` (kept: viewers read often)."""
        fd = self._readers.get(base)
        if fd is None:
            fd = self._readers[base] = os.open(self._path(base), os.O_RDONLY)
        return fd

    def lines(self, position: int = 0) -> Iterator[bytes]:
        """Every whole line from ``position`` to :attr:`end`, each with its newline."""
        position = max(position, self.start)
        while position < self.end:
            position, data = self.read(position)
            if not data:
                return
            yield from data.splitlines(keepends=True)
            position += len(data)

    def checkpoint(self) -> None:
        """Record where every host's files were taken up to, at the journal's end, so that a
        restarted supervisor resumes following exactly there."""
        self.flush()
        document = {"position": self.end, "offsets": self.offsets}
        write_atomic(self.directory / _OFFSETS, json.dumps(document))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.checkpoint()
        os.close(self._fd)
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()

    def _path(self, start: int) -> Path:
        return self.directory / f"journal-{start:020d}.jsonl"

    def _rotate(self) -> None:
        os.close(self._fd)
        self._segments.append(self.end)
        self._fd = os.open(self._path(self.end), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        # The offsets must not depend on a segment about to go.
        self.checkpoint()
        while len(self._segments) > self.kept:
            dropped = self._segments.pop(0)
            reader = self._readers.pop(dropped, None)
            if reader is not None:
                os.close(reader)
            self._path(dropped).unlink(missing_ok=True)

    def _recover_offsets(self) -> None:
        """The offsets as of the last checkpoint, carried forward over the lines after it."""
        position = self.start
        try:
            saved = json.loads((self.directory / _OFFSETS).read_text(encoding="utf-8"))
            if self.start <= saved["position"] <= self.end:
                self.offsets = _offsets(saved["offsets"])
                position = saved["position"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        for raw in self.lines(position):
            line = decode(raw)
            if isinstance(line, FileLine):
                taken = self.offsets.setdefault(line.host, {})
                taken[line.path] = max(line.offset, taken.get(line.path, 0))


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    if not isinstance(value, dict):
        raise TypeError("offsets")
    return {
        host: {path: offset for path, offset in files.items() if isinstance(offset, int)}
        for host, files in value.items()
        if isinstance(host, str) and isinstance(files, Mapping)
    }


def _read_set_aside(path: Path) -> set[tuple[str, str, int]]:
    """The lines set aside before, as ``(host, path, offset)``; none when the file is missing
    or unreadable (a replay then meets them again and sets them aside again)."""
    try:
        with path.open("rb") as kept:
            data = kept.read(MAX_SET_ASIDE * 1024)
    except OSError:
        return set()
    found = set()
    for raw in data.splitlines()[:MAX_SET_ASIDE]:
        try:
            entry = json.loads(raw)
            key = (entry["host"], entry["path"], entry["offset"])
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(key[0], str) and isinstance(key[1], str) and type(key[2]) is int:
            found.add(key)
    return found


def _whole_lines(fd: int) -> int:
    """The size of the segment up to its last newline, cutting off a line left half-written
    (a head node that lost power mid-write)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    tail = os.pread(fd, min(size, READ_BYTES), max(size - READ_BYTES, 0))
    keep = size - len(tail) + tail.rfind(b"\n") + 1
    if keep != size:
        os.truncate(fd, keep)
    return keep
