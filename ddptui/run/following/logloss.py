"""Per-rank loss from what a script prints, for scripts that write no step events.

The shapes training code commonly prints are recognised: Hugging Face Trainer's
``{'loss': 0.123, …}`` (transformers 5 quotes the numbers: ``{'loss': '0.123', …}``),
Lightning's and tqdm's ``loss=0.123`` (``train_loss`` too), ``loss: 0.123`` and ``step 12 …
loss 0.123``; ``[job] loss_pattern`` (a regular expression with the named groups ``loss`` and,
optionally, ``step``) reads the rest. A line is cut to :data:`MAX_LINE_CHARS` before any
pattern sees it, and the built-in patterns have no nested repetition, so reading a host's line
costs time in proportion to at most that many characters. A line without a step counts as the
rank's next one. A progress bar redraws itself with carriage returns: tqdm's into a pipe on one
line, each state after the one before; rich's live display (Lightning's default bar, where
``TTY_COMPATIBLE=1`` lets it write into a pipe) as a bar line and a metrics line, so a line holds
one state's metrics, then a carriage return and the next state's bar. Of a line's last
:data:`SEGMENTS` parts between carriage returns, the newest one with a loss is read; terminal
escapes (rich's colours and cursor moves) are dropped before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddptui.untrusted import whole

MAX_LINE_CHARS = 1000
SEGMENTS = 3
_ESCAPE = re.compile(r"\x1b\[[0-?]{0,32}[ -/]{0,8}[@-~]", re.ASCII)
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
_LOSS_PATTERNS = (
    # {'loss': 0.1234, 'grad_norm': …} (Hugging Face Trainer's log dictionary; its numbers
    # quoted since transformers 5).
    re.compile(
        rf"""['"](?:train_)?loss['"]\s*:\s*['"]?(?P<loss>{_NUMBER})""", re.IGNORECASE | re.ASCII
    ),
    # loss=0.123 (Lightning, tqdm's postfix); loss: 0.123; loss 0.123. One way to read the
    # blanks around "=": "\s*[=:]?\s*" would try every split of a long run of them.
    re.compile(rf"\b(?:train_)?loss\s*(?:[=:]\s*)?(?P<loss>{_NUMBER})\b", re.IGNORECASE | re.ASCII),
)
_STEP = re.compile(
    r"\b(?:step|iter(?:ation)?)\s*(?:[=:]\s*)?(?P<step>\d{1,12})\b", re.IGNORECASE | re.ASCII
)


@dataclass(frozen=True)
class LoggedLoss:
    step: int | None
    """The step the line names; None when it names none."""
    loss: float
    """May be NaN or infinite, as the script printed it."""


class LossReader:
    """Reads a loss (and a step, where there is one) from a line of a rank's output."""

    def __init__(self, pattern: str | None = None) -> None:
        """``pattern``: the user's ``loss_pattern`` (checked by the hosts file's loader), tried
        before the built-in ones."""
        self._own = re.compile(pattern) if pattern else None

    def read(self, line: str) -> LoggedLoss | None:
        for segment in reversed(line.rstrip("\r\n").rsplit("\r", SEGMENTS)[-SEGMENTS:]):
            found = self._read(_ESCAPE.sub("", segment[:MAX_LINE_CHARS]))
            if found is not None:
                return found
        return None

    def _read(self, text: str) -> LoggedLoss | None:
        if self._own is not None:
            found = self._own.search(text)
            if found is not None:
                return _logged(found.groupdict().get("step"), found.group("loss"))
        for pattern in _LOSS_PATTERNS:
            found = pattern.search(text)
            if found is not None:
                step = _STEP.search(text)
                return _logged(step.group("step") if step else None, found.group("loss"))
        return None


def _logged(step: str | None, loss: str) -> LoggedLoss | None:
    try:
        value = float(loss)
    except ValueError:
        return None
    return LoggedLoss(whole(step, digits=12), value)
