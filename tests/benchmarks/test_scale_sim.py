"""The simulated hosts of ``benchmarks/scale.py`` speak as node agents do: ddptui's own follower
reads their lines and heartbeats with nothing garbled or refused, the run's model takes their
events, and ``dump`` reads their stacks, grouped (fast tier: in-process, a Unix socket)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from benchmarks.sim_backend import SimFollower, SimTransport, sim_run
from benchmarks.sim_hosts import Simulation
from ddptui.config import Config, load_config
from ddptui.run.evidence import dump
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Steps
from ddptui.run.following.updates import FileLine, Heartbeat
from ddptui.run.record import RunRecord

NODES, PER_NODE = 2, 4


def _record(tmp_path: Path) -> tuple[Config, RunRecord]:
    record, hosts = sim_run("20261204-000000-test", NODES, PER_NODE, running=True)
    (tmp_path / "hosts.toml").write_text(hosts)
    return load_config(tmp_path / "hosts.toml"), record


def test_the_simulated_hosts_are_followed_judged_and_dumped_as_agents_are(tmp_path: Path) -> None:
    asyncio.run(_followed_and_dumped(tmp_path))


async def _followed_and_dumped(tmp_path: Path) -> None:
    config, record = _record(tmp_path)
    socket = str(tmp_path / "hosts.sock")
    simulation = Simulation(NODES, PER_NODE, rate=20.0)
    server = await asyncio.start_unix_server(simulation.connected, path=socket)
    ticking = asyncio.create_task(simulation.run())
    SimFollower.socket = SimTransport.socket = socket
    followers = [SimFollower.of_node(config, record, node) for node in record.nodes]
    model = RunModel(record, steps=Steps.EVERY)
    beats = 0

    async def follow(follower: SimFollower) -> None:
        nonlocal beats
        async for update in follower.updates():
            model.apply(update)
            beats += isinstance(update, Heartbeat)
            assert isinstance(update, (FileLine, Heartbeat)), update

    tasks = [asyncio.create_task(follow(follower)) for follower in followers]
    try:
        # A heartbeat every 2 s (a host's first in the first round after it is followed),
        # and a second of steps on every rank: waited for, however busy the machine is.
        def followed() -> bool:
            ranks = model.progress.ranks
            stepped = all(rank.step is not None and rank.step >= 20 for rank in ranks)
            return beats >= NODES and len(ranks) == NODES * PER_NODE and stepped

        deadline = time.monotonic() + 30
        while not followed():
            assert time.monotonic() < deadline, (beats, model.progress.ranks)
            await asyncio.sleep(0.1)
        assert all(follower.garbled == follower.unknown == 0 for follower in followers)
        assert model.refused == 0
        assert [rank.rank for rank in model.progress.ranks] == list(range(NODES * PER_NODE))
        assert model.bands.points(), "no band across the ranks"
        assert model.nodes["sim0001"].sample["ranks"][4]["state"] == "R"

        healthy = await dump.take(config, record, SimTransport())
        assert len(healthy.stacks) == NODES * PER_NODE and len(healthy.groups) == 1
        simulation.command(["freeze"])
        frozen = await dump.take(config, record, SimTransport())
        assert [len(group.ranks) for group in frozen.groups] == [1, NODES * PER_NODE - 1]
    finally:
        for follower in followers:
            await follower.close()
        for task in tasks:
            task.cancel()
        ticking.cancel()
        # The hosts' side of each closed channel ends once it reads the close.
        await asyncio.sleep(0.2)
        server.close()
