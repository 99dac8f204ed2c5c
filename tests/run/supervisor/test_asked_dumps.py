"""A dump a viewer asks for (``ddptui dump``, the console's ``d``): taken beside the jobs, not
queued behind them (a dump is most wanted while a start, a stop or a hang's own dump holds),
shared by the viewers who ask while it is taken, kept in the run's store and named in the
answer. The real supervisor on in-memory hosts (fast tier)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ddptui.run.evidence import kept as kept_dump
from ddptui.run.protocol import Hello, Reply
from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.run.supervisor.jobs import DumpHang, Launch
from tests.run.supervisor.fake_backend import Bed, Viewer, config, new_record


def test_a_dump_asked_while_a_job_holds_is_taken_once_for_everyone_who_asked(
    tmp_path: Path,
) -> None:
    asyncio.run(asyncio.wait_for(_asked_beside_a_job(tmp_path), 60.0))


async def _asked_beside_a_job(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    record = new_record(store, attempts=0, state=RunState.STAGING)
    bed = Bed(store.root, record, config(hang_timeout_s=2.0))
    bed.serve(Launch())
    viewer, other = await Viewer.attach(bed.supervisor), await Viewer.attach(bed.supervisor)
    hello = await viewer.until(lambda item: isinstance(item, Hello))
    assert isinstance(hello, Hello) and "dump" in hello.ops
    await bed.until_state(RunState.RUNNING)
    # The hang's own dump, a job, is held; so is the asked one, until both viewers wait for it.
    bed.backend.stacks_gate.clear()
    bed.backend.asked_stacks_gate.clear()
    await bed.hang()
    asked = [viewer.send("dump"), other.send("dump")]
    await bed.until(lambda: len(bed.supervisor.dumps._answering) == 2)
    bed.backend.asked_stacks_gate.set()
    replies = [
        await each.until(lambda item, id=id: isinstance(item, Reply) and item.id == id)
        for each, id in zip((viewer, other), asked, strict=True)
    ]
    assert all(isinstance(reply, Reply) and reply.ok for reply in replies), replies
    kept = {reply.data["kept"] for reply in replies if isinstance(reply, Reply)}
    assert len(kept) == 1 and bed.backend.asked.count("stacks asked") == 1
    assert isinstance(bed.supervisor.current, DumpHang)
    loaded = kept_dump.load(bed.supervisor.files.dumps / kept.pop())
    assert loaded.run_id == record.id and loaded.saved_in is not None

    bed.backend.stacks_gate.set()
    stopped = await viewer.ask("stop")
    assert stopped.ok, stopped.message
    await bed.finish()
