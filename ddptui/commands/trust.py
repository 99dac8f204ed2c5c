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

from ddptui.config import load_config
from ddptui.errors import UsageError
from ddptui.present.trust import host_key_line
from ddptui.remote import failures
from ddptui.remote.hostkeys import KeyState, append_lines
from ddptui.remote.trust import HostKeyScan, lines_to_add, scan_host_keys

Confirm = Callable[[str], bool]


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.hosts))
    scans = asyncio.run(
        scan_host_keys(
            config.hosts,
            timeout=config.cluster.connect_timeout,
            max_parallel=config.cluster.max_parallel_connects,
        )
    )
    return apply(scans, confirm=_always if args.yes else _ask)


def apply(scans: Sequence[HostKeyScan], *, confirm: Confirm) -> int:
    """Report every host's key, add the unknown ones that ``confirm`` allows; the exit code."""
    for scan in scans:
        print(host_key_line(scan).plain)
    for scan in scans:
        if scan.check is not None and scan.check.state in (KeyState.CHANGED, KeyState.REVOKED):
            print(f"\n{failures.host_key_failure(scan.host, scan.check).detail}", file=sys.stderr)
    declined = False
    for path, lines in lines_to_add(scans).items():
        noun = "key" if len(lines) == 1 else "keys"
        if confirm(f"Add {len(lines)} {noun} to {path}? [y/N] "):
            append_lines(path, lines)
            print(f"added {len(lines)} {noun} to {path}")
        else:
            declined = True
    trusted = all(
        scan.check is not None and scan.check.state not in (KeyState.CHANGED, KeyState.REVOKED)
        for scan in scans
    )
    return 0 if trusted and not declined else 1


def _always(question: str) -> bool:
    return True


def _ask(question: str) -> bool:
    if not sys.stdin.isatty():
        raise UsageError("cannot ask for confirmation: stdin is not a terminal; use --yes")
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")
