"""The check's word on the Xid errors a host's kernel log holds since boot: the GPU's faults
as warnings with what to do, a program's as information, a log that could not be read said
where GPUs are; never a refusal to launch (a reset since clears the fault, not the line)."""

from __future__ import annotations

from pathlib import Path

from ddptui.health import Code, Severity
from ddptui.health.xid import XIDS, meaning
from ddptui.probe.facts import KernelLog
from ddptui.probe.sections import read_kernel_log
from tests.helpers import A, B, C, Scenario, cpu_host

DMESG = Path(__file__).resolve().parents[1] / "fixtures" / "kernel" / "dmesg-xid.txt"


def _logged() -> KernelLog:
    xids = [line for line in DMESG.read_text().splitlines() if "NVRM: Xid" in line]
    return read_kernel_log({"readable": True, "xid_lines": xids, "xid_count": len(xids)})


def test_each_gpu_s_xid_is_one_finding_naming_it_with_its_meaning_and_fix() -> None:
    s = Scenario()
    s.edit(B, kernel_log=_logged())
    found = [f for f in s.run() if f.code is Code.GPU_XID]
    assert all(f.host == B for f in found)
    by_code = {int(f.message.split("Xid ")[1].split(",")[0]): f for f in found}
    assert sorted(by_code) == [13, 43, 48, 63, 79, 94, 119]
    fell = by_code[79]
    assert fell.severity is Severity.WARNING
    assert fell.message == (
        f"{B}: the kernel logged Xid 79, the GPU fell off the bus, for the GPU at PCI "
        "0000:86:00 2 times since boot (last: pid='<unknown>', name=<unknown>, GPU has fallen "
        "off the bus.)"
    )
    assert fell.hint.startswith("reboot the host")
    assert "nvidia-smi -r -i 0000:3b:00" in by_code[63].hint
    # A program's own faults follow the program, not the GPU.
    assert by_code[13].severity is by_code[43].severity is Severity.INFO
    assert {by_code[code].severity for code in (48, 63, 94, 119)} == {Severity.WARNING}


def test_since_boot_is_history_a_launch_is_never_refused_for_it() -> None:
    s = Scenario()
    for name in (A, B, C):
        s.edit(name, kernel_log=_logged())
    assert not [f for f in s.run() if f.severity is Severity.ERROR]


def test_more_xid_lines_than_were_read_are_counted() -> None:
    s = Scenario()
    logged = _logged()
    s.edit(A, kernel_log=KernelLog(True, xids=logged.xids[:1], xid_count=1200))
    (more,) = [f for f in s.run() if f.code is Code.GPU_XID and "more" in f.message]
    assert more.message == (
        f"{A}: the kernel logged 1,199 more Xid line(s) since boot than the 1 newest read here"
    )


def test_a_log_that_could_not_be_read_is_said_where_there_are_gpus_only() -> None:
    s = Scenario()
    unreadable = KernelLog(
        readable=False,
        why="dmesg: read kernel buffer failed: Operation not permitted",
        restricted=True,
    )
    s.edit(A, kernel_log=unreadable)
    s.edit(C, kernel_log=unreadable)
    cpu_host(s)
    (said,) = [f for f in s.run() if f.code is Code.KERNEL_LOG_UNREADABLE]
    assert (said.host, said.severity) == (A, Severity.INFO)
    assert "Operation not permitted" in said.message and "dmesg_restrict" in said.hint


def test_a_healthy_log_or_one_not_looked_at_says_nothing() -> None:
    s = Scenario()
    s.edit(A, kernel_log=KernelLog(readable=True))
    s.edit(B, kernel_log=KernelLog())
    codes = {f.code for f in s.run()}
    assert not codes & {Code.GPU_XID, Code.KERNEL_LOG_UNREADABLE}


def test_every_xid_named_has_words_and_a_fix_and_any_other_is_named_by_its_number() -> None:
    assert all(said.words and said.fix for said in XIDS.values())
    other = meaning(9999)
    assert "Xid catalogue" in other.fix and other.program is False
