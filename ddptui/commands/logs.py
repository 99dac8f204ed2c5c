"""``ddptui logs [RUN] [--rank N] [--follow] [--errors] [--events]``: a run's output, as plain text.

A live run's lines come from its supervisor's journal, each file from its first byte, so a
reattached ``logs --follow`` prints every line exactly once and costs the hosts nothing; a
finished run's are read from its hosts directly. ``--follow`` prints progress on stderr and
ends with the run's outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator

from ddptui.commands.follow import say, stamped
from ddptui.present.progress import ProgressReport
from ddptui.present.status import diagnosis_lines
from ddptui.run.control import Attachment, FileLine, HostSilent, RunControl, StoppedWaiting
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Steps
from ddptui.run.protocol import Ended, Said
from ddptui.untrusted import plain

BURST_LINES = 512
BURST_S = 0.1
"""A line waits at most this long to be written with the ones after it."""
FINISHED_READ_S = 600.0
"""How long a finished run's hosts are read at most: a host that keeps sending (a log without
end) is left then, and said to be. A host that keeps saying it is behind without sending is
left sooner (:data:`~ddptui.run.following.direct.BEHIND_BEATS`)."""


def run(args: argparse.Namespace) -> int:
    control = RunControl()
    try:
        return asyncio.run(_logs(control, args))
    except KeyboardInterrupt:
        return 0


async def _logs(control: RunControl, args: argparse.Namespace) -> int:
    record, config = control.open(args.run)
    if record.state.final:
        model = RunModel(record)
        async for update in control.lines(record, config, deadline_s=FINISHED_READ_S):
            if isinstance(update, StoppedWaiting):
                say(
                    f"stopped waiting after {update.seconds:.0f} s: {update.host} {update.why}; "
                    "its lines above may be incomplete"
                )
                continue
            model.apply(update)
            if isinstance(update, FileLine):
                _write([_shown(model, update, args)])
            elif isinstance(update, HostSilent):
                say(f"{update.host} is not answering")
        _finish(model, args)
        if args.follow:
            # Over before following began (or while a supervisor was being found): it says so
            # as it would have at the end.
            say(f"run {record.id} {record.state.value}: {record.detail}")
        return 0
    async with await control.attach(record.id, say=say, steps=Steps.NONE) as attachment:
        burst: list[str | None] = []
        since = 0.0
        async for item in _lines(attachment, follow=args.follow):
            if item is not None:
                if not burst:
                    since = time.monotonic()
                burst.append(_shown(attachment.model, item, args))
            if burst and (
                not attachment.pending
                or len(burst) >= BURST_LINES
                or time.monotonic() - since >= BURST_S
            ):
                # Once per burst, not once per line: a write for each of a thousand lines a
                # second was a good part of following's cost. Nor held past BURST_S while
                # other messages (heartbeats) keep coming: a run's next lines may be seconds
                # away (a fast rank's step events come thinned).
                _write(burst)
                burst.clear()
        _write(burst)
        _finish(attachment.model, args)
        if args.follow and attachment.judgement.state.final:
            judgement = attachment.judgement
            say(f"run {record.id} {judgement.state.value}: {judgement.detail}")
    return 0


async def _lines(attachment: Attachment, *, follow: bool) -> AsyncIterator[FileLine | None]:
    """The run's lines: up to what the journal held on attaching, or (``follow``) until the
    attempt ends, with progress on stderr meanwhile; None for each other message taken (a
    moment to write out what waits)."""
    report = ProgressReport()
    if not follow and attachment.caught_up:
        return
    async for item in attachment.updates():
        if isinstance(item, FileLine):
            yield item
        else:
            if isinstance(item, Said) and follow:
                say(item.line)
            yield None
        if follow:
            for line in report.lines(attachment.model, attachment.judgement):
                stamped(line)
            if isinstance(item, Ended) and item.attempt == attachment.judgement.attempt:
                return
        elif attachment.caught_up:
            return


def _write(lines: list[str | None]) -> None:
    shown = [line for line in lines if line is not None]
    if shown:
        sys.stdout.write("\n".join(shown) + "\n")
        sys.stdout.flush()


def _shown(model: RunModel, line: FileLine, args: argparse.Namespace) -> str | None:
    """``line`` as printed (labelled with its host, rank and stream), or None if not asked for."""
    if args.errors:
        return None
    node = model.nodes.get(line.host)
    if node is None:
        return None
    named = node.files.of(line.path)
    if named is None:
        return None
    if named.kind == "events":
        if not args.events:
            return None
        rank: int | None = named.number
        label = f"{line.host} rank {rank} event"
    elif named.kind == "log" and named.local is not None:
        rank = node.base_rank + named.local
        label = f"{line.host} rank {rank} {named.stream} (attempt {named.number})"
    elif named.kind == "out" and args.rank is None:
        rank = None
        label = f"{line.host} torchrun (attempt {named.number})"
    else:
        return None
    if args.rank is not None and rank != args.rank:
        return None
    return f"{plain(label, one_line=True)} | {plain(line.text, one_line=True)}"


def _finish(model: RunModel, args: argparse.Namespace) -> None:
    sys.stdout.flush()
    if not args.errors:
        return
    diagnoses = model.diagnoses()
    if not diagnoses:
        print("no errors found in the run's logs")
        return
    for index, diagnosis in enumerate(diagnoses):
        for line in diagnosis_lines(diagnosis, first=index == 0):
            print(line.plain)
