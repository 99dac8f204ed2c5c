"""What ``ddptui WORD`` does when WORD is no command: a mistyped command is said to be one, and
the console never opens where there is no terminal to draw on or read keys from."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.cli import PIPE_CLOSED, build_parser, main
from ddptui.cli_help import EXAMPLES


@pytest.mark.parametrize(
    ("word", "suggested"), [("stauts", "status"), ("lanch", "launch"), ("chek", "check")]
)
def test_a_mistyped_command_is_named_with_the_command_meant(
    word: str, suggested: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([word]) == 2
    said = capsys.readouterr().err
    assert f"{word!r} is neither a command nor a hosts file" in said
    assert f"did you mean `ddptui {suggested}`?" in said


def test_a_word_like_no_command_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zzz"]) == 2
    said = capsys.readouterr().err
    assert "'zzz' is neither a command nor a hosts file" in said and "did you mean" not in said


@pytest.mark.parametrize("words", [[], ["hosts.toml"], ["./cluster"], ["existing"]])
def test_without_a_terminal_the_console_is_refused_and_other_ways_named(
    words: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing").write_text("")
    assert main(words) == 2
    said = capsys.readouterr().err
    assert "the console needs a terminal" in said and "--headless" in said


def test_the_command_line_a_script_would_run_ends_at_once_and_prints_no_escape(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddptui", "stauts"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == b"" and b"\x1b" not in done.stderr


def test_a_command_that_reaches_ssh_says_only_its_own_words(tmp_path: Path) -> None:
    """asyncssh names cryptography's deprecated DSA classes as it is imported (cryptography 51
    warns five times for it): a user must not read that on every command."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run(
        [sys.executable, "-m", "ddptui", "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("ddptui status: no runs yet") and done.stderr.count("\n") == 1
    # Whatever cryptography is installed here: the same warning, said from asyncssh's module.
    said_by_asyncssh = (
        "import ddptui, warnings; warnings.warn_explicit('DSA is deprecated and support will be"
        " removed', UserWarning, 'misc.py', 32, module='asyncssh.crypto.misc')"
    )
    done = subprocess.run(
        [sys.executable, "-c", said_by_asyncssh],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == ""


def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n')
    # `ddptui config --json | head -1`, with head gone before the first write.
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ddptui", "config", "--json", str(hosts)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert done.returncode == PIPE_CLOSED, done.stderr
    assert done.stderr == ""


def test_the_hosts_file_defaults_to_the_one_the_console_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["config"]) == 2
    assert "hosts.toml: no such file" in capsys.readouterr().err
    (tmp_path / "hosts.toml").write_text('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n')
    assert main(["config"]) == 0
    assert "10.0.0.1" in capsys.readouterr().out


def _completed(line: str, cwd: Path, state: Path) -> list[str]:
    """What the shell's Tab offers after ``line``: argcomplete's protocol, as the code from
    ``ddptui completion`` drives it."""
    answer = cwd / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "XDG_STATE_HOME": str(state),
    }
    subprocess.run(
        [sys.executable, "-m", "ddptui"],
        env=env,
        cwd=cwd,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return answer.read_text().split()


def test_tab_completes_commands_options_hosts_files_and_run_ids(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run = state / "ddptui" / "runs" / "20261201-120000-abcd"
    run.mkdir(parents=True)
    (run / "run.toml").write_text("")
    (tmp_path / "hosts.toml").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "cluster").mkdir()
    assert _completed("ddptui sta", tmp_path, state) == ["status"]
    assert _completed("ddptui logs 2026", tmp_path, state) == ["20261201-120000-abcd"]
    assert _completed("ddptui check h", tmp_path, state) == ["hosts.toml"]
    offered = _completed("ddptui launch ", tmp_path, state)
    assert {"hosts.toml", "cluster/", "--detach"} <= set(offered) and "notes.txt" not in offered


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_shell_s_code(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    assert "ddptui" in capsys.readouterr().out


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_command_says_its_exit_codes_and_shows_examples_that_parse(name: str) -> None:
    command = _subcommands()[name]
    assert "Exit 0" in (command.description or "")
    assert name in EXAMPLES, f"`ddptui {name}` has no example in its --help"
    help_text = command.format_help()
    for line, said in EXAMPLES[name]:
        assert f"{line}" in help_text and said in help_text
        words = shlex.split(line)
        # As main() reads it: a shell's pipe or redirection ends it, "--" starts the trainer's.
        cut = next((i for i, word in enumerate(words) if word in ("|", ">", "--")), len(words))
        assert words[:2] == ["ddptui", name]
        try:
            args = build_parser().parse_args(words[1:cut])
        except SystemExit as refused:
            pytest.fail(f"the example `{line}` is refused (exit {refused.code})")
        if "--" in words:
            assert getattr(args, "takes_passthrough", False)
