"""Remote command lines, run for real through ``sh -c`` exactly as sshd runs them."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.config.model import HostConfig
from ddptui.remote.commands import (
    CommandResult,
    classify_python_failure,
    command_line,
    python_argv,
)
from ddptui.remote.status import Reach

PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
PRINT_ENV = "import json, os, sys; print(json.dumps([os.environ.get(n) for n in sys.argv[1:]]))"
SAFE_PATH = "/usr/bin:/bin"


def remote_shell(command: str, home: Path, path: str = SAFE_PATH) -> CommandResult:
    """Run ``command`` the way sshd does: ``$SHELL -c COMMAND`` with the user's HOME and PATH."""
    proc = subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        env={"HOME": str(home), "PATH": path},
        check=False,
        timeout=30,
    )
    # Decoded by hand: text mode would turn a "\r" into "\n", which an SSH channel never does.
    return CommandResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def host(**overrides: object) -> HostConfig:
    return HostConfig(name="h", address="h.example", **overrides)  # type: ignore[arg-type]


awkward_text = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40
)


@settings(max_examples=100, deadline=None)
@given(args=st.lists(awkward_text, max_size=4))
def test_arguments_reach_the_program_unchanged(args: list[str]) -> None:
    # printf(1) writes each argument NUL-terminated; "start" keeps an empty list visible.
    result = remote_shell(command_line(["printf", "%s\\0", "start", *args]), Path("/"))
    assert result.exit_status == 0, result.stderr
    assert result.stdout.split("\0")[1:-1] == args


def test_environment_travels_on_the_command_line(tmp_path: Path) -> None:
    env = {"NCCL_DEBUG": "WARN", "ODD": "a b;$HOME'\"`x`"}
    command = command_line([sys.executable, "-c", PRINT_ENV, *env], env)
    result = remote_shell(command, tmp_path)
    assert json.loads(result.stdout) == list(env.values())


@pytest.mark.parametrize("name", ["", "1A", "A-B", "A B", "A=B"])
def test_environment_names_must_be_names(name: str) -> None:
    with pytest.raises(ValueError, match="not an environment variable name"):
        command_line(["true"], {name: "x"})


def test_home_relative_python_runs_under_the_remote_home(tmp_path: Path) -> None:
    (tmp_path / "envs" / "py dir").mkdir(parents=True)
    (tmp_path / "envs" / "py dir" / "python").symlink_to(sys.executable)
    argv = python_argv(host(python="~/envs/py dir/python"), "-c", PRINT_ARGV, "~/x", "$HOME")
    result = remote_shell(command_line(argv), tmp_path)
    assert result.exit_status == 0, result.stderr
    assert json.loads(result.stdout) == ["~/x", "$HOME"]


def test_plain_python_is_found_on_the_remote_path(tmp_path: Path) -> None:
    argv = python_argv(host(python=Path(sys.executable).name), "-c", PRINT_ARGV, "a b")
    path = f"{Path(sys.executable).parent}:{SAFE_PATH}"
    result = remote_shell(command_line(argv), tmp_path, path)
    assert json.loads(result.stdout) == ["a b"]


def write_fake_conda(path: Path) -> None:
    """A conda that prints the argv it was given: proves how the real one would be called."""
    path.parent.mkdir(parents=True)
    path.write_text(f"#!{sys.executable}\n{PRINT_ARGV}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("install", ["miniconda3/bin", "anaconda3/bin", "miniforge3/bin", "PATH"])
def test_conda_env_runs_conda_run_wherever_conda_is(install: str, tmp_path: Path) -> None:
    on_path = tmp_path / "elsewhere"
    write_fake_conda((on_path if install == "PATH" else tmp_path / install) / "conda")
    argv = python_argv(host(conda_env="pytorch dist", python="ignored"), "train.py", "--x=1 2")
    result = remote_shell(command_line(argv), tmp_path, f"{on_path}:{SAFE_PATH}")
    assert result.exit_status == 0, result.stderr
    assert json.loads(result.stdout) == [
        "run", "--no-capture-output", "-n", "pytorch dist", "python", "train.py", "--x=1 2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "config",
    [
        {"python": "/nonexistent/bin/python3"},
        {"python": "python3.99-not-installed"},
        {"python": "~/missing/python"},
        {"conda_env": "pytorch"},
    ],
)
def test_a_missing_interpreter_is_python_missing(config: dict[str, str], tmp_path: Path) -> None:
    h = host(**config)
    result = remote_shell(command_line(python_argv(h, "-c", "print(1)")), tmp_path)
    reach = classify_python_failure(h, result)
    assert reach is not None, result
    assert reach.reach is Reach.PYTHON_MISSING
    assert result.stderr.strip().splitlines()[-1] in reach.detail


def test_a_non_executable_interpreter_is_python_missing(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("not a program")
    h = host(python=str(python))
    result = remote_shell(command_line(python_argv(h, "-V")), tmp_path)
    reach = classify_python_failure(h, result)
    assert reach is not None and reach.reach is Reach.PYTHON_MISSING


@pytest.mark.parametrize(
    "stderr",
    [
        "\nEnvironmentLocationNotFound: Not a conda environment: /opt/conda/envs/pytorch-dist\n",
        "Could not find conda environment: pytorch-dist\n",
    ],
)
def test_a_missing_conda_env_is_python_missing(stderr: str, tmp_path: Path) -> None:
    conda = tmp_path / "miniconda3" / "bin" / "conda"
    conda.parent.mkdir(parents=True)
    # conda's own behaviour for an environment that does not exist: a message and exit 1.
    conda.write_text(f"#!/bin/sh\nprintf '%s' {shlex.quote(stderr)} >&2\nexit 1\n")
    conda.chmod(0o755)
    h = host(conda_env="pytorch-dist")
    result = remote_shell(command_line(python_argv(h, "-V")), tmp_path)
    assert result.exit_status == 1
    reach = classify_python_failure(h, result)
    assert reach is not None and reach.reach is Reach.PYTHON_MISSING
    assert "pytorch-dist" in reach.detail
    assert classify_python_failure(host(), result) is None


@pytest.mark.parametrize("code", ["raise SystemExit(0)", "raise SystemExit(1)", "1/0"])
def test_a_python_that_ran_is_not_missing(code: str, tmp_path: Path) -> None:
    h = host(python=sys.executable)
    result = remote_shell(command_line(python_argv(h, "-c", code)), tmp_path)
    assert classify_python_failure(h, result) is None


def test_unknown_exit_status_is_never_success() -> None:
    assert not CommandResult(None, "", "").ok
    assert CommandResult(0, "", "").ok


def test_an_empty_argv_is_refused() -> None:
    with pytest.raises(ValueError):
        command_line([])
