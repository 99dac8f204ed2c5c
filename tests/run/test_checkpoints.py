"""Checkpoints a user's script writes where it runs, carried to every node on resume."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, Config, JobConfig
from ddptui.layout import code_dir, host_run_dir
from ddptui.remote.connection import RemoteCluster
from ddptui.run.backends.ssh.launcher import LaunchError, carry_checkpoints
from ddptui.run.checkpoints import (
    APART_FROM_NODE_0,
    RECEIVE,
    SEND,
    Copy,
    CopyPlan,
    Held,
    Refused,
    only_on_node_0,
    plan_copies,
    unmatched,
)
from ddptui.run.record import NodeRecord, RunRecord
from tests.remote.hosts import local_host
from tests.testbed import LocalSshServer

OLD, NEW = Held(10, 100.0), Held(12, 200.0)
NOW = 1_000.0


def _copies(listings: dict[int, dict[str, Held]]) -> CopyPlan:
    return plan_copies(listings, staged={"t.py"}, latest=NOW)


def test_node_0_s_copy_goes_to_every_node_whatever_mtime_another_claims() -> None:
    # Node 2 says its copy is newer: a host's word, and its file would be loaded everywhere.
    listings = {0: {"snapshot.pt": OLD}, 1: {}, 2: {"snapshot.pt": NEW}, 3: {"snapshot.pt": NEW}}
    assert _copies(listings) == CopyPlan([Copy("snapshot.pt", 0, (1, 2, 3), OLD)], [])
    same = {0: {"a.pt": NEW}, 1: {"a.pt": Held(99, 200.0)}, 2: {"a.pt": NEW}}
    assert _copies(same).copies == [Copy("a.pt", 0, (1,), NEW)]
    # Where node 0 has none, the lowest node rank that holds one, beside what node 0 holds.
    beside = {0: {"c/a.pt": NEW}, 1: {}, 2: {"c/b.pt": OLD}, 3: {"c/b.pt": NEW}}
    assert _copies(beside).copies == [
        Copy("c/a.pt", 0, (1, 2, 3), NEW),
        Copy("c/b.pt", 2, (0, 1, 3), OLD),
    ]
    assert _copies({0: {}, 1: {}, 2: {"c/b.pt": OLD}}) == CopyPlan(
        [], [Refused("c/b.pt", 2, (0, 1), APART_FROM_NODE_0)]
    )
    # Hosts that share the directory list the same file: nothing to copy.
    assert _copies({0: {"a.pt": NEW}, 1: {"a.pt": NEW}}) == CopyPlan([], [])


def test_files_only_node_0_holds_and_globs_that_match_nothing_are_named() -> None:
    assert only_on_node_0({0: {"snapshot.pt": NEW, "b.pt": OLD}, 1: {"b.pt": OLD}}) == [
        "snapshot.pt"
    ]
    matched = {0: {"*.pt": {"a.pt": NEW}, "ckpt/*": {}}, 1: {"*.pt": {}, "ckpt/*": {}}}
    assert unmatched(["*.pt", "ckpt/*"], matched) == ["ckpt/*"]


def _cluster(
    server: LocalSshServer, checkpoint_files: tuple[str, ...] = ()
) -> tuple[Config, RunRecord]:
    # The job's directory here: what a launch staged, whose files no copy replaces.
    script = server.home / "project" / "t.py"
    script.parent.mkdir()
    script.write_text("print('training')\n")
    job = JobConfig(script=script, checkpoint_files=checkpoint_files)
    hosts = tuple(local_host(server, name=name) for name in ("a", "b", "c"))
    config = Config(server.home / "hosts.toml", ClusterConfig(), hosts, job)
    nodes = [
        NodeRecord(host.name, host.address, rank, 1, run_dir, [], {})
        for rank, host in enumerate(hosts)
        # A workdir of each host's own, although one server plays all three.
        for run_dir in [host_run_dir(str(server.home / host.name), "r1", rank)]
    ]
    return config, RunRecord("r1", 0.0, "", "script", "gloo", "", 3, [], nodes)


def _carry(config: Config, record: RunRecord) -> list[str]:
    """What carrying the run's checkpoints over said."""
    said: list[str] = []

    async def carry() -> None:
        async with RemoteCluster.for_config(config) as remote:
            await carry_checkpoints(remote, config, record, say=said.append)

    asyncio.run(carry())
    return said


def _write(record: RunRecord, rank: int, name: str, data: bytes, mtime: float) -> Path:
    path = Path(code_dir(record.nodes[rank].run_dir), name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))
    return path


def test_resume_copies_node_0_s_snapshot_checksummed_and_says_so(
    local_ssh_server: LocalSshServer,
) -> None:
    config, record = _cluster(local_ssh_server, ("snapshot.pt", "ckpt/*.pt"))
    snapshot = os.urandom(3 << 20)
    _write(record, 0, "snapshot.pt", snapshot, 1_700_000_000.25)
    _write(record, 1, "snapshot.pt", b"older", 1_600_000_000.0)
    _write(record, 0, "ckpt/model.pt", b"model", 1_700_000_100.0)
    # What a rank writes on its own host beside node 0's checkpoint (the Trainer's RNG state).
    _write(record, 2, "ckpt/rng_2.pt", b"rng 2", 1_700_000_099.0)
    assert _carry(config, record) == [
        "copied ckpt/model.pt (5 bytes) from a to b, c",
        "copied ckpt/rng_2.pt (5 bytes) from c to a, b",
        "copied snapshot.pt (3.0 MiB) from a to b, c",
    ]
    for node in record.nodes:
        code = Path(code_dir(node.run_dir))
        assert (code / "snapshot.pt").read_bytes() == snapshot
        assert (code / "snapshot.pt").stat().st_mtime == pytest.approx(1_700_000_000.25)
        assert (code / "ckpt" / "rng_2.pt").read_bytes() == b"rng 2"
        assert not list(code.rglob("*.part"))
    assert _carry(config, record) == []


def test_without_the_key_a_snapshot_on_node_0_alone_is_warned_of(
    local_ssh_server: LocalSshServer,
) -> None:
    config, record = _cluster(local_ssh_server)
    _write(record, 0, "snapshot.pt", b"s", 1_700_000_000.0)
    assert _carry(config, record) == [
        "warning: snapshot.pt exist(s) on node 0 only: the other ranks would start from scratch."
        ' Set [job] checkpoint_files = ["snapshot.pt"] to copy it on resume'
    ]
    assert not Path(code_dir(record.nodes[1].run_dir), "snapshot.pt").exists()


def test_a_glob_that_matches_nothing_anywhere_stops_the_resume(
    local_ssh_server: LocalSshServer,
) -> None:
    config, record = _cluster(local_ssh_server, ("snapshot.pt",))
    with pytest.raises(LaunchError, match=r"\[job\] checkpoint_files: 'snapshot.pt' matches no"):
        _carry(config, record)


def test_a_copy_is_made_with_its_own_modes_whatever_the_umask(tmp_path: Path) -> None:
    # Under umask 002 with a shared group, a group member could replace a checkpoint every
    # rank loads: the receiving script makes each level 0755 and the file 0644.
    source = tmp_path / "snapshot.pt"
    source.write_bytes(b"weights" * 1000)
    target = tmp_path / "node1" / "ckpt" / "epoch" / "snapshot.pt"
    sent = subprocess.run(
        [sys.executable, "-c", SEND, str(source)], capture_output=True, check=True
    ).stdout
    received = subprocess.run(
        [sys.executable, "-c", RECEIVE, str(target), str(source.stat().st_size), "123.5"],
        input=sent,
        capture_output=True,
        check=True,
        preexec_fn=lambda: os.umask(0o002),
    )
    assert b'"copied"' in received.stdout
    assert target.read_bytes() == source.read_bytes() and target.stat().st_mtime == 123.5
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    for level in (tmp_path / "node1", target.parent.parent, target.parent):
        assert oct(level.stat().st_mode & 0o777) == oct(0o755), level
