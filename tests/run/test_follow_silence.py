"""A host whose follower never gets going: over genuine SSH (an in-process server), a channel
that ends before the agent said a word is as good as none, and the host goes silent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ddptui.config.model import ClusterConfig, Config, JobConfig
from ddptui.run.follow import HostFollower, HostSilent, Update
from ddptui.run.layout import HostFiles
from tests.remote.hosts import local_host
from tests.testbed import LocalSshServer


def test_a_channel_that_ends_before_it_says_anything_leaves_the_host_silent(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    # A Python that exits at once, as an srun step does on a node whose slurmd is gone.
    host = local_host(local_ssh_server, python="false")
    config = Config(tmp_path / "hosts.toml", ClusterConfig(), (host,), JobConfig())

    async def first_update() -> Update:
        follower = HostFollower(config, host, str(tmp_path), HostFiles(range(1), 1), silence_s=1.0)
        try:
            return await asyncio.wait_for(anext(aiter(follower.updates())), 20)
        finally:
            await follower.close()

    update = asyncio.run(first_update())
    assert isinstance(update, HostSilent), update
    assert update.reason == "the node agent ended before it answered"
