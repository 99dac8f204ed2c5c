"""Thinning a fast rank's step events on their way to the head (``follow``'s): every line of
every file is sent but the step events that a later one of the same rank makes stale within a
round, and the ones kept fall on the same step numbers on every node (a whole world's losses
at those steps). The files keep every event."""

from __future__ import annotations

import re

FOLD_S = 1.0
"""A fast rank's step events are sent at most once in this long (its fold), and at least once
in twice this: enough for every viewer (a table redrawn once a second at that size, a chart)
and for judging (a hang is 20 s without a step; a straggler's average is over 20 events)."""
HEAD_EVENTS_PER_S = 2048
"""Past this many ranks the fold grows with the world, so that the head is sent at most about
this many step events a second whatever the world's size: 4,096 ranks fold 2 s each. At
4,096 ranks the events' reading, parsing and judging at the head was over half the
supervisor's time, the same for an event whatever its rank."""
QUIET_FOLDS = 3
"""A step event is sent once none was for this many folds, whatever its step number."""
QUIET_S = QUIET_FOLDS * FOLD_S
"""The quiet time of a world of up to :data:`HEAD_EVENTS_PER_S` ranks."""
RATE_WINDOW_S = 2.0
"""A rank's pace is measured over this much of its own time, from the events' times."""
MAX_STRIDE = 1 << 20
STEP_EVENT = re.compile(rb'"type"\s*:\s*"step"')
"""As the head finds a step event (``ddptui.run.following.model``)."""
STEP_NUMBER = re.compile(rb'"step"\s*:\s*(\d{1,15})[,}\s]')
EVENT_TIME = re.compile(rb'"time"\s*:\s*(\d{1,12}(?:\.\d{1,9})?)[,}\s]')
WORLD_SIZE = re.compile(rb'"world_size"\s*:\s*(\d{1,9})[,}\s]')


def fold_s(world_size: int) -> float:
    """How often at most a fast rank of a world of ``world_size`` ranks sends a step event."""
    return max(FOLD_S, world_size / HEAD_EVENTS_PER_S)


class Thinned:
    """One rank's events file, its step events thinned on their way to the head.

    A step event is sent at once when the line before it was no step event (a rank's first
    step, the first after a checkpoint), when its step is a multiple of the stride, or when
    none was sent for :data:`QUIET_S`; otherwise it is held, and sent only if no newer line of
    the file came by the end of the next round (the last step before a hang or a crash).
    Every other line is sent at once, after the step held before it. The stride is the rank's
    steps between two events (``--log-every``) times the smallest power of two of at least its
    events in its fold (:func:`fold_s` of the world size its first step event gives): under DDP
    every rank steps at the same pace in a world of one size, so every node keeps the same
    steps.
    """

    __slots__ = (
        "after_step", "counted", "fold", "fresh", "held", "reference", "sent_at", "stride",
    )  # fmt: skip

    def __init__(self) -> None:
        self.stride = 1
        self.held: tuple[int, bytes] | None = None
        """The step event held back (the offset after it, the line)."""
        self.fresh = False
        """Whether the held line came in this round."""
        self.after_step = False
        self.sent_at = 0.0
        self.reference: tuple[int, float] | None = None
        """The step and time the pace is measured from."""
        self.counted = 0
        """Step events since the reference."""
        self.fold = FOLD_S
        """:func:`fold_s` of the world size, as the first step event of each run of them
        gives it."""

    def take(self, offset: int, line: bytes, now: float) -> list[tuple[int, bytes]]:
        """The lines to send now, for the file's next ``line`` (``offset`` after it)."""
        found = STEP_NUMBER.search(line) if STEP_EVENT.search(line) else None
        if found is None:
            sent = self.release()
            sent.append((offset, line))
            self.after_step = False
            return sent
        number = int(found.group(1))
        if not self.after_step:
            # Read again at each run of steps: a resumed attempt's world may be another size.
            world = WORLD_SIZE.search(line)
            self.fold = fold_s(int(world.group(1))) if world is not None else FOLD_S
        timed = EVENT_TIME.search(line)
        self._measure(number, float(timed.group(1)) if timed is not None else None)
        quiet = now - self.sent_at >= QUIET_FOLDS * self.fold
        if not self.after_step or number % self.stride == 0 or quiet:
            self.held, self.after_step, self.sent_at = None, True, now
            return [(offset, line)]
        self.held, self.fresh = (offset, line), True
        return []

    def release(self) -> list[tuple[int, bytes]]:
        """The held line, to be sent now (none if there is none)."""
        held, self.held = self.held, None
        return [held] if held is not None else []

    def end_round(self, now: float) -> list[tuple[int, bytes]]:
        """At a round's end: the held line if no newer one came in this round."""
        if self.held is not None and not self.fresh:
            self.sent_at = now
            return self.release()
        self.fresh = False
        return []

    def _measure(self, step: int, time: float | None) -> None:
        reference = self.reference
        if time is None:
            return
        if reference is None or step <= reference[0] or time <= reference[1]:
            # The first step event, or a new attempt's that starts over from a checkpoint.
            self.reference, self.counted = (step, time), 0
            return
        self.counted += 1
        if time - reference[1] < RATE_WINDOW_S:
            return
        steps = step - reference[0]
        spacing = steps // self.counted if steps % self.counted == 0 else 1
        per_fold = self.counted / (time - reference[1]) * self.fold
        power = 1
        while power < per_fold and spacing * power * 2 <= MAX_STRIDE:
            power *= 2
        self.stride = spacing * power
        self.reference, self.counted = (step, time), 0
