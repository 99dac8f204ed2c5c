"""``ddptui completion SHELL``: the shell code that completes ddptui's words (argcomplete's).

The completions themselves come from ``ddptui`` at each Tab (:func:`ddptui.cli.main` answers
argcomplete's protocol): commands, options, hosts files, and run ids from the run store."""

from __future__ import annotations

import argparse
import sys

from argcomplete.shell_integration import shellcode


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(shellcode(["ddptui"], shell=args.shell))
    return 0
