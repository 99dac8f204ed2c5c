"""The supervisor's faults: what it could not take, set aside and said, and it goes on.

A fault is an update whose taking raised (the model sets it aside:
:meth:`~ddptui.run.following.model.RunModel.take_faults`) or a part of judging that raised (timing
the launch, naming stragglers, the verdict). Each is logged once with its traceback and said in the
attempt's detail the first :data:`FAULTS_SAID` times; ending the supervisor would not help,
since the next one replays the same lines into the same state.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable

from ddptui.untrusted import plain, plain_error

FAULTS_SAID = 5
"""Faults said in the run's record; every one is in ``supervisor.log``."""
MAX_FAULTS_SEEN = 1024
"""Faults remembered so as to log each once."""

log = logging.getLogger("ddptui.supervisor")


class Faults:
    """One supervisor's faults, each logged once."""

    def __init__(self, note: Callable[[str], None], heard: Callable[[], Iterable[str]]) -> None:
        """``note`` adds a line to the attempt's detail; ``heard`` names the hosts whose lines
        were taken since judging last looked (where a fault in judging came from)."""
        self._note = note
        self._heard = heard
        self._seen: set[str] = set()
        self._said = 0

    def guarded(self, part: str, work: Callable[[], None]) -> None:
        """Do ``work``, a part of judging; a fault in it is set aside and said, once per fault
        whichever hosts spoke before each tick it recurs on."""
        try:
            work()
        except Exception as error:
            self._judging_failed(part, error)

    def _judging_failed(self, part: str, error: Exception) -> None:
        fault = f"{part} failed: {plain_error(error)}"
        heard = ", ".join(sorted(self._heard())[:8]) or "no host"
        self.set_aside(f"{fault}, after lines from {heard}", error, fault)

    def set_aside(self, words: str, error: BaseException | None = None, key: str = "") -> None:
        """An input the supervisor could not take, set aside: logged (with its traceback, once
        per ``key``, which defaults to the words) and said in the attempt's detail the first
        :data:`FAULTS_SAID` times; then the supervisor goes on."""
        key = key or words
        if key in self._seen:
            return
        if len(self._seen) < MAX_FAULTS_SEEN:
            self._seen.add(key)
        trace = "" if error is None else "".join(traceback.format_exception(error))
        log.error("set aside: %s\n%s", words, plain(trace))
        self._said += 1
        if self._said > FAULTS_SAID:
            return
        if self._said == FAULTS_SAID:
            words += " (any later fault only in supervisor.log)"
        try:
            self._note(f"set aside: {words}")
        except Exception:  # saying so must not end what it reports on
            log.error("could not note the fault:\n%s", plain(traceback.format_exc()))
