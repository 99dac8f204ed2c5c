"""Two users who share a primary group, as many clusters' users do (with a umask of 002): forked
children of a test that runs as root, each with one uid and the group alone. Neither need exist
in /etc/passwd. Without root the tests that need them are skipped."""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar, cast

import pytest

USER = 54321
"""Whom ddptui runs as."""
OTHER = 54322
"""Another member of the user's group."""
GROUP = 54320
"""Their shared primary group."""

T = TypeVar("T")


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("two users sharing a group need root to play them")


@contextlib.contextmanager
def shared_tmp() -> Iterator[Path]:
    """A directory both users may search (pytest's own are root's alone), removed after."""
    require_root()
    path = Path(tempfile.mkdtemp(prefix="ddptui-users-"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def owned_dir(path: Path, mode: int = 0o755) -> Path:
    """``path`` made as the user's own (their workdir, their home), writable by no one else."""
    path.mkdir()
    os.chown(path, USER, GROUP)
    path.chmod(mode)
    return path


def as_user(uid: int, act: Callable[[], T], umask: int = 0o002) -> T:
    """What ``act`` returns (pickled back) when ``uid`` does it, in group :data:`GROUP` alone
    and with ``umask``; what it raises is an ``AssertionError`` here."""
    require_root()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(GROUP)
            os.setuid(uid)
            os.umask(umask)
            try:
                said: tuple[bool, object] = (True, act())
            except Exception as error:
                said = (False, f"{type(error).__name__}: {error}")
            with os.fdopen(write, "wb") as out:
                pickle.dump(said, out)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        data = answer.read()
    os.waitpid(pid, 0)
    assert data, f"uid {uid}'s child died without an answer"
    done, value = pickle.loads(data)
    assert done, f"as uid {uid}: {value}"
    return cast(T, value)


def attempts_to_replace(paths: list[Path]) -> list[str]:
    """What the other user managed, of writing into each of ``paths``, replacing it by a file
    of theirs, and moving its directory away for one of theirs: empty when nothing."""
    managed = []
    for path in paths:
        with contextlib.suppress(OSError), path.open("ab"):
            managed.append(f"wrote into {path}")
        forged = path.with_name(path.name + ".forged")
        with contextlib.suppress(OSError):
            forged.write_text("import os\n")
            forged.replace(path)
            managed.append(f"replaced {path}")
        aside = path.parent.with_name(path.parent.name + ".aside")
        with contextlib.suppress(OSError):
            path.parent.rename(aside)
            managed.append(f"moved {path.parent} away")
    return managed
