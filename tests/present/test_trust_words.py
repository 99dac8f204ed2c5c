"""``ddptui trust`` and the console's ``t`` say the same words for the same host keys.

The scans are values, as :func:`ddptui.remote.trust.scan_host_keys` returns them: no network.
The CLI side is :func:`ddptui.commands.trust.apply`; the console side is the body of the
question ``t`` asks, driven with Textual's pilot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import asyncssh
import pytest

from ddptui.check import CheckReport, PortTest
from ddptui.commands import trust
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import HostCheck
from ddptui.remote import trust as remote_trust
from ddptui.remote.hostkeys import HostKeyCheck, KeyState, KnownHosts, fingerprint
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.target import SshTarget
from ddptui.remote.trust import HostKeyScan
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.health import HealthScreen
from tests.ui.pilot import until

HOSTS = (
    HostConfig("gpu-a", "192.0.2.2"),
    HostConfig("gpu-b", "192.0.2.3"),
    HostConfig("gpu-c", "192.0.2.4"),
    HostConfig("gpu-d", "192.0.2.5"),
)


def _target(host: HostConfig, known_hosts: Path, alias: str | None = None) -> SshTarget:
    options = asyncssh.SSHClientConnectionOptions(
        host=host.address,
        port=host.port,
        host_key_alias=alias,
        config=[],
        client_keys=None,
        known_hosts=None,
    )
    return SshTarget(host, options, KnownHosts(known_hosts, ""), alias or host.address, host.port)


def _key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519").convert_to_public()


def _scans(known_hosts: Path) -> list[HostKeyScan]:
    """gpu-a: a new key filed under a HostKeyAlias; gpu-b: certified by a @cert-authority;
    gpu-c: already trusted; gpu-d: disconnected with a hostile reason."""
    a, b, c, d = HOSTS

    def checked(state: KeyState, *, by_authority: bool = False) -> HostKeyCheck:
        return HostKeyCheck(state, _key(), (), (known_hosts,), by_authority=by_authority)

    gone = Reachability(Reach.ERROR, "go away \x1b]0;owned\x07\nsecond line")
    return [
        HostKeyScan(a, checked(KeyState.UNKNOWN), None, _target(a, known_hosts, "gpu-a-key")),
        HostKeyScan(b, checked(KeyState.TRUSTED, by_authority=True), None, _target(b, known_hosts)),
        HostKeyScan(c, checked(KeyState.TRUSTED), None, _target(c, known_hosts)),
        HostKeyScan(d, None, gone, _target(d, known_hosts)),
    ]


def _cli(scans: Sequence[HostKeyScan], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert trust.apply(scans, confirm=lambda question: False) == 1
    return capsys.readouterr().out.splitlines()


def _console(scans: list[HostKeyScan], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    async def scan_host_keys(*args: object, **kwargs: object) -> list[HostKeyScan]:
        return scans

    monkeypatch.setattr(remote_trust, "scan_host_keys", scan_host_keys)
    config = Config(Path("hosts.toml"), ClusterConfig(), HOSTS, JobConfig())
    checks = tuple(HostCheck(host, Reachability(Reach.OK)) for host in HOSTS)
    report = CheckReport(config, checks, (), 1.0, PortTest(True))

    async def drive() -> list[str]:
        app = DdptuiApp(first_screen=HealthScreen(config, report))
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("t")
            await until(pilot, "the keys", lambda: isinstance(app.screen, ConfirmScreen), 10)
            confirm = app.screen
            assert isinstance(confirm, ConfirmScreen)
            body = confirm.body.plain
            await pilot.press("n")
        return body.splitlines()

    return asyncio.run(drive())


def test_the_console_shows_every_word_the_cli_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    known_hosts = tmp_path / "known_hosts"
    scans = _scans(known_hosts)
    cli = _cli(scans, capsys)
    console = _console(scans, monkeypatch)
    assert console == cli
    # Declined: the console, like the CLI, wrote nothing.
    assert not known_hosts.exists()

    aliased, certified, trusted, gone = cli
    assert scans[0].check is not None
    new = f"ssh-ed25519 {fingerprint(scans[0].check.presented)}  new"
    assert aliased == f"gpu-a  192.0.2.2:22 (known as gpu-a-key)  {new}"
    assert certified.endswith("  trusted: certificate signed by a @cert-authority")
    assert "known as" not in certified
    assert trusted.endswith("  already trusted")
    # One line per host: the reason's escapes and newline are shown, never interpreted.
    assert gone == "gpu-d  192.0.2.5:22  unreachable: go away \\x1b]0;owned\\x07\\nsecond line"
