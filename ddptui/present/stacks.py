"""A stack dump's words: the odd ranks first, named by host and rank with the frames in which
they differ, then the ranks doing what most do, then the ranks that sent no stack.

``ddptui dump`` prints these (their ``.plain``); the console's run screen shows the same.
"""

from __future__ import annotations

from rich.text import Text

from ddptui.run.evidence.kept import StackDump
from ddptui.run.evidence.stacks import Frame, RankStack, StackGroup, rank_spans

CHAIN_FRAMES = 4
"""Functions named in a group's one-line summary, innermost first."""
SHOWN_FRAMES = 12
"""Frames listed under an odd group."""


def chain(frames: tuple[Frame, ...]) -> str:
    """``all_reduce ← step ← train at loop.py:123``: the innermost functions, then where the
    innermost is."""
    if not frames:
        return "no Python frame (in native code, or between frames)"
    names = " ← ".join(frame.function for frame in frames[:CHAIN_FRAMES])
    more = " ← …" if len(frames) > CHAIN_FRAMES else ""
    return f"{names}{more} at {frames[0].where}"


def _who(ranks: tuple[RankStack, ...]) -> str:
    numbers = [stack.rank for stack in ranks]
    label = "rank" if len(numbers) == 1 else "ranks"
    hosts = list(dict.fromkeys(stack.host for stack in ranks))
    shown = ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")
    return f"{label} {rank_spans(numbers)} on {shown}"


def group_lines(group: StackGroup, *, odd: bool) -> list[Text]:
    head = Text()
    head.append(_who(group.ranks), "bold red" if odd else "bold")
    head.append(f": {chain(group.frames)}")
    lines = [head]
    if odd:
        differing = group.differing or group.frames
        for frame in differing[:SHOWN_FRAMES]:
            lines.append(Text(f"    {frame.file}:{frame.line} in {frame.function}", "red"))
        if len(differing) > SHOWN_FRAMES:
            lines.append(Text(f"    … {len(differing) - SHOWN_FRAMES} more frame(s)", "dim"))
    return lines


def dump_lines(dump: StackDump) -> list[Text]:
    """The whole dump, odd groups first; where it was saved last."""
    groups = dump.groups
    lines: list[Text] = []
    if len(groups) > 1:
        lines.append(Text(f"{len(groups)} different stacks; the odd ones first:", "bold"))
    for index, group in enumerate(groups):
        lines += group_lines(group, odd=index < len(groups) - 1)
    for stack in dump.stackless:
        lines.append(
            Text(f"rank {stack.rank} on {stack.host} (pid {stack.pid}): {stack.error}", "yellow")
        )
    notes = dict.fromkeys(f"{stack.host}: {stack.note}" for stack in dump.stacks if stack.note)
    lines += [Text(note, "dim") for note in notes]
    lines += [Text(f"no answer from {why}", "yellow") for why in dump.unanswered]
    if dump.flight:
        lines.append(Text("flight recorder (each rank's last collectives):", "bold"))
        lines += [
            Text(f"  {finding.text}", "red" if finding.odd_ranks else "") for finding in dump.flight
        ]
    lines += [Text(error, "yellow") for error in dump.flight_errors]
    if not dump.stacks and not dump.unanswered:
        lines.insert(0, Text("no rank of the run is running on its hosts"))
    if len(dump.attempts) > 1:
        attempts = ", ".join(str(number) for number in dump.attempts)
        lines.append(Text(f"the hosts' ranks belong to different attempts: {attempts}", "yellow"))
    if dump.saved_in is not None:
        lines.append(Text(f"kept as the hosts sent them: {dump.saved_in}", "dim"))
    return lines
