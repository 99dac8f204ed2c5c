"""asyncio helpers every layer uses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

_T = TypeVar("_T")


async def wait_for(awaitable: Awaitable[_T], timeout: float | None) -> _T:
    """``asyncio.wait_for``, without losing a cancellation.

    Before Python 3.12, a cancellation that arrives just as the awaited thing completes is
    swallowed: ``asyncio.wait_for`` returns the result as if nothing happened (CPython
    gh-86296). A follow loop waits on a busy queue nearly all the time, so a Ctrl-C there was
    lost now and then and the run went on. Here the cancellation always wins; the result it
    arrived with is dropped, as Python 3.12 does.

    Raises ``asyncio.TimeoutError`` after ``timeout`` seconds, once the awaited thing has
    finished cancelling; if it completed regardless, its outcome stands.
    """
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
