"""``ddptui init [PATH] [--force] [--job SCRIPT]``: write a commented starter hosts file, its
``[job]`` set for SCRIPT (:mod:`ddptui.config.proposals`) when one is given."""

from __future__ import annotations

import argparse
import os
import shlex
import stat
import tempfile
from pathlib import Path

from ddptui.config import starter_text
from ddptui.config.proposals import MAX_SCRIPT_BYTES, Proposal, propose
from ddptui.config.render import assignment
from ddptui.errors import UsageError


def run(args: argparse.Namespace) -> int:
    """Write the starter file to ``args.path``; refuse to replace a file unless ``args.force``.

    The text goes to a temporary file beside the target first, then takes its name in one
    step, so the target is either untouched or complete. Only a regular file is ever
    replaced: a symbolic link (whose target would be clobbered), a FIFO (which would block),
    a directory or a device is refused.
    """
    path = Path(args.path)
    shown = shlex.quote(args.path)
    proposal = _proposal(Path(args.job), path) if args.job else None
    mode = _replaceable_mode(path, args) if args.force else None
    try:
        text = starter_text(proposal.job if proposal else None)
        _write_new(path, text, replace=args.force, mode=mode)
    except FileExistsError:
        raise UsageError(
            f"{args.path} already exists; `ddptui init {shown} --force` replaces it"
        ) from None
    except IsADirectoryError:
        raise UsageError(f"{args.path} is a directory; give a file name") from None
    except FileNotFoundError:
        raise UsageError(f"{args.path}: no such directory: {path.parent}") from None
    except OSError as error:
        raise UsageError(f"{args.path}: cannot write: {error.strerror or error}") from None
    print(f"wrote {args.path}: set each host's name and address, then `ddptui config {shown}`")
    if proposal is not None:
        print(*_proposal_lines(proposal, args.job), sep="\n")
    return 0


def _proposal(script: Path, hosts_file: Path) -> Proposal:
    """What to write for ``script`` (a file, or a directory with ``__main__.py``), named as
    the hosts file names it: relative to that file's directory."""
    source = script / "__main__.py" if script.is_dir() else script
    try:
        with source.open("rb") as handle:
            data = handle.read(MAX_SCRIPT_BYTES + 1)
    except OSError as error:
        raise UsageError(f"--job {script}: cannot read it: {error.strerror or error}") from None
    named = os.path.relpath(script.absolute(), hosts_file.absolute().parent)
    if len(data) > MAX_SCRIPT_BYTES:
        return Proposal(None, {"script": named, "args": []}, ("too long to read for more",))
    return propose(data.decode("utf-8", errors="replace"), named)


def _proposal_lines(proposal: Proposal, script: str) -> list[str]:
    if proposal.framework:
        found = f"trains with {proposal.framework}"
    else:
        found = "trains with no framework ddptui knows"
    written = "; ".join(assignment(key, value) for key, value in proposal.job.items())
    lines = [f"{script} {found}: [job] {written}"]
    lines += [f"  for stop and resume: {note}" for note in proposal.notes]
    return lines


def _replaceable_mode(path: Path, args: argparse.Namespace) -> int | None:
    """The permission bits of the regular file ``--force`` may replace (None: none there)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UsageError(f"{args.path}: cannot write: {error.strerror or error}") from None
    if stat.S_ISREG(info.st_mode):
        return stat.S_IMODE(info.st_mode)
    kind = (
        "a symbolic link (its target is left alone)"
        if stat.S_ISLNK(info.st_mode)
        else "a directory"
        if stat.S_ISDIR(info.st_mode)
        else "not a regular file (a FIFO, socket or device)"
    )
    raise UsageError(f"{args.path} is {kind}; --force replaces regular files only")


def _write_new(path: Path, text: str, *, replace: bool, mode: int | None) -> None:
    if path.is_dir():
        raise IsADirectoryError(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        os.fchmod(fd, mode if mode is not None else 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if replace:
            # rename() replaces the name itself: were it swapped for a link since the check,
            # the link is replaced, never followed.
            temporary.replace(path)
        else:
            # link() fails if the name exists, whatever it is: no check-then-write window.
            path.hardlink_to(temporary)
    finally:
        temporary.unlink(missing_ok=True)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
