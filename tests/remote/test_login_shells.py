"""Whatever a hosts file holds, it is refused in one line or reaches the host intact, under
any login shell sshd may hand the command to: dash, bash, fish or tcsh.

sshd runs a command as ``$SHELL -c COMMAND``; these tests do the same with each shell, with
every string value of the resolved hosts file as an argument and its ``env`` exported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.config import Config, parse_config
from ddptui.errors import ConfigError
from ddptui.remote.commands import command_line

SHELLS = ("dash", "bash", "fish", "tcsh")
REPORT = (
    "import json, os, sys; "
    "print(json.dumps([sys.argv[1:], {k: v for k, v in os.environ.items() if k.startswith('X')}]))"
)
# The same without a Python start per run: each argument, then $X_VALUE, NUL-terminated.
PRINTF = 'printf "%s\\0" "$@" "${X_VALUE-unset}"'
HOSTS_FILE = Path("/nonexistent/hosts.toml")

# What breaks shells: quotes, backslashes (fish reads \' inside single quotes), newlines
# (tcsh ends the word), $ ` ! % = ; and friends, and what should be refused outright.
nasty = st.text(
    alphabet=st.one_of(
        st.sampled_from([*"'\"\\\n\t$`!%=;&|<>(){}[]*?~# ", "\x1b", "\x9b", "\u202e", "é"]),
        st.characters(exclude_categories=["Cs"]),
    ),
    min_size=1,
    max_size=24,
)
TRICKY = [
    "it's", "a\\'b", "x\ny", "$(id)", "`id`", "!!", "%x", "a=b", "/opt/py=3.11/bin/python",
    "fe80::1%';id;'", "fe80::1%eth0", "~/p y", "-c", "--", "'", "\\", "\"", ";id;",
]  # fmt: skip

FIELDS = {
    "user": "cluster",
    "identity_file": "cluster",
    "known_hosts": "cluster",
    "python": "cluster",
    "conda_env": "cluster",
    "workdir": "cluster",
    "socket_ifname": "cluster",
    "env": "cluster",
    "name": "host",
    "address": "host",
    "args": "job",
}
"""Every string-valued key of the hosts file, and the table it goes in."""


def shell_path(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (.ci/run installs it)")
    return path


def hosts_text(field: str, value: str) -> str:
    cluster: dict[str, Any] = {}
    host: dict[str, Any] = {"name": "gpu-a", "address": "10.0.0.1"}
    job: dict[str, Any] = {"nproc_per_node": 1}
    where = {"cluster": cluster, "host": host, "job": job}[FIELDS[field]]
    if field == "env":
        where[field] = {"X_VALUE": value}
    elif field == "args":
        where[field] = ["--flag", value]
    else:
        where[field] = value
    return tomli_w.dumps({"cluster": cluster, "hosts": [host], "job": job})


def remote_values(config: Config) -> tuple[list[str], dict[str, str]]:
    """Every string the hosts file gives one host, and its environment."""
    (host,) = config.hosts
    values = [host.name, host.address, host.python, host.workdir, host.socket_ifname]
    values += [str(path) for path in (host.identity_file, host.known_hosts) if path is not None]
    values += [text for text in (host.user, host.conda_env) if text is not None]
    values += list(config.job.args)
    return values, dict(host.env)


def run_as_login_shell(shell: str, command: str, home: Path) -> subprocess.CompletedProcess[bytes]:
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
    return subprocess.run(
        [shell, "-c", command], capture_output=True, env=env, timeout=30, check=False
    )


def assert_refused_in_one_line_or_intact(field: str, value: str, home: Path) -> None:
    try:
        config = parse_config(hosts_text(field, value), HOSTS_FILE)
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message and "\x1b" not in message, message
        return
    values, env = remote_values(config)
    command = command_line(["sh", "-c", PRINTF, "sh", *values], env)
    expected = [*values, env.get("X_VALUE", "unset")]
    for name in SHELLS:
        result = run_as_login_shell(shell_path(name), command, home)
        assert result.returncode == 0, (name, result.stderr)
        assert result.stdout.decode().split("\0")[:-1] == expected, name


@pytest.mark.parametrize("value", TRICKY)
@pytest.mark.parametrize("field", FIELDS)
def test_tricky_values(field: str, value: str, tmp_path: Path) -> None:
    assert_refused_in_one_line_or_intact(field, value, tmp_path)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(sorted(FIELDS)), value=nasty)
def test_any_value_is_refused_in_one_line_or_reaches_every_shell_intact(
    field: str, value: str, tmp_path: Path
) -> None:
    assert_refused_in_one_line_or_intact(field, value, tmp_path)


def test_a_python_path_with_an_equals_sign_runs(tmp_path: Path) -> None:
    # env(1) would read it as one more assignment and look for a program called "-c".
    python = tmp_path / "py=3" / "python"
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    command = command_line([str(python), "-c", REPORT, "ok"], {"X_A": "1"})
    for name in SHELLS:
        result = run_as_login_shell(shell_path(name), command, tmp_path)
        assert json.loads(result.stdout) == [["ok"], {"X_A": "1"}], (name, result.stderr)
