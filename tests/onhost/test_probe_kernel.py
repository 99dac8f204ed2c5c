"""The probe's kernel-log section run for real, with a double for ``dmesg`` (the kernel log's
boundary): what it sends of a log with Xid lines, and of one it may not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.onhost import probe_kernel
from ddptui.onhost.probe_kernel import MAX_LINE_CHARS, MAX_XID_LINES, kernel_log_section

DMESG = Path(__file__).resolve().parents[1] / "fixtures" / "kernel" / "dmesg-xid.txt"


def _dmesg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    double = tmp_path / "dmesg"
    double.write_text(f"#!/bin/sh\n{script}\n")
    double.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


def test_only_the_xid_lines_are_sent_newest_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dmesg(tmp_path, monkeypatch, f"cat '{DMESG}'")
    section = kernel_log_section()
    assert section["readable"] is True and section["xid_count"] == 8
    assert all("NVRM: Xid" in line for line in section["xid_lines"])
    assert section["xid_lines"][-1].startswith("[13110.400000] NVRM: Xid (PCI:0000:af:00.0): 119")


def test_a_log_of_many_xids_and_long_lines_sends_the_newest_few_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = "y" * 10_000
    _dmesg(
        tmp_path,
        monkeypatch,
        f'i=0; while [ $i -lt 500 ]; do echo "NVRM: Xid (PCI:0000:18:00): 13, $i {long}"; '
        "i=$((i+1)); done",
    )
    section = kernel_log_section()
    assert section["xid_count"] == 500 and len(section["xid_lines"]) == MAX_XID_LINES
    assert section["xid_lines"][-1].startswith("NVRM: Xid (PCI:0000:18:00): 13, 499 ")
    assert {len(line) for line in section["xid_lines"]} == {MAX_LINE_CHARS}


def test_a_log_the_user_may_not_read_says_dmesg_s_words_and_whether_it_is_restricted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dmesg(
        tmp_path,
        monkeypatch,
        'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1',
    )
    restrict = tmp_path / "dmesg_restrict"
    restrict.write_text("1\n")
    monkeypatch.setattr(probe_kernel, "RESTRICT", restrict)
    assert kernel_log_section() == {
        "readable": False,
        "why": "dmesg: read kernel buffer failed: Operation not permitted",
        "restricted": True,
    }
