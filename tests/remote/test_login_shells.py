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

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.config import parse_config
from ddptui.errors import ConfigError
from ddptui.remote.commands import command_line
from tests.helpers import FIELDS, HOSTS_FILE, PRINTF, TRICKY, hosts_text, nasty, remote_values

SHELLS = ("dash", "bash", "fish", "tcsh")
REPORT = (
    "import json, os, sys; "
    "print(json.dumps([sys.argv[1:], {k: v for k, v in os.environ.items() if k.startswith('X')}]))"
)


def shell_path(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (.ci/run installs it)")
    return path


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
