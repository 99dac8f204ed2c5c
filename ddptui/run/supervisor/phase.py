"""The supervisor's phase: what it is doing with the run's current attempt.

The run's recorded state (:class:`~ddptui.run.record.RunState`) says how the run stands for
everyone; the phase says what its supervisor may do next, and is known to it alone. Its moves::

    IDLE ──launch, resume, requeued job──▶ STARTING ──every node started──▶ RUNNING
      ▲  ╲                                  │                               │   │
      │   ╲──a live run found, no start─────┼──────────────────────────────▶┘   │
      │                                     │                                   │
      ├──────────the start failed───────────┘                                   │
      │                                                                         │
      ├──the end recorded── CONCLUDING ◀──a verdict, the nodes ended, a failed──┤
      │                         │           allocation check                    │
      │                         └──a stop asked before it──┐                    │
      │                                                    ▼                    │
      └──the stop recorded───────────────────────────── STOPPING ◀──stop, kill,─┘
                                                                   on_hang="stop"

    IDLE ──a failure recorded, [recovery] on──▶ RECOVERING ──a spare in place──▶ STARTING
      ▲                                             │
      └──gave up, saying why (or the spare failed)──┘

- **IDLE**: no attempt is live; the record has ended, or nothing was started yet. A supervisor
  that is idle and asked nothing for ``IDLE_EXIT_S`` exits (unless its backend still holds
  something of the run: a Slurm job requeued).
- **STARTING**: a launch, a resume or a requeued job is starting an attempt. Judging waits.
- **RUNNING**: the attempt's nodes are followed and judged: a verdict moves it on.
- **CONCLUDING**: how the attempt ended is known (judged, or the backend saw its nodes end)
  and is being recorded, the others stopped: no second verdict is taken.
- **STOPPING**: a stop, a kill or ``on_hang = "stop"`` is ending the attempt: exits are the
  stop's doing, not failures, and nothing is judged.
- **RECOVERING**: an attempt failed with ``[recovery] mode = "resume"``: the host at fault is
  found, set aside and replaced by a spare or left out (fewer nodes, down to ``min_nodes``)
  (then STARTING, the resume), or recovery gives up, saying why (then IDLE)
  (:mod:`ddptui.run.supervisor.recovery`).

Every attempt's end is recorded by :meth:`~ddptui.run.supervisor.owning.RunOwner.ended`,
which moves the phase back to IDLE: "why did my run end?" is the attempt's detail, written
by whichever of CONCLUDING and STOPPING led there (see :mod:`ddptui.run.supervisor.loop`).
"""

from __future__ import annotations

import enum
import logging

log = logging.getLogger("ddptui.supervisor")


class Phase(enum.Enum):
    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    CONCLUDING = "concluding"
    STOPPING = "stopping"
    RECOVERING = "recovering"


MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.IDLE: frozenset({Phase.STARTING, Phase.RUNNING, Phase.RECOVERING}),
    Phase.STARTING: frozenset({Phase.RUNNING, Phase.IDLE}),
    Phase.RECOVERING: frozenset({Phase.STARTING, Phase.IDLE}),
    Phase.RUNNING: frozenset({Phase.CONCLUDING, Phase.STOPPING}),
    Phase.CONCLUDING: frozenset({Phase.STOPPING, Phase.IDLE}),
    Phase.STOPPING: frozenset({Phase.IDLE}),
}
"""Where each phase may go; staying put is no move."""


class PhaseError(RuntimeError):
    """A move the phase machine does not have: a bug in the supervisor."""


class Phases:
    """The current phase, moved only along :data:`MOVES`, every move logged."""

    def __init__(self, start: Phase = Phase.IDLE) -> None:
        self.now = start
        self.moves: list[tuple[Phase, Phase]] = []
        """Every move made, in order (what the tests walk)."""

    def move(self, to: Phase, why: str) -> None:
        if to is self.now:
            return
        if to not in MOVES[self.now]:
            raise PhaseError(f"no move from {self.now.value} to {to.value} ({why})")
        log.info("phase %s -> %s: %s", self.now.value, to.value, why)
        self.moves.append((self.now, to))
        self.now = to

    def __repr__(self) -> str:
        return f"Phases({self.now.value})"
