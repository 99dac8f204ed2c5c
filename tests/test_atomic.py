"""What ddptui makes on the head has the mode it asks for, whatever the umask; what it finds
there already keeps its own."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.atomic import make_dirs, open_file, write_atomic, write_new


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_002() -> Iterator[None]:
    old = os.umask(0o002)
    yield
    os.umask(old)


@pytest.mark.usefixtures("umask_002")
def test_each_level_made_has_the_mode_and_those_found_keep_theirs(tmp_path: Path) -> None:
    found = tmp_path / "home"
    found.mkdir(mode=0o775)
    found.chmod(0o775)
    make_dirs(found / "a" / "b" / "c")
    assert [_mode(found / "a"), _mode(found / "a" / "b"), _mode(found / "a" / "b" / "c")] == [
        0o700
    ] * 3
    assert _mode(found) == 0o775
    make_dirs(found / "shared", 0o755)
    assert _mode(found / "shared") == 0o755
    with pytest.raises(FileExistsError):
        make_dirs(found / "a", exist_ok=False)


@pytest.mark.usefixtures("umask_002")
def test_a_file_made_has_the_mode_and_one_found_keeps_its_own(tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    known_hosts.chmod(0o644)
    os.close(open_file(known_hosts, os.O_WRONLY | os.O_APPEND))
    assert _mode(known_hosts) == 0o644
    os.close(open_file(tmp_path / "new", os.O_WRONLY))
    assert _mode(tmp_path / "new") == 0o600
    write_atomic(tmp_path / "record", "text", 0o644)
    write_atomic(tmp_path / "bytes", b"\x00")
    assert (_mode(tmp_path / "record"), _mode(tmp_path / "bytes")) == (0o644, 0o600)
    left = sorted(path.name for path in tmp_path.iterdir())
    assert left == ["bytes", "known_hosts", "new", "record"], "no temporary file left"


@pytest.mark.usefixtures("umask_002")
def test_a_new_file_has_the_mode_and_never_replaces_one_found(tmp_path: Path) -> None:
    write_new(tmp_path / "stack.txt", "frames\n")
    assert (tmp_path / "stack.txt").read_text() == "frames\n"
    assert _mode(tmp_path / "stack.txt") == 0o600
    with pytest.raises(FileExistsError):
        write_new(tmp_path / "stack.txt", b"other")
    assert (tmp_path / "stack.txt").read_text() == "frames\n"
