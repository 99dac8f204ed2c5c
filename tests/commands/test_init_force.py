"""``ddptui init --force`` replaces a regular file in one step, and nothing else."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.config import starter_text


def test_force_replaces_a_regular_file_in_one_rename_keeping_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text("old\n")
    path.chmod(0o640)
    before = path.stat().st_ino

    assert main(["init", str(path), "--force"]) == 0

    assert path.read_text(encoding="utf-8") == starter_text()
    assert path.stat().st_ino != before  # a new file took the name; the old one was not truncated
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["hosts.toml"]  # no temporary left


def test_a_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    old = os.umask(0o027)
    try:
        assert main(["init", str(path)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_force_refuses_a_symlink_and_leaves_its_target_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "precious"
    precious.write_text("do not truncate\n")
    link = tmp_path / "hosts.toml"
    link.symlink_to(precious)

    assert main(["init", str(link), "--force"]) == 2

    assert precious.read_text() == "do not truncate\n" and link.is_symlink()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "symbolic link" in err and "regular files only" in err


def test_force_refuses_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path), "--force"]) == 2
    assert "a directory" in capsys.readouterr().err


def test_a_fifo_is_refused_at_once_with_or_without_force(tmp_path: Path) -> None:
    fifo = tmp_path / "hosts.toml"
    os.mkfifo(fifo)
    for extra in (["--force"], []):
        # In a subprocess with a timeout: opening a FIFO for writing would block for ever.
        result = subprocess.run(
            [sys.executable, "-m", "ddptui", "init", str(fifo), *extra],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
