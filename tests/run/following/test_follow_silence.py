"""A host whose follower never gets going: over genuine SSH (an in-process server), a channel
that ends before the agent said a word is as good as none, and the host goes silent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import selectors
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.layout import HostFiles
from ddptui.remote.stream import LineStream
from ddptui.run.backends import kind_of
from ddptui.run.following import files as follow
from ddptui.run.following.files import MAX_DOCUMENT_BYTES, HostFollower
from ddptui.run.following.updates import SILENCE_S, HostSilent, Update
from ddptui.run.record import NodeRecord, RunRecord
from tests.remote.hosts import local_host
from tests.testbed import LocalSshServer


def test_a_channel_that_ends_before_it_says_anything_leaves_the_host_silent(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    # A Python that exits at once, as an srun step does on a node whose slurmd is gone.
    host = local_host(local_ssh_server, python="false")
    config = Config(tmp_path / "hosts.toml", ClusterConfig(), (host,), JobConfig())

    follower = HostFollower(
        config,
        host,
        str(tmp_path),
        HostFiles(range(1), 1),
        silence_s=1.0,
        open_transport=kind_of(config).transport,
    )
    update = asyncio.run(_first_update(follower))
    assert isinstance(update, HostSilent), update
    assert update.reason == "the node agent ended before it answered"


DOCUMENTED_SECONDS = 12.0
"""How long a host may send nothing, not even a heartbeat, before it is lost: the docs' "a host
that stops answering for 12 s fails the run"."""
DOCUMENTED_SILENCE = (
    (Path("docs/running.md"), r"A host that stops answering for (\d+) s fails the run"),
    (Path("docs/troubleshooting.md"), r"the host did not answer for (\d+) s"),
    (Path("docs/architecture.md"), r"A node that stops answering for (\d+) s is"),
)
"""Where the user is told how long a host may say nothing before it is lost."""


def test_the_silence_window_is_the_one_the_documentation_promises() -> None:
    root = Path(__file__).resolve().parents[3]
    for document, promise in DOCUMENTED_SILENCE:
        found = re.search(promise, " ".join((root / document).read_text().split()))
        assert found is not None, f"{document} no longer says {promise!r}"
        assert float(found.group(1)) == SILENCE_S == DOCUMENTED_SECONDS, found.group(0)


class _Asyncio:
    """asyncio as the follower sees it, its sleeps moving a fake clock instead of waiting."""

    def __init__(self, now: list[float]) -> None:
        self._now = now

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        self._now[0] += seconds
        await asyncio.sleep(0)


def test_the_follower_the_product_makes_says_a_host_is_silent_after_the_documented_window(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Made as the run's backend makes it (no silence_s), so a changed default shows here, not
    # only on a bed: the fake backends of the supervisor's tests say HostSilent themselves.
    now = [0.0]
    monkeypatch.setattr(follow, "asyncio", _Asyncio(now))
    host = HostConfig(name="lost", address="192.0.2.1")
    node = NodeRecord(host.name, host.address, 0, 1, "/runs/r1/node0", [], {})
    config = Config(tmp_path / "hosts.toml", ClusterConfig(), (host,), JobConfig())
    record = RunRecord("r1", 0.0, "", "script", "gloo", "", 1, [], [node])
    follower = HostFollower.of_node(
        config, record, node, clock=lambda: now[0], open_transport=kind_of(config).transport
    )
    tries: list[float] = []

    async def unreachable() -> LineStream:
        tries.append(now[0])
        raise OSError("No route to host")

    monkeypatch.setattr(follower, "_open", unreachable)

    update = asyncio.run(_first_update(follower))
    assert isinstance(update, HostSilent), update
    assert (update.host, update.reason) == ("lost", "No route to host")
    # Not a try sooner: every try until the window is up finds the host merely unreachable.
    assert update.seconds == DOCUMENTED_SECONDS
    assert tries == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]


class _VirtualTime(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when every task waits, straight to the next timer:
    a wait of 12 s is over at once, and at 12.0 s to the float. Nothing run on it may wait on
    a thread or a real socket (they would see the time jump)."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_Jumping(self))

    def time(self) -> float:
        return self.now


class _Jumping(selectors.DefaultSelector):
    """A selector that does not sleep: where the loop would wait, its clock jumps instead."""

    def __init__(self, loop: _VirtualTime) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        ready: list[Any] = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise AssertionError("every task waits for something that never comes")
        self._loop.now += timeout
        return []


class _Says:
    """A channel's stdout that sends each of ``said``'s lines at its time on the loop's clock,
    then nothing, and stays open: a cut link (no end, no error, only quiet)."""

    def __init__(self, loop: _VirtualTime, said: Sequence[tuple[float, bytes]]) -> None:
        self._loop = loop
        self._said = list(said)

    async def read(self, n: int = -1, /) -> bytes:
        if not self._said:
            await asyncio.Event().wait()
        at, line = self._said.pop(0)
        await asyncio.sleep(at - self._loop.time())
        return line


def test_a_connection_that_goes_quiet_is_silent_after_the_documented_window_not_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What a cut link looks like (the bed's test cuts one): the open channel says nothing more.
    # The follower is made as the run's backend makes it (no silence_s), on a loop whose clock
    # the follower reads too, so the window it keeps is SILENCE_S's to the second.
    loop = _VirtualTime()
    host = HostConfig(name="quiet", address="192.0.2.1")
    node = NodeRecord(host.name, host.address, 0, 1, "/runs/r1/node0", [], {})
    config = Config(tmp_path / "hosts.toml", ClusterConfig(), (host,), JobConfig())
    record = RunRecord("r1", 0.0, "", "script", "gloo", "", 1, [], [node])
    follower = HostFollower.of_node(
        config, record, node, clock=loop.time, open_transport=kind_of(config).transport
    )
    beat = json.dumps({"k": "hb", "time": 0.0, "groups": {}}).encode() + b"\n"
    # A second heartbeat a second inside the window: quiet as long as that is not silence.
    last = DOCUMENTED_SECONDS - 1.0
    opened: list[float] = []

    async def open_channel() -> LineStream:
        opened.append(loop.time())
        return LineStream(host, _Says(loop, [(0.0, beat), (last, beat)]), MAX_DOCUMENT_BYTES)

    monkeypatch.setattr(follower, "_open", open_channel)
    heard: list[tuple[float, Update]] = []

    async def listen() -> None:
        updates = follower.updates()
        try:
            async for update in updates:
                heard.append((loop.time(), update))
                if isinstance(update, HostSilent):
                    return
        finally:
            await updates.aclose()

    async def follow_a_while() -> None:
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(listen(), 10 * DOCUMENTED_SECONDS)
        finally:
            await follower.close()

    try:
        loop.run_until_complete(follow_a_while())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
    assert opened == [0.0]
    assert [(at, type(update).__name__) for at, update in heard] == [
        (0.0, "Heartbeat"),
        (last, "Heartbeat"),
        (last + DOCUMENTED_SECONDS, "HostSilent"),
    ]
    assert heard[-1][1] == HostSilent("quiet", DOCUMENTED_SECONDS, "the open connection went quiet")


async def _first_update(follower: HostFollower) -> Update:
    try:
        return await asyncio.wait_for(anext(aiter(follower.updates())), 20)
    finally:
        await follower.close()
