"""The probe's kernel-log section read into :class:`~ddptui.probe.facts.KernelLog`: the Xid
lines of both driver shapes, and whatever else a host sends in their place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddptui.probe.facts import KernelLog, XidEvent
from ddptui.probe.parse import parse_facts
from ddptui.probe.sections import MAX_XID_EVENTS, read_kernel_log

DMESG = Path(__file__).resolve().parents[1] / "fixtures" / "kernel" / "dmesg-xid.txt"


def _section(lines: list[str]) -> dict[str, Any]:
    """What the probe sends of a readable log holding ``lines`` (its own filter applied)."""
    xids = [line for line in lines if "NVRM: Xid" in line]
    return {"readable": True, "xid_lines": xids, "xid_count": len(xids)}


def test_every_xid_line_of_both_driver_shapes_is_read_with_its_gpu_and_code() -> None:
    log = read_kernel_log(_section(DMESG.read_text().splitlines()))
    assert log.readable is True and log.xid_count == 8
    assert [(event.pci, event.code) for event in log.xids] == [
        ("0000:18:00", 13),
        ("0000:18:00", 43),
        ("0000:3b:00", 63),
        ("0000:3b:00", 94),
        ("0000:86:00", 79),
        ("0000:86:00", 79),
        ("0000:af:00", 48),
        ("0000:af:00", 119),
    ]
    assert log.xids[4] == XidEvent(
        "0000:86:00", 79, "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    # The older shape: no "PCI:", no pid; a function digit after the bus id is left off.
    assert log.xids[6].text.startswith("An uncorrectable double bit error (DBE)")


def test_the_probe_s_document_carries_it_and_an_older_probe_s_says_nothing_of_it() -> None:
    lines = DMESG.read_text().splitlines()
    document = {"probe_version": 1, "kernel_log": _section(lines)}
    facts = parse_facts(json.dumps(document))
    assert len(facts.kernel_log.xids) == 8 and "kernel_log" not in facts.section_errors
    older = parse_facts(json.dumps({"probe_version": 1}))
    assert older.kernel_log == KernelLog() and older.kernel_log.readable is None
    assert "kernel_log" not in older.section_errors


def test_an_unreadable_log_says_why_and_whether_users_are_kept_from_it() -> None:
    said = {
        "readable": False,
        "why": "dmesg: read kernel buffer failed: Operation not permitted",
        "restricted": True,
    }
    assert read_kernel_log(said) == KernelLog(
        readable=False,
        why="dmesg: read kernel buffer failed: Operation not permitted",
        restricted=True,
    )
    failed = read_kernel_log({"error": "TimeoutExpired: dmesg"})
    assert (failed.readable, failed.why) == (False, "TimeoutExpired: dmesg")


@pytest.mark.parametrize(
    "section",
    [
        None,
        [],
        "readable",
        {"readable": "yes", "xid_lines": ["NVRM: Xid (PCI:0000:18:00): 79, x"]},
        {"readable": 1, "xid_lines": ["NVRM: Xid (PCI:0000:18:00): 79, x"]},
    ],
)
def test_a_section_that_is_not_one_gives_no_xid(section: Any) -> None:
    assert read_kernel_log(section).xids == ()


def test_hostile_lines_are_read_as_plain_bounded_text_or_left_out() -> None:
    lines = [
        "NVRM: Xid (PCI:0000:18:00): 79, \x1b[2J\x1b]0;owned\x07GPU gone\r\nrm -rf",
        "NVRM: Xid (PCI:0000:18:00): 79, " + "x" * 100_000,
        "NVRM: Xid (PCI:0000:18:00): 123456, too long a code",
        "NVRM: Xid (PCI:zzzz:18:00): 79, not a bus id",
        "NVRM: Xid (PCI:0000:18:00) 79 no colon",
        "Xid (PCI:0000:18:00): 79, without the driver's mark",
        7,
        None,
        {"line": "NVRM: Xid (PCI:0000:18:00): 79, x"},
    ]
    log = read_kernel_log({"readable": True, "xid_lines": lines, "xid_count": "many"})
    assert [(event.pci, event.code) for event in log.xids] == [("0000:18:00", 79)] * 2
    escaped = log.xids[0].text
    assert "\x1b" not in escaped and "\r" not in escaped and "\n" not in escaped
    assert len(log.xids[1].text) <= 200
    # A count that is no count is as many as were read.
    assert log.xid_count == 2


def test_only_the_newest_lines_are_read_and_the_rest_counted() -> None:
    lines = [f"NVRM: Xid (PCI:0000:18:00): {code}, line {code}" for code in range(1, 101)]
    log = read_kernel_log({"readable": True, "xid_lines": lines, "xid_count": 5000})
    assert len(log.xids) == MAX_XID_EVENTS
    assert log.xids[0].code == 100 - MAX_XID_EVENTS + 1 and log.xids[-1].code == 100
    assert log.xid_count == 5000
