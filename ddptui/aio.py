"""asyncio helpers every layer uses."""

from __future__ import annotations

import asyncio
import collections
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")

BURST_ITEMS = 64
"""Items a :class:`QueueReader` hands out back to back before the other tasks get a turn."""


async def wait_for(awaitable: Awaitable[_T], timeout: float | None) -> _T:
    """``asyncio.wait_for``, without losing a cancellation.

    Before Python 3.12, a cancellation that arrives just as the awaited thing completes is
    swallowed: ``asyncio.wait_for`` returns the result as if nothing happened (CPython
    gh-86296). A follow loop waits on a busy queue nearly all the time, so a Ctrl-C there was
    lost now and then and the run went on. Here the cancellation always wins, as in 3.12.

    Raises ``asyncio.TimeoutError`` after ``timeout`` seconds, once the awaited thing has
    finished cancelling; if it completed regardless, its outcome stands.
    """
    if sys.version_info >= (3, 11):
        # What 3.12's wait_for is: the awaitable runs in the caller's task, no task of its own.
        async with asyncio.timeout(timeout):
            return await awaitable
    return await wait_in_task(awaitable, timeout)


async def wait_in_task(awaitable: Awaitable[_T], timeout: float | None) -> _T:
    """:func:`wait_for` for Python 3.10, which has no ``asyncio.timeout``: the awaitable in a
    task of its own, watched with ``asyncio.wait`` (which never swallows a cancellation)."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            # Read so that asyncio does not report an exception nobody retrieved.
            task.exception()
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task})
        if task.cancelled():
            raise asyncio.TimeoutError
    return task.result()


class QueueReader(Generic[_T]):
    """Takes items off a queue for a loop that also needs to notice silence.

    An item already there is taken at once, with no timer to set and cancel (that was most of
    a busy follow loop's own cost); only an empty queue is waited on, for at most the timeout.
    Taking ready items never suspends, so every :data:`BURST_ITEMS` items the other tasks (the
    other hosts' followers, the console) get a turn.
    """

    def __init__(self, queue: asyncio.Queue[_T]) -> None:
        self._queue = queue
        self._taken = 0

    async def get(self, timeout: float) -> _T:
        """The next item; ``asyncio.TimeoutError`` when none came within ``timeout`` seconds."""
        self._taken += 1
        if self._taken % BURST_ITEMS == 0:
            await asyncio.sleep(0)
        if self._queue.empty():
            return await wait_for(self._queue.get(), timeout)
        return self._queue.get_nowait()


class SizedQueue(asyncio.Queue[_T]):
    """A queue full at ``max_items`` items or at ``max_bytes`` of their ``size``, whichever
    comes first (the item that crosses the bytes goes in whole): a producer then waits for
    room, so nothing is dropped and a flood of large items cannot grow it past its budget.
    Each item's size is taken once, as it goes in."""

    def __init__(self, max_items: int, max_bytes: int, size: Callable[[_T], int]) -> None:
        super().__init__(maxsize=max_items)
        self.max_bytes = max_bytes
        self.bytes = 0
        """Of the items held now."""
        self._size = size
        self._sizes: collections.deque[int] = collections.deque()

    def full(self) -> bool:
        return super().full() or self.bytes >= self.max_bytes

    def _put(self, item: _T) -> None:
        super()._put(item)
        size = self._size(item)
        self._sizes.append(size)
        self.bytes += size

    def _get(self) -> _T:
        item: _T = super()._get()
        self.bytes -= self._sizes.popleft()
        return item


async def one_by_one(batches: AsyncGenerator[list[_T], None]) -> AsyncGenerator[_T, None]:
    """The items of ``batches``, one at a time; ``batches`` is closed by whoever leaves, here,
    not left to the event loop (whose close of it runs as a task of its own, and can be cut
    short)."""
    try:
        async for batch in batches:
            for item in batch:
                yield item
    finally:
        await batches.aclose()
