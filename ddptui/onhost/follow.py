"""``follow``: new lines of the run's files from given offsets, and a heartbeat with process and
GPU samples every 2 s, until killed or nobody reads it."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ddptui.onhost.common import (
    FOLLOWED,
    HEARTBEAT_S,
    MAX_LINE,
    POLL_S,
    READ_CHUNK,
    SETTLED_S,
    emit,
)
from ddptui.onhost.processes import attempts, rank_processes, run_processes


class Followed:
    __slots__ = ("offset", "size", "skipping", "still_since")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.skipping = False
        self.size = -1
        self.still_since = 0.0


def followed_files(run_dir: Path) -> Iterator[str]:
    for top in ("events", "logs", "node"):
        for directory, _, names in os.walk(run_dir / top):
            for name in names:
                relative = Path(directory, name).relative_to(run_dir).as_posix()
                if FOLLOWED.match(relative):
                    yield relative


def read_new(run_dir: Path, relative: str, state: Followed) -> bool:
    """Sends the file's new whole lines, up to :data:`READ_CHUNK`; whether more is waiting."""
    try:
        with (run_dir / relative).open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < state.offset:
                # Truncated or replaced: start again rather than read past the end forever.
                state.offset = 0
                state.skipping = False
            if size == state.offset:
                return False
            now = time.monotonic()
            if size != state.size:
                state.size, state.still_since = size, now
            handle.seek(state.offset)
            data = handle.read(READ_CHUNK)
    except OSError:
        return False
    start = 0
    while True:
        newline = data.find(b"\n", start)
        if newline < 0:
            break
        line = data[start:newline]
        state.offset += newline + 1 - start
        start = newline + 1
        if state.skipping:
            state.skipping = False
            continue
        emit_line(relative, state.offset, line, cut=False)
    rest = data[start:]
    if len(rest) > MAX_LINE and not state.skipping:
        # A line longer than any we show: send its head now, skip the rest up to the newline.
        state.offset += len(rest)
        state.skipping = True
        emit_line(relative, state.offset, rest[:MAX_LINE], cut=True)
    elif state.skipping:
        state.offset += len(rest)
    elif rest and state.offset + len(rest) == size and now - state.still_since >= SETTLED_S:
        # A last line without a newline (torchrun's error.json has none): once the file has
        # stopped growing, it is complete.
        state.offset += len(rest)
        emit_line(relative, state.offset, rest, cut=False)
    return len(data) == READ_CHUNK


def emit_line(relative: str, offset: int, line: bytes, cut: bool) -> None:
    document: dict[str, Any] = {
        "k": "line",
        "f": relative,
        "o": offset,
        "t": line[:MAX_LINE].decode("utf-8", "replace"),
    }
    if cut or len(line) > MAX_LINE:
        document["cut"] = True
    emit(document)


class Sampler:
    """The run's processes on this host (CPU, RSS) and, where there are any, its GPUs."""

    GPU_QUERY = (
        "index,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,utilization.gpu,"
        "utilization.memory,memory.used,memory.total,pstate,ecc.errors.uncorrected.volatile.total"
    )

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.ticks: dict[int, int] = {}
        self.last = time.monotonic()
        self.tick_hz = os.sysconf("SC_CLK_TCK")
        self.page_mib = os.sysconf("SC_PAGE_SIZE") / 2**20
        self.smi = shutil.which("nvidia-smi")

    def sample(self) -> dict[str, Any]:
        now = time.monotonic()
        elapsed = max(now - self.last, 1e-6)
        self.last = now
        cpu = rss = 0.0
        count = 0
        ticks = {}
        processes = run_processes(self.run_dir)
        living = {attempt for _, _, attempt, _, _ in processes}
        groups = {str(attempt): attempt in living for attempt in attempts(self.run_dir)}
        current = max(living, default=0)
        own = {pid: rank for rank, (pid, _, _) in rank_processes(processes, current).items()}
        ranks: dict[str, dict[str, Any]] = {}
        for pid, _, attempt, fields, _ in processes:
            if attempt != current:
                continue
            try:
                used = int(fields[11]) + int(fields[12])
                rss += int(fields[21]) * self.page_mib
            except (IndexError, ValueError):
                continue
            count += 1
            ticks[pid] = used
            share = (used - self.ticks.get(pid, used)) / self.tick_hz / elapsed * 100
            cpu += share
            if pid in own:
                ranks[str(own[pid])] = {"state": fields[0], "cpu_pct": round(share, 1)}
        self.ticks = ticks
        sample: dict[str, Any] = {
            "procs": count,
            "cpu_pct": round(cpu, 1),
            "rss_mib": round(rss, 1),
            "ranks": ranks,
        }
        if self.smi:
            sample["gpus"] = self.gpus(self.smi)
        return {"k": "hb", "time": time.time(), "groups": groups, "sample": sample}

    def gpus(self, smi: str) -> list[dict[str, str]]:
        try:
            output = subprocess.run(
                [smi, "--query-gpu=" + self.GPU_QUERY, "--format=csv,noheader,nounits"],
                capture_output=True,
                timeout=2,
                check=False,
            ).stdout.decode("utf-8", "replace")
        except (OSError, subprocess.TimeoutExpired):
            return []
        names = self.GPU_QUERY.split(",")
        rows = []
        for line in output.splitlines()[:64]:
            cells = [cell.strip() for cell in line.split(",")]
            if len(cells) == len(names):
                rows.append(dict(zip(names, cells)))  # noqa: B905 (Python 3.8 hosts)
        return rows


def reader_gone(fd: int) -> bool:
    """Whether what reads ``fd`` (a pipe's writing end: sshd, for a channel) has closed it. A
    writer learns that only as it next writes, and the follower may write nothing new for a
    heartbeat: asked each round, it goes within a round of its channel being closed, and sshd
    confirms the close only once it has gone."""
    poller = select.poll()
    poller.register(fd, 0)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def follow(run_dir: Path, offsets: Any) -> int:
    states = {path: Followed(int(offset)) for path, offset in (offsets or {}).items()}
    sampler = Sampler(run_dir)
    next_beat = 0.0
    while not reader_gone(sys.stdout.fileno()):
        behind = False
        for relative in followed_files(run_dir):
            state = states.get(relative)
            if state is None:
                state = states[relative] = Followed(0)
            behind = read_new(run_dir, relative, state) or behind
        if time.monotonic() >= next_beat:
            # A heartbeat that is not behind says every line written before it was sent.
            emit({**sampler.sample(), "behind": behind})
            next_beat = time.monotonic() + HEARTBEAT_S
        sys.stdout.flush()
        time.sleep(POLL_S)
    return 0
