"""ddptui.aio.wait_for: asyncio.wait_for's contract, and a cancellation is never lost — on
Python 3.11 and later (asyncio.timeout) and on 3.10 (a task of its own), both checked here."""

from __future__ import annotations

import ast
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from ddptui.aio import BURST_ITEMS, QueueReader, wait_for, wait_in_task

ROOT = Path(__file__).resolve().parents[1]

Waiter = Callable[[Awaitable[str], float], Awaitable[str]]

OURS = pytest.mark.parametrize("wait", [wait_for, wait_in_task], ids=["wait_for", "in_task"])


async def _cancelled_as_it_completes(wait: Waiter) -> str:
    """Cancel a task waiting through ``wait`` in the very loop step its awaited item arrives —
    Ctrl-C while a follow loop reads a busy queue. What the task ends with."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    waiting = asyncio.create_task(wait(queue.get(), 10))
    for _ in range(3):
        await asyncio.sleep(0)
    queue.put_nowait("an update")
    waiting.cancel()
    try:
        return await waiting
    except asyncio.CancelledError:
        return "cancelled"


@OURS
def test_a_cancellation_that_meets_a_result_still_cancels(wait: Waiter) -> None:
    assert asyncio.run(_cancelled_as_it_completes(wait)) == "cancelled"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="fixed in Python 3.12's asyncio")
def test_the_race_is_real_for_asyncio_wait_for_before_python_3_12() -> None:
    # What the test above guards against: the standard wait_for returns the item instead.
    assert asyncio.run(_cancelled_as_it_completes(asyncio.wait_for)) == "an update"


@OURS
def test_a_result_or_an_error_passes_through(wait: Waiter) -> None:
    async def value() -> str:
        await asyncio.sleep(0)
        return "done"

    async def failing() -> str:
        await asyncio.sleep(0)
        raise ValueError("bad")

    assert asyncio.run(wait(value(), 1)) == "done"
    with pytest.raises(ValueError, match="bad"):
        asyncio.run(wait(failing(), 1))


@OURS
def test_a_timeout_raises_after_the_awaited_work_finished_cancelling(wait: Waiter) -> None:
    cleaned_up: list[str] = []

    async def slow() -> str:
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.01)
            cleaned_up.append("slow")
        return "never"

    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await wait(slow(), 0.05)
        assert cleaned_up == ["slow"]

    asyncio.run(main())


@OURS
def test_work_that_completes_despite_its_timeout_keeps_its_result(wait: Waiter) -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "finished anyway"
        return "never"

    assert asyncio.run(wait(stubborn(), 0.05)) == "finished anyway"


@OURS
def test_a_zero_timeout_on_pending_work_times_out(wait: Waiter) -> None:
    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await wait(asyncio.sleep(1), 0)

    asyncio.run(main())


def test_a_queue_reader_hands_out_ready_items_in_order_and_times_out_when_none_come() -> None:
    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for item in range(5):
            queue.put_nowait(item)
        reader = QueueReader(queue)
        assert [await reader.get(1) for _ in range(5)] == [0, 1, 2, 3, 4]
        with pytest.raises(asyncio.TimeoutError):
            await reader.get(0.05)
        later = asyncio.get_running_loop().call_later(0.05, queue.put_nowait, 5)
        assert await reader.get(5) == 5
        later.cancel()

    asyncio.run(main())


def test_a_queue_reader_lets_other_tasks_run_between_bursts_of_ready_items() -> None:
    async def main() -> int:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for item in range(BURST_ITEMS * 4):
            queue.put_nowait(item)
        turns = 0

        async def other() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        other_task = asyncio.create_task(other())
        await asyncio.sleep(0)
        started = turns
        reader = QueueReader(queue)
        for _ in range(BURST_ITEMS * 4):
            await reader.get(1)
        other_task.cancel()
        return turns - started

    # Taking a ready item never suspends: without the turns, the other task would not run.
    assert asyncio.run(main()) >= 3


def test_ddptui_never_calls_asyncio_wait_for_itself() -> None:
    callers = []
    for path in sorted((ROOT / "ddptui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                callers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert callers == []
