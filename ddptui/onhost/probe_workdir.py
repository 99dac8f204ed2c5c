"""The probe's workdir sections: the free disk where the workdir is, who could change what it
holds (every directory and link on its path from ``/``), and the identity hosts that share it
report alike."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from ddptui.onhost.common import make_dirs, open_file
from ddptui.onhost.probe_section import SectionError, maybe, read_kept
from ddptui.onhost.probe_torch_cache import TORCH_CACHE_DIR

MAX_PATH_ENTRIES = 64
"""Directories and links the workdir's walk records at most: a deeper path is left unjudged."""
MAX_SYMLINKS = 40
"""Links followed in one walk: Linux's limit for one lookup."""
PATH_MAX = 4096
"""Linux's longest path: a walk that builds a longer one stops."""
WORKDIR_ID = "workdir-id"
"""Under the workdir's probe cache: a random identity, made by the first probe to look."""
ID_CHARS = 32
ID_WRITE_S = 2.0
"""How long an identity file made without a hard link may stay short of an identity: it is
read again meanwhile, 50 ms apart, as its maker finishes writing it."""


def disk_section(workdir: str) -> dict[str, Any]:
    path = Path(workdir).expanduser()
    checked = path
    while not checked.exists() and checked != checked.parent:
        checked = checked.parent
    usage = shutil.disk_usage(str(checked))
    return {
        "path": str(path),
        "checked_path": str(checked),
        "free_bytes": usage.free,
        "total_bytes": usage.total,
    }


def parts(path: Path) -> list[str]:
    """``path``'s components after its root, in reverse order: the next to look up last."""
    return list(reversed(path.parts[1:] if path.anchor else path.parts))


def private_group() -> int | None:
    """The user's primary group when it is theirs alone: the group most systems make for each
    user, named after them (a umask of 002 makes what they create writable by it)."""
    import grp
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    group = grp.getgrgid(os.getegid())
    if group.gr_name != user or any(member != user for member in group.gr_mem):
        return None
    return group.gr_gid


MADE_IN_WORKDIR = ("runs", "code-cache", TORCH_CACHE_DIR, "bandwidth")
"""The directories ddptui makes in the workdir (ddptui.layout's, which this file cannot
import; a test keeps them equal). One made by hand, or by an older ddptui under the umask, may
be writable by others: one of them could then make a run's directory there first, or rename one."""


def workdir_section(workdir: str) -> dict[str, Any]:
    """Who could change what the workdir holds, for the head to judge: from ``/``, every
    directory and link a lookup of the workdir passes through, with its owner and ``st_mode``
    from ``lstat``. Links are followed as the kernel follows them, by reading them, never by
    trusting a resolved path: a link's own directory matters as much as its target's.

    ``target`` indexes the workdir, or the directory it would be created in when it does not
    exist yet; it is null when the walk stopped short (a directory it may not search, a link
    loop, more than ``MAX_PATH_ENTRIES`` entries). ``made`` indexes those of
    :data:`MADE_IN_WORKDIR` that exist, each walked to as the workdir is.
    """
    path = Path(workdir).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    walk = _Walk()
    target, exists = walk.to(path)
    made: list[int] = []
    if exists:
        for name in MADE_IN_WORKDIR:
            found, there = walk.to(path / name)
            if there and found is not None:
                made.append(walk.index[found])
    return {
        "path": str(path),
        "uid": os.geteuid(),
        "private_gid": maybe(private_group),
        "exists": exists,
        "target": None if target is None else walk.index[target],
        "entries": walk.entries,
        "made": made,
    }


class _Walk:
    """Lookups from ``/``, each directory and link they pass through recorded once."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.index: dict[Path, int] = {}
        self.root = Path("/")
        self._record(self.root, self.root.lstat())

    def _record(self, where: Path, found: os.stat_result) -> None:
        if where not in self.index:
            self.index[where] = len(self.entries)
            self.entries.append(
                {
                    "path": str(where),
                    "uid": found.st_uid,
                    "gid": found.st_gid,
                    "mode": found.st_mode,
                }
            )

    def to(self, path: Path) -> tuple[Path | None, bool]:
        """Where the lookup of ``path`` ends (itself, or the directory it would be created in;
        None when it stopped short), and whether ``path`` exists."""
        pending = parts(path)
        current = self.root
        links = 0
        while pending:
            part = pending.pop()
            if part == "..":
                current = current.parent
                continue
            step = current / part
            if len(self.entries) >= MAX_PATH_ENTRIES or len(str(step)) > PATH_MAX:
                return None, False
            try:
                found = step.lstat()
            except FileNotFoundError:
                return current, False
            except OSError:
                return None, False
            self._record(step, found)
            if stat.S_ISLNK(found.st_mode):
                links += 1
                if links > MAX_SYMLINKS:
                    return None, False
                link = Path(os.readlink(step))  # noqa: PTH115 (Path.readlink is Python 3.9+)
                if link.is_absolute():
                    current = self.root
                pending += parts(link)
            elif stat.S_ISDIR(found.st_mode):
                current = step
            else:
                # Not a directory: the workdir itself when nothing follows, else none can be.
                return (step, True) if not pending else (None, False)
        return current, True


def identity_section(workdir: str) -> dict[str, Any]:
    """What every host that shares this workdir (an NFS home, say) reports alike: the random
    identity kept in it, and the inode of the file that keeps it, which a network filesystem
    shows alike to all its clients and a copy of the workdir does not share.

    Of hosts making the identity at once, one wins: a complete file is hard-linked into
    place, which fails for all but the first (on NFS too), and the others read the winner's.
    """
    folder = Path(workdir).expanduser() / TORCH_CACHE_DIR
    path = folder / WORKDIR_ID
    if not path.exists():
        make_dirs(folder)
        _make_identity(path, replace=False)
    deadline, replaced = time.monotonic() + ID_WRITE_S, False
    while True:
        kept, found = read_kept(path, ID_CHARS + 1)
        text = kept.decode("ascii", "replace")
        if len(text) == ID_CHARS:
            return {"id": text, "inode": found.st_ino}
        if replaced:
            raise SectionError(f"{path} holds no identity")
        if time.monotonic() > deadline:
            # Cut short (a full disk, a crash while it was written): a new one takes its place.
            _make_identity(path, replace=True)
            replaced = True
        else:
            time.sleep(0.05)


def _make_identity(path: Path, *, replace: bool) -> None:
    identity = secrets.token_hex(ID_CHARS // 2).encode()
    part = path.with_name(f"{path.name}.{secrets.token_hex(8)}.part")
    try:
        with os.fdopen(open_file(part, os.O_WRONLY | os.O_EXCL), "wb") as file:
            file.write(identity)
        if replace:
            part.replace(path)
        else:
            os.link(part, path)
    except FileExistsError:
        pass
    except OSError:
        if replace:
            raise
        # A filesystem without hard links: an exclusive create, whose contents a host that
        # reads at that moment may not see yet (the reads above wait for them).
        try:
            fd = open_file(path, os.O_WRONLY | os.O_EXCL)
        except FileExistsError:
            return
        with os.fdopen(fd, "wb") as file:
            file.write(identity)
    finally:
        maybe(part.unlink)
