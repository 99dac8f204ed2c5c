"""A real terminal for the console: a tmux session on a private server, read with
``capture-pane`` and typed into with ``send-keys``."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

SIZE = (120, 36)


class Terminal:
    """One tmux session (``console``) on the private server ``socket``."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def start(
        self, argv: Sequence[str], env: Mapping[str, str], size: tuple[int, int] = SIZE
    ) -> None:
        """Run ``argv`` in the session, from this directory, with ``env``'s values over tmux's
        own; the pane stays a while after it ends, to be read."""
        width, height = size
        settings = [part for name, value in env.items() for part in ("-e", f"{name}={value}")]
        self.tmux(
            *("new-session", "-d", "-s", "console", "-x", str(width), "-y", str(height)),
            *settings,
            *("-e", "TERM=xterm-256color"),
            # The pane's size set before the program reads it: a detached session can start
            # its command while still 80×24, and the console would draw at that size.
            f"stty cols {width} rows {height} && cd {shlex.quote(str(Path.cwd()))} && "
            f"{shlex.join(argv)}; sleep 30",
        )

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False
        )
        return done.stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "console", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "console")

    def wait_for(self, what: str, seen: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if seen(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"the pane never showed {what}; it shows:\n{text}")
            time.sleep(0.5)

    def close(self) -> None:
        self.tmux("kill-server")
