"""The workdir's identity as the probe keeps it, on real files: alike for every process that
looks at one workdir, whoever made it, and different for a copy."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ddptui.onhost import probe_workdir
from ddptui.onhost.probe_section import section
from ddptui.onhost.probe_torch_cache import TORCH_CACHE_DIR
from ddptui.onhost.probe_workdir import WORKDIR_ID, identity_section


def test_the_first_look_makes_the_workdir_and_its_identity_and_later_looks_read_it(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "runs"
    first = identity_section(str(workdir))
    assert identity_section(str(workdir)) == first
    assert len(first["id"]) == 32 and int(first["id"], 16) >= 0
    assert sorted(path.name for path in (workdir / TORCH_CACHE_DIR).iterdir()) == [WORKDIR_ID]


def test_a_copy_of_the_workdir_keeps_the_identity_but_not_the_inode(tmp_path: Path) -> None:
    first = identity_section(str(tmp_path / "runs"))
    shutil.copytree(tmp_path / "runs", tmp_path / "copy")
    copy = identity_section(str(tmp_path / "copy"))
    assert copy["id"] == first["id"]
    assert copy["inode"] != first["inode"]


def test_a_host_that_makes_it_second_reads_the_first_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = "f" * 32
    link = os.link

    def another_host_first(source: Path, target: Path) -> None:
        Path(target).write_text(first)
        link(source, target)

    monkeypatch.setattr(probe_workdir.os, "link", another_host_first)
    assert identity_section(str(tmp_path / "runs"))["id"] == first
    assert [path.name for path in (tmp_path / "runs" / TORCH_CACHE_DIR).iterdir()] == [WORKDIR_ID]


def test_without_hard_links_it_is_made_by_an_exclusive_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_hard_links(source: Path, target: Path) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(probe_workdir.os, "link", no_hard_links)
    section = identity_section(str(tmp_path / "runs"))
    kept = tmp_path / "runs" / TORCH_CACHE_DIR / WORKDIR_ID
    assert kept.read_text() == section["id"]
    assert [path.name for path in kept.parent.iterdir()] == [WORKDIR_ID]


def test_an_identity_cut_short_is_replaced_once_its_maker_had_time_to_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe_workdir, "ID_WRITE_S", 0.2)
    kept = tmp_path / "runs" / TORCH_CACHE_DIR / WORKDIR_ID
    kept.parent.mkdir(parents=True)
    kept.write_text("0123")
    section = identity_section(str(tmp_path / "runs"))
    assert kept.read_text() == section["id"]
    assert len(section["id"]) == 32


@pytest.mark.parametrize("kind", ["link", "pipe"])
def test_an_identity_that_is_not_a_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    kept = tmp_path / "runs" / TORCH_CACHE_DIR / WORKDIR_ID
    kept.parent.mkdir(parents=True)
    if kind == "link":
        (tmp_path / "elsewhere").write_text("f" * 32)
        kept.symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(kept)
    said = section(lambda: identity_section(str(tmp_path / "runs")))
    assert set(said) == {"error"}, said
