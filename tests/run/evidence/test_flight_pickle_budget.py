"""The pickle reader's budgets (:mod:`ddptui.run.evidence.flight_pickle`): a dump of the largest
size taken, 32 MiB, of one opcode over and over is refused within them, in bounded time and memory
(docs/architecture.md, "Memory budgets on the head"), and torch's full recorder is read.

Each hostile dump is read by an interpreter of its own, so that its peak is its own; the dump
is handed over in a file, read before the peak is first taken, so only the reading counts.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from array import array
from collections.abc import Callable
from pathlib import Path

import pytest

from ddptui.run.evidence import flight_pickle
from ddptui.run.evidence.flight import MAX_DUMP_BYTES
from tests.fixtures.flight.hostile import recorded

PEAK = 150 * 2**20
"""The most a dump's reading may grow the head, as docs/architecture.md says."""
SECONDS = 15
"""Time to refuse a dump: about 1 s here, 4 at worst on a busy machine."""

_READ = """
import json, sys, time
from pathlib import Path
from ddptui.run.evidence import flight_pickle


def peak():
    # VmHWM, not ru_maxrss, which starts at the parent's peak: exec keeps it.
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise LookupError("no VmHWM")


data = Path(sys.argv[1]).read_bytes()
before = peak()
started = time.perf_counter()
try:
    flight_pickle.load(data)
    said = "read"
except flight_pickle.PickleRefused as error:
    said = str(error)
took = time.perf_counter() - started
print(json.dumps({"said": said, "took": took, "grown": peak() - before}))
"""


def _repeated(prefix: bytes, unit: bytes) -> bytes:
    return b"\x80\x04" + prefix + unit * ((MAX_DUMP_BYTES - 2 - len(prefix)) // len(unit))


def _numbered_puts() -> bytes:
    """``LONG_BINPUT`` of index 0, 1, 2, …: each a memo entry of its own."""
    count = (MAX_DUMP_BYTES - 3) // 5
    indices = array("I", range(count))
    if sys.byteorder == "big":
        indices.byteswap()
    raw = indices.tobytes()
    puts = bytearray(5 * count)
    puts[0::5] = b"r" * count
    for byte in range(4):
        puts[1 + byte :: 5] = raw[byte :: indices.itemsize]
    return b"\x80\x04]" + bytes(puts)


def _wide(size: int) -> bytes:
    """A string whose last character makes it take 4 bytes a byte, and 5 while decoded."""
    return b"X" + size.to_bytes(4, "little") + b"a" * (size - 4) + "\U0001f600".encode()


DUMPS: dict[str, Callable[[], bytes]] = {
    "MEMOIZE": lambda: _repeated(b"]", b"\x94"),
    # With 300 values below the marks, each mark's place is an int object of its own.
    "MARK": lambda: _repeated(b"N" * 300, b"("),
    "BINPUT": lambda: _repeated(b"]", b"q\x00"),
    "LONG_BINPUT": _numbered_puts,
    "DUP": lambda: _repeated(b"]", b"2"),
    "EMPTY_LIST+APPEND": lambda: _repeated(b"]", b"]a"),
    # A dict of one pair takes the most memory a byte: its table is made for five.
    "EMPTY_DICT+SETITEM": lambda: _repeated(b"]", b"}K\x01Nsa"),
    "BINGET": lambda: _repeated(b"]q\x00", b"h\x00"),
    "BINUNICODE": lambda: b"\x80\x04" + _wide(MAX_DUMP_BYTES - 7),
    # 64 MiB of strings, then lists until the budget is spent.
    "BINUNICODE+APPEND": lambda: _repeated(b"]" + (_wide(2 * 2**20) + b"a") * 8, b"]a"),
}


@pytest.mark.parametrize("opcode", list(DUMPS))
def test_32_mib_of_one_opcode_is_refused_within_budget(opcode: str, tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.write_bytes(DUMPS[opcode]())
    assert dump.stat().st_size <= MAX_DUMP_BYTES
    reading = subprocess.run(
        [sys.executable, "-c", _READ, str(dump)],
        capture_output=True,
        text=True,
        timeout=4 * SECONDS,
        cwd=Path(__file__).resolve().parents[3],
        check=True,
    )
    read = json.loads(reading.stdout)
    refusal = "opcode b'2'" if opcode == "DUP" else "more than"
    assert refusal in read["said"], read
    assert read["took"] < SECONDS, read
    assert read["grown"] < PEAK, f"{read['grown'] / 2**20:.0f} MiB: {read}"


def test_torch_s_full_recorder_with_deep_stacks_is_read() -> None:
    """2,000 collectives (the recorder's default size), each with a stack of 64 frames from 300
    places, pickled by Python, which memoizes more than torch does: within both budgets."""
    document = pickle.loads(recorded("rank-behind", 0))  # the recording: trusted
    entry = document["entries"][0]
    places = [
        {"name": f"step_{n}", "filename": f"/site-packages/lib/m{n}.py", "line": 1000 + n}
        for n in range(300)
    ]
    document["entries"] = [
        {**entry, "collective_seq_id": seq, "frames": [dict(f) for f in places[seq % 200 :][:64]]}
        for seq in range(2000)
    ]
    assert flight_pickle.load(pickle.dumps(document, protocol=2)) == document
