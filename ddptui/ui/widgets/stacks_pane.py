"""The run screen's stack dump (``D``): the groups as ``ddptui dump`` prints them, and one
rank's every thread once it is chosen in the rank table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.present.stacks import dump_lines

if TYPE_CHECKING:
    from ddptui.run.control import StackDump


class StacksPane(VerticalScroll):
    """Scrolls the dump's text (the ``Static`` ``#stacks-text``)."""

    def compose(self) -> ComposeResult:
        yield Static(
            Text("no stacks taken yet: D asks every rank of the run for its stacks", "dim"),
            id="stacks-text",
        )

    def show(self, dump: StackDump, rank: int | None = None) -> None:
        lines = dump_lines(dump)
        chosen = next((stack for stack in dump.stacks if stack.rank == rank), None)
        if chosen is None:
            lines.append(Text("enter on a rank in the table shows its every thread", "dim"))
        else:
            via = f", {chosen.via}" if chosen.via else ""
            lines.append(
                Text(f"rank {chosen.rank} on {chosen.host} (pid {chosen.pid}{via}):", "bold")
            )
            lines.append(Text(chosen.text.rstrip() or chosen.error))
        self.query_one(Static).update(Text("\n").join(lines))
