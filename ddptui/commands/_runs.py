"""What the runs commands share: finding a run and its hosts, following it headless, exit codes."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

from ddptui.config import Config, load_config
from ddptui.run.store import RunRecord, RunState, RunStore
from ddptui.run.watch import RunWatch, Verdict, supervise
from ddptui.untrusted import plain

EXIT_CODES = {
    RunState.COMPLETED: 0,
    RunState.FAILED: 1,
    RunState.STOPPED: 3,
}
"""A run's outcome as the exit code of the command that followed it (docs/architecture.md)."""

PROGRESS_EVERY_S = 2.0


def exit_code(state: RunState) -> int:
    return EXIT_CODES.get(state, 0)


def open_run(
    run_id: str | None, store: RunStore | None = None
) -> tuple[RunStore, RunRecord, Config]:
    """The run ``run_id`` names (default: the latest), with the hosts file it was launched with."""
    store = store or RunStore()
    record = store.resolve(run_id)
    return store, record, load_config(store.hosts_file(record.id))


def say(line: str, stream: TextIO | None = None) -> None:
    print(f"ddptui: {line}", file=stream or sys.stderr, flush=True)


class HeadlessReporter:
    """``--headless`` output: a progress line at most every 2 s, each new diagnosis and node
    change once, all as plain text."""

    def __init__(self, stream: TextIO | None = None, every_s: float = PROGRESS_EVERY_S) -> None:
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self._next = 0.0
        self._said_diagnoses: set[tuple[str, str]] = set()
        self._node_notes: dict[str, str] = {}

    def __call__(self, watch: RunWatch) -> None:
        for node in watch.nodes.values():
            silence = watch.silence_note(node)
            note = f"not answering: {silence}" if silence else ""
            if node.exit is not None:
                note = f"torchrun exited {node.exit}"
            elif not note and self._node_notes.get(node.host, "").startswith("not answering"):
                note = "answering again"
            if note and self._node_notes.get(node.host) != note:
                self._node_notes[node.host] = note
                self._print(f"{node.host}: {note}")
        for diagnosis in watch.diagnoser.diagnoses():
            key = (diagnosis.category.value, diagnosis.message)
            if key in self._said_diagnoses:
                continue
            self._said_diagnoses.add(key)
            ranks = ", ".join(str(rank) for rank in diagnosis.ranks) or "torchrun"
            self._print(
                f"{diagnosis.category.value} on rank {ranks} ({', '.join(diagnosis.hosts)}): "
                f"{plain(diagnosis.message, limit=300, one_line=True)}"
            )
            self._print(f"  cause: {diagnosis.cause}")
            self._print(f"  fix: {diagnosis.fix}")
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every_s
            line = watch.progress.format_line()
            if line:
                self._print(line)

    def final(self, watch: RunWatch) -> None:
        self._next = 0.0
        self(watch)

    def _print(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {text}", file=self.stream, flush=True)


async def follow_headless(record: RunRecord, config: Config, store: RunStore) -> int:
    """Follow the run to its end, printing progress; the exit code of its outcome."""
    reporter = HeadlessReporter()
    watch = RunWatch(record)
    verdict: Verdict = await supervise(record, config, store, on_change=reporter, watch=watch)
    reporter.final(watch)
    say(f"run {record.id} {verdict.state.value}: {plain(verdict.detail, one_line=True)}")
    return exit_code(verdict.state)


def run_detachable(main: Callable[[dict[str, RunRecord]], Coroutine[Any, Any, int]]) -> int:
    """``asyncio.run(main(started))``; Ctrl-C once a run has started detaches from it."""
    started: dict[str, RunRecord] = {}
    try:
        return asyncio.run(main(started))
    except KeyboardInterrupt:
        record = started.get("run")
        if record is None:
            raise
        say(
            f"detached: run {record.id} goes on. Follow it with `ddptui logs {record.id} "
            f"--follow`, check it with `ddptui status {record.id}`, stop it with "
            f"`ddptui stop {record.id}`"
        )
        return 0


def detached_hint(record: RunRecord) -> str:
    return (
        f"run {record.id} started and goes on by itself. Follow it with `ddptui logs {record.id} "
        f"--follow`, check it with `ddptui status {record.id}`, stop it with "
        f"`ddptui stop {record.id}`"
    )
