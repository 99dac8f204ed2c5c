"""The health screen's own keys on the demo's real SSH hosts: ``t`` shows each unknown host key's
fingerprint and adds the keys after a yes, ``c`` reads the hosts file again and checks every
host with its progress."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import asyncssh
import tomli_w

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from ddptui.config import load_config
from ddptui.demo.cluster import demo_cluster
from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.health import HealthScreen
from tests.ui.pilot import until


def test_t_trusts_unknown_keys_after_showing_fingerprints_and_c_checks_again(
    tmp_path: Path,
) -> None:
    with demo_cluster(2, 1) as cluster:
        known_hosts = load_config(cluster.hosts_file).hosts[0].known_hosts
        assert known_hosts is not None
        known_hosts.write_text("")
        fingerprints = [
            asyncssh.import_public_key(host.host_key).get_fingerprint() for host in cluster.hosts
        ]
        app = DdptuiApp(cluster.hosts_file, store=RunStore(tmp_path / "runs"))
        asyncio.run(_drive(app, cluster.hosts_file, known_hosts, fingerprints))
        added = known_hosts.read_text().splitlines()
    assert sorted(added) == sorted(host.known_hosts_line() for host in cluster.hosts)


async def _drive(
    app: DdptuiApp, hosts_file: Path, known_hosts: Path, fingerprints: list[str]
) -> None:
    async with app.run_test(size=(160, 48)) as pilot:
        health = app.screen
        assert isinstance(health, HealthScreen)
        await until(pilot, "the first check", lambda: health.report is not None, 60)
        assert health.report is not None and not health.report.healthy
        unknown = {f.host for f in health.report.findings if f.code == "host_key_unknown"}
        assert unknown == {"demo-0", "demo-1"}

        # t: every host's key with its SHA256 fingerprint, and a question before any is added.
        await pilot.press("t")
        await until(pilot, "the keys", lambda: isinstance(app.screen, ConfirmScreen), 60)
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen)
        for fingerprint in fingerprints:
            assert fingerprint in confirm.body.plain, confirm.body.plain
        assert known_hosts.read_text() == ""
        first = health.report
        await pilot.press("y")
        # Trusting checks again by itself; the hosts are healthy with their keys known.
        await until(pilot, "the check after trusting", lambda: health.report is not first, 60)
        assert health.report is not None and health.report.healthy, health.report.findings

        # c: each host's row shows its progress, then a new report.
        second = health.report
        await pilot.press("c")
        assert set(health.progress) == {"demo-0", "demo-1"}
        await until(pilot, "the re-check", lambda: health.report is not second, 60)
        assert health.report is not None and health.report.healthy
        assert health.progress == {}

        # c after an edit: the file as it is now (demo-1 taken out) is what is checked.
        document = tomllib.loads(hosts_file.read_text())
        document["hosts"] = document["hosts"][:1]
        hosts_file.write_text(tomli_w.dumps(document))
        third = health.report
        await pilot.press("c")
        await until(pilot, "the check of the edited file", lambda: health.report is not third, 60)
        assert [check.host.name for check in health.report.checks] == ["demo-0"]
        # A file broken meanwhile is said, and the last one read is checked.
        hosts_file.write_text("[[hosts]]\nname = 1\n")
        fourth = health.report
        await pilot.press("c")
        said = [notice.message for notice in app._notifications]
        assert any(message.startswith(f"{hosts_file}: ") for message in said), said
        await until(pilot, "the check despite the error", lambda: health.report is not fourth, 60)
        assert [check.host.name for check in health.report.checks] == ["demo-0"]
