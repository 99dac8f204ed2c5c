"""The pickles torch's flight recorder writes, read without :mod:`pickle`.

A dump comes from a host. :class:`pickle.Unpickler` with every class refused still builds
whatever the opcodes say: 16 MiB of ``]`` is 16 million lists (1.3 GB and 6 s here), 32 MiB of
``MEMOIZE`` is 32 million memo entries (2.2 GB and 19 s), and shared references (``BINGET``)
make a 500-byte document that any walk over it (``str()``, ``json.dumps``) expands without end.
This reader knows only the opcodes of plain containers that torch's pickler writes (and
Python's for the same data), counts everything it keeps against two budgets before it keeps it
(:data:`MAX_ITEMS` and :data:`MAX_BYTES`), and takes only strings and numbers as dictionary
keys, so hashing a key never walks a structure. Anything else is refused, said as
:class:`PickleRefused`.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

MAX_ITEMS = 2_000_000
"""What one dump may make or keep, each counting one: a value pushed (a reference to an earlier
one too), a memo entry, a mark, a ``PROTO`` or ``FRAME`` header. Every other opcode takes from
the stack or the marks, so this bounds the time a dump takes too (4 s at most here). torch's
recorder of 2,000 collectives with stacks of 64 frames counts 1.1 million."""
MAX_BYTES = 128 * 2**20
"""What a dump's values may take in memory, reckoned before each is made at the most CPython
allocates for it (the costs below), so that reading a dump grows the process by about this at
most, whatever its opcodes (119 MiB in ``tests/run/evidence/test_flight_pickle_budget.py``).
Reckoned so, torch's recorder of 2,000 collectives with stacks of 64 frames is 70 MiB, about
twice what it takes, and with 100 frames 105 MiB."""
MAX_INT_BYTES = 8

_SLOT = 24
"""A reference: its pointer on the stack, then in its container, and in the copy of the stack
that ``APPENDS``, ``SETITEMS`` or a tuple makes on the way."""
_OBJECT = 64
"""A new number, empty container or short tuple: an empty dict and a 3-tuple, the largest,
take 64 bytes."""
_TABLE = 176
"""A dict's first table, for its first :data:`_TABLE_PAIRS` pairs: 160 to 168 bytes as CPython
goes."""
_TABLE_PAIRS = 5
_ENTRY = 64
"""Each pair beyond those: its share of the larger tables, which double as the dict grows, the
old one alive while the new one is filled (up to 90 bytes a pair at that moment, which the
pair's two references pay the rest of)."""
_MEMO = 128
"""A memo entry: its key (an int object) and its share of the memo's table, which grows as a
large dict does."""
_MARK = 48
"""A mark: its pointer and the int object that says where it is."""
_WIDEST = 5
"""Bytes of memory a string may take per byte of UTF-8 until it is decoded: one character
outside the Basic Multilingual Plane makes every character 4 bytes, and the decoder copies what
it decoded so far into the wider string."""


class PickleRefused(ValueError):
    """Why the bytes are not a plain-container pickle this reader takes."""


_KEYS = (str, int, float, bool, type(None))


class _Reader:
    def __init__(self, data: bytes, budget: int) -> None:
        self.data = data
        self.view = memoryview(data)
        self.at = 0
        self.budget = budget
        self.items = budget
        self.room = MAX_BYTES
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}

    def spend(self, items: int, size: int) -> None:
        """Called before anything of variable size is made: a dump goes over budget by one
        small object at most."""
        self.items -= items
        self.room -= size
        if self.items < 0:
            raise PickleRefused(f"more than {self.budget:,} values")
        if self.room < 0:
            raise PickleRefused(f"more than {MAX_BYTES // 2**20} MiB of values")

    def take(self, size: int) -> memoryview:
        end = self.at + size
        if size < 0 or end > len(self.data):
            raise PickleRefused("cut short")
        chunk = self.view[self.at : end]
        self.at = end
        return chunk

    def number(self, size: int, signed: bool = False) -> int:
        return int.from_bytes(self.take(size), "little", signed=signed)

    def byte(self) -> int:
        """``number(1)`` without a slice: most opcodes' argument is one byte."""
        at = self.at
        if at >= len(self.data):
            raise PickleRefused("cut short")
        self.at = at + 1
        return self.data[at]

    def push(self, value: Any, size: int = _OBJECT) -> None:
        self.spend(1, _SLOT + size)
        self.stack.append(value)

    def refer(self, value: Any) -> None:
        """Push a value that exists already: a cached small int, None, a memo entry."""
        self.push(value, 0)

    def mark(self) -> None:
        self.spend(1, _MARK)
        self.marks.append(len(self.stack))

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise PickleRefused("no mark")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def top(self, kind: type) -> Any:
        if not self.stack or not isinstance(self.stack[-1], kind):
            raise PickleRefused(f"no {kind.__name__} to add to")
        return self.stack[-1]

    def pop(self) -> Any:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise PickleRefused("nothing to take")
        return self.stack.pop()

    def text(self, size: int) -> None:
        chunk = self.take(size)
        worst = _WIDEST * size
        self.spend(1, _SLOT + _OBJECT + worst)
        try:
            value = str(chunk, "utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise PickleRefused("a string that is not UTF-8") from None
        # Kept: what it takes now it is made; what the decoder copied is free for what follows.
        self.room += worst - sys.getsizeof(value)
        self.stack.append(value)

    def set_items(self, pairs: list[Any]) -> None:
        if len(pairs) % 2:
            raise PickleRefused("a key without a value")
        target = self.top(dict)
        had = len(target)
        beyond = had + len(pairs) // 2 - max(had, _TABLE_PAIRS)
        self.spend(0, (0 if had else _TABLE) + _ENTRY * max(beyond, 0))
        each = iter(pairs)
        for key, value in zip(each, each, strict=True):
            if not isinstance(key, _KEYS):
                raise PickleRefused(f"a {type(key).__name__} as a key")
            target[key] = value

    def put(self, index: int) -> None:
        if not self.stack:
            raise PickleRefused("nothing to remember")
        self.spend(1, _MEMO)
        self.memo[index] = self.stack[-1]

    def get(self, index: int) -> None:
        if index not in self.memo:
            raise PickleRefused("a reference to nothing")
        self.refer(self.memo[index])

    def read(self) -> Any:
        data, end, steps = self.data, len(self.data), _STEPS.get
        while self.at < end:
            code = data[self.at]
            self.at += 1
            step = steps(code)
            if step is None:
                if code == 0x2E:  # STOP
                    if len(self.stack) != 1 or self.marks:
                        raise PickleRefused("ends with more or less than one value")
                    return self.stack[0]
                raise PickleRefused(f"opcode {bytes([code])!r}, which a dump does not hold")
            step(self)
        raise PickleRefused("cut short")


def _tuple(size: int) -> Any:
    def step(reader: _Reader) -> None:
        if len(reader.stack) - (reader.marks[-1] if reader.marks else 0) < size:
            raise PickleRefused("a tuple of missing values")
        reader.spend(1, _SLOT + _OBJECT)
        items = reader.stack[len(reader.stack) - size :]
        del reader.stack[len(reader.stack) - size :]
        reader.stack.append(tuple(items))

    return step


def _tuple_to_mark(reader: _Reader) -> None:
    items = reader.pop_mark()
    # Its items' pointers were paid for as they were pushed.
    reader.spend(1, _SLOT + _OBJECT)
    reader.stack.append(tuple(items))


def _long1(reader: _Reader) -> None:
    size = reader.byte()
    if size > MAX_INT_BYTES:
        raise PickleRefused(f"an integer of {size} bytes")
    reader.push(reader.number(size, signed=True))


def _appends(reader: _Reader) -> None:
    items = reader.pop_mark()
    reader.top(list).extend(items)


def _append(reader: _Reader) -> None:
    item = reader.pop()
    reader.top(list).append(item)


def _setitem(reader: _Reader) -> None:
    value = reader.pop()
    key = reader.pop()
    reader.set_items([key, value])


def _proto(reader: _Reader) -> None:
    reader.spend(1, 0)
    reader.byte()


def _frame(reader: _Reader) -> None:
    reader.spend(1, 0)
    reader.number(8)


_STEPS: dict[int, Any] = {
    0x80: _proto,
    0x95: _frame,
    ord("("): _Reader.mark,
    ord("}"): lambda r: r.push({}),
    ord("]"): lambda r: r.push([]),
    ord(")"): lambda r: r.refer(()),
    ord("t"): _tuple_to_mark,
    0x85: _tuple(1),
    0x86: _tuple(2),
    0x87: _tuple(3),
    ord("s"): _setitem,
    ord("u"): lambda r: r.set_items(r.pop_mark()),
    ord("a"): _append,
    ord("e"): _appends,
    ord("X"): lambda r: r.text(r.number(4)),
    0x8C: lambda r: r.text(r.byte()),
    0x8D: lambda r: r.text(r.number(8)),
    ord("J"): lambda r: r.push(r.number(4, signed=True)),
    ord("K"): lambda r: r.refer(r.byte()),
    ord("M"): lambda r: r.push(r.number(2)),
    0x8A: _long1,
    ord("N"): lambda r: r.refer(None),
    0x88: lambda r: r.refer(True),
    0x89: lambda r: r.refer(False),
    ord("G"): lambda r: r.push(struct.unpack(">d", r.take(8))[0]),
    ord("q"): lambda r: r.put(r.byte()),
    ord("r"): lambda r: r.put(r.number(4)),
    0x94: lambda r: r.put(len(r.memo)),
    ord("h"): lambda r: r.get(r.byte()),
    ord("j"): lambda r: r.get(r.number(4)),
    ord("0"): lambda r: r.pop(),
}


def load(data: bytes, budget: int = MAX_ITEMS) -> Any:
    """The value ``data`` pickles: dicts, lists, tuples, strings, numbers, booleans and None
    only, within ``budget`` values (see :data:`MAX_ITEMS`) and :data:`MAX_BYTES`. Raises
    :class:`PickleRefused`."""
    return _Reader(data, budget).read()
