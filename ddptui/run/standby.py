"""A run's supervisor started before its run exists, so that its imports (most of a second)
overlap the launch's own: ``ddptui launch`` starts one as soon as it has read its arguments,
then tells it the run once the run is recorded (:meth:`Standby.go`); one never told (the
launch was refused, or failed first) reads the end of its stdin and exits.

Light on purpose: the command line imports this before anything heavy.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ddptui.remote.head import HEAD_CWD, head_python

STANDBY = "-"
"""The root and run a standby is started with: both are read from its stdin."""

DETACH_S = 30.0
"""How long a told standby may take to detach (it is imported already: a fork)."""

MAX_TOLD_BYTES = 65536


class Standby:
    """A supervisor waiting to be told its run."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process

    @classmethod
    def start(cls) -> Standby:
        process = subprocess.Popen(
            head_python("-m", "ddptui.run.supervisor", STANDBY, STANDBY),
            cwd=HEAD_CWD,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return cls(process)

    def go(self, root: Path, run_id: str, *args: str) -> bool:
        """Supervise ``run_id`` of the store at ``root`` with the supervisor's ``args``;
        whether it took the run and detached (if not, start another)."""
        assert self._process.stdin is not None
        told = json.dumps([str(root.resolve()), run_id, *args]) + "\n"
        try:
            self._process.stdin.write(told.encode())
            self._process.stdin.close()
            return self._process.wait(timeout=DETACH_S) == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def told(line: str) -> list[str] | None:
    """The supervisor's arguments as a standby was told them (root, run, options), or None when
    it was told nothing (no run) or something that is not a list of words."""
    if not line.strip():
        return None
    try:
        words = json.loads(line)
    except ValueError:
        return None
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
        return None
    return words
