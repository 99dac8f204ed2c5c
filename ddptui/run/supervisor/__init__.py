"""The run's supervisor: one process per run on the head node, the only writer of its record.

:class:`~ddptui.run.control.RunControl` starts it (a launch, a resume, or any command that
finds a live run without one) as ``python -m ddptui.run.supervisor ROOT RUN_ID [--launch |
--resume [--debug]]``. It leaves the terminal's session, so it outlives the console, the shell
and an SSH logout of the head node, and holds the run's supervisor lock for its whole life:
a second one finds the lock taken and leaves (exit :data:`~ddptui.run.protocol.BUSY`) for its
starter to attach to the first.

Its parts, each one job:

- :mod:`.process`: the process (lock, log, socket, signals, lifetime);
- :mod:`.core`: the :class:`Supervisor`, doing one job at a time (:mod:`.jobs`) and recording
  every attempt's end; its phases and their moves are in :mod:`.phase`;
- :mod:`.following`: one follower per node (from the run's backend,
  :mod:`ddptui.run.backends`) into the journal and the run's model;
- :mod:`.judging`: what to do about what the model sees (pure);
- :mod:`.evidence`: a stop's words, flight recorders after a failure, stacks at a hang;
- :mod:`.viewers`: serving attached viewers (:mod:`ddptui.run.protocol`).
"""

from ddptui.run.supervisor.following import INBOX, INBOX_BYTES, updates_inbox
from ddptui.run.supervisor.loop import Supervisor
from ddptui.run.supervisor.phase import Phase

__all__ = ["INBOX", "INBOX_BYTES", "Phase", "Supervisor", "updates_inbox"]
