"""Following a run from the command line: progress while it goes, the exit code of its outcome.

``launch``, ``resume`` and ``demo`` follow the run they started; Ctrl-C detaches (the run goes
on under its supervisor).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

from ddptui.present.progress import ProgressReport
from ddptui.run.control import Attachment
from ddptui.run.protocol import Said
from ddptui.run.record import RunRecord, RunState
from ddptui.untrusted import plain

EXIT_CODES = {
    RunState.COMPLETED: 0,
    RunState.FAILED: 1,
    RunState.STOPPED: 3,
}
"""A run's outcome as the exit code of the command that followed it (docs/cli.md)."""


def exit_code(state: RunState) -> int:
    return EXIT_CODES.get(state, 0)


def say(line: str, stream: TextIO | None = None) -> None:
    """``ddptui: line``, one line whatever it quotes: the runs layer's steps and the
    supervisor's words carry hosts' errors."""
    print(f"ddptui: {plain(line, one_line=True)}", file=stream or sys.stderr, flush=True)


def stamped(line: str, stream: TextIO | None = None) -> None:
    """``HH:MM:SS line``, one line, as :func:`say`."""
    print(
        f"{time.strftime('%H:%M:%S')} {plain(line, one_line=True)}",
        file=stream or sys.stderr,
        flush=True,
    )


async def follow_headless(attachment: Attachment) -> int:
    """Print the run's progress until its attempt has ended; the exit code of the outcome."""
    report = ProgressReport()
    async for item in attachment.updates():
        if isinstance(item, Said):
            say(item.line)
        for line in report.lines(attachment.model, attachment.judgement):
            stamped(line)
        if attachment.over(item):
            break
    for line in report.lines(attachment.model, attachment.judgement, final=True):
        stamped(line)
    await attachment.close()
    judgement = attachment.judgement
    record = attachment.record
    if not judgement.state.final:
        say(f"run {record.id} goes on ({judgement.state.value}); lost touch with its supervisor")
        return 1
    say(f"run {record.id} {judgement.state.value}: {judgement.detail}")
    return exit_code(judgement.state)


def run_detachable(main: Callable[[dict[str, RunRecord]], Coroutine[Any, Any, int]]) -> int:
    """``asyncio.run(main(started))``; Ctrl-C once a run has started detaches from it."""
    started: dict[str, RunRecord] = {}
    try:
        return asyncio.run(main(started))
    except KeyboardInterrupt:
        record = started.get("run")
        if record is None:
            raise
        say(f"detached: {detached_hint(record)}")
        return 0


def detached_hint(record: RunRecord) -> str:
    return (
        f"run {record.id} goes on by itself. Follow it with `ddptui logs {record.id} --follow`, "
        f"check it with `ddptui status {record.id}`, stop it with `ddptui stop {record.id}`"
    )
