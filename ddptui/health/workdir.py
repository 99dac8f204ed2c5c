"""Whether another user on a host could change what its workdir holds (pure).

The run's code is staged there and every rank imports the stack handler's ``sitecustomize.py``
from there first, so whoever can write or replace any part of the workdir's path runs code as
the user. The rule is OpenSSH's ``StrictModes``: every directory on the way is owned by the
user or root and writable by no one else, with two allowances. The sticky bit keeps others
from renaming what is not theirs (``/tmp``), and write access for the user's private group
(their primary group, named after them and theirs alone: what a umask of 002 gives) is the
user's own, as Debian's sshd has it. The workdir itself is the user's and writable by no one
else, sticky or not; one that does not exist yet must not be creatable by anyone else first.
So are the directories ddptui makes in it (``runs``, ``code-cache``…) where they exist already:
made by hand, or by an older ddptui under a umask such as 002, others may write there.
"""

from __future__ import annotations

import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ddptui.config.model import HostConfig
from ddptui.health.findings import Code, Finding, Severity
from ddptui.probe.facts import NA, HostFacts, PathEntry, WorkdirSafety
from ddptui.untrusted import plain

SHOWN = 3
"""The unsafe parts a message names; the rest are counted."""
HOME_WORKDIR = "~/ddptui-runs"

Fix: TypeAlias = Literal["chmod", "chmod -R", "mkdir", "move"]
"""``chmod``: the user owns it and can take the others' write access away; ``chmod -R``: so,
and from what it holds, made alike (a directory ddptui made in the workdir); ``mkdir``: the
workdir does not exist yet, and made now it is the user's; ``move``: only its owner or an
administrator can make it safe, so the workdir belongs elsewhere."""


@dataclass(frozen=True)
class Unsafe:
    """A part of the workdir's path another user could change, and why."""

    entry: PathEntry
    why: str
    fix: Fix


def workdir_findings(host: HostConfig, facts: HostFacts) -> Iterator[Finding]:
    safety = facts.workdir
    if safety is NA:
        return
    unsafe = _unsafe_parts(safety)
    if not unsafe:
        return
    shown = "; ".join(f"{_shown(part.entry.path)} {part.why}" for part in unsafe[:SHOWN])
    more = f"; and {len(unsafe) - SHOWN} more" if len(unsafe) > SHOWN else ""
    yield Finding(
        Code.WORKDIR_UNSAFE,
        Severity.ERROR,
        host.name,
        f"another user on {host.name} could change what the workdir "
        f"{_shown(safety.path)} holds (the run's code, and the sitecustomize.py every rank "
        f"imports first) and so run code as you: {shown}{more}",
        _hint(host, safety, unsafe),
    )


def _unsafe_parts(safety: WorkdirSafety) -> list[Unsafe]:
    """Every part of the workdir's path that a user other than the probe's (and root) could
    write, replace or create first, from ``/`` down."""
    found: list[Unsafe] = []
    for entry in safety.entries:
        if entry == safety.target:
            found += _target(safety, entry)
        elif entry in safety.made:
            found += _made(safety, entry)
        else:
            found += _on_the_way(safety, entry)
    return found


def _target(safety: WorkdirSafety, entry: PathEntry) -> Iterator[Unsafe]:
    user = safety.uid
    writers = _writers(safety, entry)
    if safety.exists:
        if entry.uid != user:
            yield Unsafe(entry, f"(the workdir) {_owner(entry)}", "move")
        elif writers:
            yield Unsafe(entry, f"(the workdir) is writable by {writers} ({_mode(entry)})", "chmod")
        return
    where = "(where the workdir would be made)"
    if entry.uid not in (0, user):
        yield Unsafe(entry, f"{where} {_owner(entry)}", "move")
    elif writers and entry.mode & stat.S_ISVTX:
        # The sticky bit keeps others from renaming the workdir once it is the user's, not
        # from making it first.
        yield Unsafe(
            entry,
            f"{where} is writable by {writers} ({_mode(entry)}): one of them can make the "
            "workdir first",
            "mkdir",
        )
    elif writers:
        yield Unsafe(
            entry,
            f"{where} is writable by {writers} without the sticky bit ({_mode(entry)}): one "
            "of them can make the workdir first, or replace it",
            "chmod" if entry.uid == user else "move",
        )


def _made(safety: WorkdirSafety, entry: PathEntry) -> Iterator[Unsafe]:
    # As the workdir, sticky or not: the sticky bit keeps no one from making a run's
    # directory there before ddptui does.
    where = "(which ddptui makes in the workdir)"
    writers = _writers(safety, entry)
    if entry.uid != safety.uid:
        yield Unsafe(entry, f"{where} {_owner(entry)}", "move")
    elif writers:
        yield Unsafe(entry, f"{where} is writable by {writers} ({_mode(entry)})", "chmod -R")


def _on_the_way(safety: WorkdirSafety, entry: PathEntry) -> Iterator[Unsafe]:
    user = safety.uid
    writers = _writers(safety, entry)
    if entry.uid not in (0, user):
        yield Unsafe(entry, _owner(entry), "move")
    # A link's own mode means nothing: replacing it is its directory's to allow.
    elif entry.kind != "link" and writers and not entry.mode & stat.S_ISVTX:
        yield Unsafe(
            entry,
            f"is writable by {writers} without the sticky bit ({_mode(entry)}): any of them "
            "can rename what it holds",
            "chmod" if entry.uid == user else "move",
        )


def _writers(safety: WorkdirSafety, entry: PathEntry) -> str:
    """Who other than the user may write in ``entry``, in words; empty when no one."""
    group = entry.mode & stat.S_IWGRP and entry.gid != safety.private_gid
    if entry.mode & stat.S_IWOTH:
        return "its group and every other user" if group else "every other user"
    return "its group" if group else ""


def _owner(entry: PathEntry) -> str:
    if entry.kind == "link":
        return f"is a link another user (uid {entry.uid}) owns, who may replace it"
    return f"belongs to another user (uid {entry.uid}), who can write in it at will"


def _mode(entry: PathEntry) -> str:
    return f"mode {entry.mode:04o}"


def _shown(path: str) -> str:
    """A path the host reported, on one line of a message."""
    return plain(path, one_line=True)


def _hint(host: HostConfig, safety: WorkdirSafety, unsafe: list[Unsafe]) -> str:
    home = f'set workdir to a directory of your own under your home (workdir = "{HOME_WORKDIR}")'
    if any(part.fix == "move" for part in unsafe):
        return (
            f"{home}: what you do not own, only its owner or an administrator can make safe "
            "(chown it to you, or chmod go-w)"
        )
    # Every value in a fix is quoted: users paste these commands into a shell.
    steps = []
    chmod = [shlex.quote(part.entry.path) for part in unsafe if part.fix == "chmod"]
    if chmod:
        steps.append(f"run `chmod go-w {' '.join(chmod)}` on {host.name}")
    tree = [shlex.quote(part.entry.path) for part in unsafe if part.fix == "chmod -R"]
    if tree:
        steps.append(f"run `chmod -R go-w {' '.join(tree)}` on {host.name}")
    if any(part.fix == "mkdir" for part in unsafe):
        steps.append(
            f"make the workdir yourself first: `mkdir -p -m 700 {shlex.quote(safety.path)}` "
            f"on {host.name}"
        )
    return "; ".join(steps) + f"; or {home}"
