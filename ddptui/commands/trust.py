"""``ddptui trust HOSTS [--yes]``: record unknown host keys after the user has seen them.

Exit 0 when every host's key is trusted afterwards; 1 when a key changed, a host could not be
reached or the user declined; 2 for a bad hosts file or a confirmation that cannot be asked.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddptui.config import load_config
from ddptui.errors import UsageError
from ddptui.present.trust import all_trusted, host_key_line, refusal
from ddptui.run.control import RunControl

if TYPE_CHECKING:
    from ddptui.run.control import HostKeyScan

Confirm = Callable[[str], bool]


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.hosts))
    control = RunControl()
    scans = asyncio.run(control.scan_host_keys(config, args.hosts))
    return apply(scans, confirm=_always if args.yes else _ask, control=control)


def apply(
    scans: Sequence[HostKeyScan], *, confirm: Confirm, control: RunControl | None = None
) -> int:
    """Report every host's key, add the unknown ones that ``confirm`` allows; the exit code."""
    control = control or RunControl()
    for scan in scans:
        print(host_key_line(scan).plain)
    for scan in scans:
        refused = refusal(scan)
        if refused is not None:
            print(f"\n{refused}", file=sys.stderr)
    declined = False
    for path, lines in control.keys_to_add(scans).items():
        noun = "key" if len(lines) == 1 else "keys"
        if confirm(f"Add {len(lines)} {noun} to {path}? [y/N] "):
            control.add_host_keys(path, lines)
            print(f"added {len(lines)} {noun} to {path}")
        else:
            declined = True
    return 0 if all_trusted(scans) and not declined else 1


def _always(question: str) -> bool:
    return True


def _ask(question: str) -> bool:
    if not sys.stdin.isatty():
        raise UsageError("cannot ask for confirmation: stdin is not a terminal; use --yes")
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")
