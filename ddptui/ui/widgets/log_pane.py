"""The run screen's log: one rank's lines, filtered, followed as they arrive, with jumps between
the lines that mark an error."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rich.text import Text
from textual.widgets import RichLog

from ddptui.run.diagnose import marks_error
from ddptui.run.following.state import RankLog
from ddptui.untrusted import plain

LOG_VIEW_LINES = 2000


class LogPane(RichLog):
    """Keeps the last :data:`LOG_VIEW_LINES` lines written."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, max_lines=LOG_VIEW_LINES, markup=False, wrap=False)
        self._rank = 0
        self._pattern = ""
        self._last: RankLog | None = None
        self._written = 0
        """Lines written since the view was last cleared; it keeps the last
        :data:`LOG_VIEW_LINES` of them."""
        self._errors: deque[int] = deque(maxlen=LOG_VIEW_LINES)
        """The numbers (counted as ``_written``) of the lines that mark an error."""
        self._placeholder = False
        """What is shown says that there is no line to show: an empty pane says nothing."""

    def show(self, lines: Sequence[RankLog], *, rank: int, pattern: str) -> None:
        """Show rank ``rank``'s ``lines`` afresh: those that contain ``pattern`` (in any case;
        every line when it is empty)."""
        self.clear()
        self._rank, self._pattern = rank, pattern.lower()
        self._last = None
        self._written = 0
        self._errors.clear()
        self._placeholder = False
        self.follow(lines)
        if not self._written:
            self._placeholder = True
            self.write(Text(self._nothing(), "dim italic"))

    def follow(self, lines: Sequence[RankLog]) -> None:
        """Append those of ``lines`` (the rank's, a bounded tail that moves on) that came after
        the last one shown; all of them when that one has left the tail."""
        if not lines:
            return
        start = 0
        if self._last is not None:
            for index in range(len(lines) - 1, -1, -1):
                if lines[index] is self._last:
                    start = index + 1
                    break
        for line in list(lines)[start:]:
            if not self._pattern or self._pattern in line.text.lower():
                if self._placeholder:
                    self._placeholder = False
                    self.clear()
                self.write(_shown(line))
                if marks_error(line.text):
                    self._errors.append(self._written)
                self._written += 1
        self._last = lines[-1]

    def _nothing(self) -> str:
        if self._pattern:
            return f"rank {self._rank}: no log line holds {self._pattern!r} · / changes it"
        return f"rank {self._rank}: no log line yet · enter on a rank shows its log"

    def next_error(self, direction: int) -> str:
        """Scroll to the next (1) or previous (-1) line that marks an error, and stop following
        so that the next line to arrive does not scroll it away; says what it did."""
        dropped = max(0, self._written - LOG_VIEW_LINES)
        rows = [number - dropped for number in self._errors if number >= dropped]
        if self.auto_scroll:
            # Following sits at the end: n starts from the first error, N from the last.
            target = (rows[0] if direction > 0 else rows[-1]) if rows else None
        elif direction > 0:
            target = next((row for row in rows if row > round(self.scroll_y)), None)
        else:
            target = next((row for row in reversed(rows) if row < round(self.scroll_y)), None)
        if target is None:
            where = "" if self.auto_scroll else " below" if direction > 0 else " above"
            return f"no error{where} in rank {self._rank}'s log"
        self.auto_scroll = False
        # After the next refresh: lines written just now have no place in the view before it.
        self.call_after_refresh(self.scroll_to, y=target, animate=False)
        return f"rank {self._rank}'s log, line {target + 1}: following paused (f follows)"

    def follow_again(self) -> None:
        """Scroll to the newest line and keep to the newest as lines arrive."""
        self.auto_scroll = True
        self.scroll_end(animate=False)


def _shown(line: RankLog) -> Text:
    style = "red" if line.stream != "stdout" else ""
    return Text(f"[{line.rank}] {plain(line.text, limit=1000, one_line=True)}", style)
