"""The pickles torch's flight recorder writes, read without :mod:`pickle`.

A dump comes from a host. :class:`pickle.Unpickler` with every class refused still builds
whatever the opcodes say: 16 MiB of ``]`` is 16 million lists (1.3 GB and 6 s here), and
shared references (``BINGET``) make a 500-byte document that any walk over it (``str()``,
``json.dumps``) expands without end. This reader knows only the opcodes of plain containers
that torch's pickler writes (and Python's for the same data), counts every value it pushes
against a budget, and takes only strings and numbers as dictionary keys, so hashing a key
never walks a structure. Anything else is refused, said as :class:`PickleRefused`.
"""

from __future__ import annotations

import struct
from typing import Any

MAX_ITEMS = 2_000_000
"""Values pushed in one dump (a reference to an earlier one counts too): a recorder of 2,000
collectives with their stacks pushes a few hundred thousand."""
MAX_INT_BYTES = 8


class PickleRefused(ValueError):
    """Why the bytes are not a plain-container pickle this reader takes."""


_KEYS = (str, int, float, bool, type(None))


class _Reader:
    def __init__(self, data: bytes, budget: int) -> None:
        self.data = data
        self.at = 0
        self.left = budget
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}

    def take(self, size: int) -> bytes:
        end = self.at + size
        if size < 0 or end > len(self.data):
            raise PickleRefused("cut short")
        chunk = self.data[self.at : end]
        self.at = end
        return chunk

    def number(self, size: int, signed: bool = False) -> int:
        return int.from_bytes(self.take(size), "little", signed=signed)

    def push(self, value: Any) -> None:
        self.left -= 1
        if self.left < 0:
            raise PickleRefused(f"more than {MAX_ITEMS:,} values")
        self.stack.append(value)

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
        try:
            self.push(self.take(size).decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            raise PickleRefused("a string that is not UTF-8") from None

    def set_items(self, pairs: list[Any]) -> None:
        if len(pairs) % 2:
            raise PickleRefused("a key without a value")
        target = self.top(dict)
        for key, value in zip(pairs[::2], pairs[1::2], strict=True):
            if not isinstance(key, _KEYS):
                raise PickleRefused(f"a {type(key).__name__} as a key")
            target[key] = value

    def put(self, index: int) -> None:
        if not self.stack:
            raise PickleRefused("nothing to remember")
        self.left -= 1
        self.memo[index] = self.stack[-1]

    def get(self, index: int) -> None:
        if index not in self.memo:
            raise PickleRefused("a reference to nothing")
        self.push(self.memo[index])

    def read(self) -> Any:
        data = self.data
        while self.at < len(data):
            code = data[self.at]
            self.at += 1
            step = _STEPS.get(code)
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
        items = reader.stack[len(reader.stack) - size :]
        del reader.stack[len(reader.stack) - size :]
        reader.push(tuple(items))

    return step


def _long1(reader: _Reader) -> None:
    size = reader.number(1)
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
    reader.number(1)


def _frame(reader: _Reader) -> None:
    reader.number(8)


_STEPS: dict[int, Any] = {
    0x80: _proto,
    0x95: _frame,
    ord("("): lambda r: r.marks.append(len(r.stack)),
    ord("}"): lambda r: r.push({}),
    ord("]"): lambda r: r.push([]),
    ord(")"): lambda r: r.push(()),
    ord("t"): lambda r: r.push(tuple(r.pop_mark())),
    0x85: _tuple(1),
    0x86: _tuple(2),
    0x87: _tuple(3),
    ord("s"): _setitem,
    ord("u"): lambda r: r.set_items(r.pop_mark()),
    ord("a"): _append,
    ord("e"): _appends,
    ord("X"): lambda r: r.text(r.number(4)),
    0x8C: lambda r: r.text(r.number(1)),
    0x8D: lambda r: r.text(r.number(8)),
    ord("J"): lambda r: r.push(r.number(4, signed=True)),
    ord("K"): lambda r: r.push(r.number(1)),
    ord("M"): lambda r: r.push(r.number(2)),
    0x8A: _long1,
    ord("N"): lambda r: r.push(None),
    0x88: lambda r: r.push(True),
    0x89: lambda r: r.push(False),
    ord("G"): lambda r: r.push(struct.unpack(">d", r.take(8))[0]),
    ord("q"): lambda r: r.put(r.number(1)),
    ord("r"): lambda r: r.put(r.number(4)),
    0x94: lambda r: r.put(len(r.memo)),
    ord("h"): lambda r: r.get(r.number(1)),
    ord("j"): lambda r: r.get(r.number(4)),
    ord("0"): lambda r: r.pop(),
}


def load(data: bytes, budget: int = MAX_ITEMS) -> Any:
    """The value ``data`` pickles: dicts, lists, tuples, strings, numbers, booleans and None
    only, in at most ``budget`` values. Raises :class:`PickleRefused`."""
    return _Reader(data, budget).read()
