"""Hosts-file values through real OpenSSH sshd to users whose login shell is dash, bash,
fish or tcsh: the command line ddptui builds arrives intact under each.

sshd runs the command with the user's own shell from /etc/passwd, so each shell gets a user
of its own for the duration of the module: another name for root with that shell, which the
test bed's key logs in as (its AuthorizedKeysFile is one absolute path).
"""

from __future__ import annotations

import asyncio
import pwd
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.config import parse_config
from ddptui.config.model import HostConfig
from ddptui.errors import ConfigError
from ddptui.remote.connection import RemoteCluster
from tests.helpers import FIELDS, HOSTS_FILE, PRINTF, TRICKY, hosts_text, nasty, remote_values
from tests.remote.hosts import bed_host
from tests.testbed import TestBed

# On the worker of the demo's tests (tests/conftest.py): both add and remove system users.
pytestmark = pytest.mark.xdist_group("slow")

SHELLS = {
    "dash": "/usr/bin/dash",
    "bash": "/usr/bin/bash",
    "fish": "/usr/bin/fish",
    "tcsh": "/usr/bin/tcsh",
}


@pytest.fixture(scope="module")
def shell_users(testbed: TestBed) -> Iterator[dict[str, str]]:
    """One system user per login shell, made for this module and removed after it."""
    users: dict[str, str] = {}
    made: list[str] = []
    for name, shell in SHELLS.items():
        if shutil.which(shell) is None:
            continue
        user = f"ddptui-{name}"
        try:
            pwd.getpwnam(user)
        except KeyError:
            # Another name for root (uid 0), as the test bed's sshd reads its AuthorizedKeysFile
            # as the user and only root may read it there; password "*": none works, but the
            # account is not locked ("!"), which sshd would refuse without PAM.
            argv = ["useradd", "--non-unique", "--uid", "0", "--gid", "0", "--no-create-home"]
            argv += ["--home-dir", "/nonexistent", "--password", "*", "--shell", shell, user]
            subprocess.run(argv, check=True)
            made.append(user)
        users[name] = user
    if set(users) != set(SHELLS):
        pytest.skip(f"login shells missing: {sorted(set(SHELLS) - set(users))}")
    yield users
    for user in made:
        # --force: uid 0 always has processes running, which userdel would refuse.
        subprocess.run(["userdel", "--force", user], check=False)


def run_as(host: HostConfig, values: list[str], env: dict[str, str]) -> list[str]:
    async def once() -> list[str]:
        async with RemoteCluster([host], connect_timeout=10) as remote:
            argv = ["sh", "-c", PRINTF, "sh", *values]
            result = await remote.run(host, argv, timeout=30, env=env)
            assert result.exit_status == 0, (host.user, result.stderr, result.reach)
            return result.stdout.split("\0")[:-1]

    return asyncio.run(once())


def assert_intact_over_ssh(testbed: TestBed, users: dict[str, str], field: str, value: str) -> None:
    try:
        config = parse_config(hosts_text(field, value), HOSTS_FILE)
    except ConfigError as error:
        assert "\n" not in str(error)
        return
    values, env = remote_values(config)
    expected = [*values, env.get("X_VALUE", "unset")]
    for user in users.values():
        host = bed_host(testbed, testbed.hosts[0], user=user)
        assert run_as(host, values, env) == expected, user


# What only that shell prints: its own name as $0, or a version variable only it sets.
WHO_AM_I = {
    "dash": ("echo $0", "dash"),
    "bash": ("echo $0", "bash"),
    "fish": ("echo fish$FISH_VERSION", "fish3"),
    "tcsh": ("echo $tcsh", "6."),
}


def test_each_user_really_has_its_shell(testbed: TestBed, shell_users: dict[str, str]) -> None:
    for name, user in shell_users.items():
        host = bed_host(testbed, testbed.hosts[0], user=user)
        command, expected = WHO_AM_I[name]

        async def login_shell(host: HostConfig = host, command: str = command) -> str:
            async with RemoteCluster([host], connect_timeout=10) as remote:
                connection = await remote._require(host)  # the raw command, no wrapping
                result = await connection.run(command, timeout=10)
                return str(result.stdout).strip()

        assert asyncio.run(login_shell()).startswith(expected), user


@pytest.mark.parametrize("value", TRICKY)
def test_tricky_values_over_ssh(testbed: TestBed, shell_users: dict[str, str], value: str) -> None:
    for field in ("python", "env", "args", "workdir"):
        assert_intact_over_ssh(testbed, shell_users, field, value)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(sorted(FIELDS)), value=nasty)
def test_any_value_over_ssh(
    testbed: TestBed, shell_users: dict[str, str], field: str, value: str
) -> None:
    assert_intact_over_ssh(testbed, shell_users, field, value)
