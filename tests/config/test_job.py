"""The [job] keys that choose what runs: the trainer, a user's script or an installed module."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.config import load_config
from ddptui.errors import ConfigError

HOSTS = """
[[hosts]]
name = "a"
address = "10.0.0.1"
"""


def _write(tmp_path: Path, job: str) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(f"{HOSTS}\n[job]\n{job}\n")
    return path


def test_defaults_run_the_bundled_trainer_and_resume_from_the_latest_checkpoint(
    tmp_path: Path,
) -> None:
    job = load_config(_write(tmp_path, "")).job
    assert (job.script, job.module) == (None, None)
    assert job.resume_args == ("--resume", "latest")
    assert job.stop_grace_s == 60.0
    assert (job.hang_timeout_s, job.on_hang) == (None, "wait")


def test_a_script_is_a_path_next_to_the_hosts_file(tmp_path: Path) -> None:
    job = load_config(_write(tmp_path, 'script = "jobs/train.py"\nresume_args = []')).job
    assert job.script == tmp_path / "jobs" / "train.py"
    assert job.resume_args == ()
    # Its directory goes with every run, and the ranks run it from there.
    assert (job.code_dir, job.script_target) == (tmp_path / "jobs", "train.py")
    assert (job.exclude, job.max_upload_mb) == ((), 100.0)


def test_dir_holds_the_script_or_the_module(tmp_path: Path) -> None:
    job = load_config(_write(tmp_path, 'script = "repo/ddp/t.py"\ndir = "repo"')).job
    assert (job.code_dir, job.script_target) == (tmp_path / "repo", "ddp/t.py")
    job = load_config(_write(tmp_path, 'module = "pkg.train"\ndir = "repo"')).job
    assert (job.code_dir, job.script_target) == (tmp_path / "repo", None)
    assert load_config(_write(tmp_path, 'module = "pkg.train"')).job.code_dir is None


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ('script = "t.py"\nmodule = "m"', "[job]: set script or module, not both"),
        ('module = "my pkg"', "[job]: module: expected a Python module name"),
        ('module = "a..b"', "[job]: module: expected a Python module name"),
        ("stop_grace_s = 0", "[job]: stop_grace_s: expected a number of seconds > 0"),
        ('resume_args = "--resume"', "[job]: resume_args: expected an array of strings"),
        ('dir = "."', "[job]: dir is uploaded for a script or a module; set one of them"),
        ('script = "a/t.py"\ndir = "b"', "[job]: script "),
        ('exclude = "data/"', "[job]: exclude: expected an array of strings"),
        ("max_upload_mb = 0", "[job]: max_upload_mb: expected a number of MiB > 0"),
        ("loss_pattern = 'loss (.*'", "[job]: loss_pattern: not a regular expression"),
        ("checkpoint_files = ['/abs.pt']", "[job]: checkpoint_files[0]: expected a glob relative"),
        ("checkpoint_files = ['../up.pt']", "[job]: checkpoint_files[0]: expected a glob relative"),
        ("loss_pattern = 'loss ([0-9.]+)'", "[job]: loss_pattern: no group named loss"),
    ],
)
def test_bad_job_keys_are_refused_with_the_key_named(
    tmp_path: Path, job: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(_write(tmp_path, job))
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("job", "hang_timeout_s", "on_hang"),
    [
        ("hang_timeout_s = 90", 90.0, "wait"),
        ('hang_timeout_s = 0.5\non_hang = "stop"', 0.5, "stop"),
        ('on_hang = "wait"', None, "wait"),
    ],
)
def test_hang_window_and_what_to_do_about_a_hang(
    tmp_path: Path, job: str, hang_timeout_s: float | None, on_hang: str
) -> None:
    config = load_config(_write(tmp_path, job)).job
    assert (config.hang_timeout_s, config.on_hang) == (hang_timeout_s, on_hang)
    assert config.hang_timeout_s is None or isinstance(config.hang_timeout_s, float)


SECONDS = "expected a number of seconds > 0, found"
WAIT_OR_STOP = 'expected "wait" or "stop", found'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[job]\nhang_timeout_s = 0", f"[job]: hang_timeout_s: {SECONDS} 0 (an integer)"),
        ("[job]\nhang_timeout_s = -5.0", f"[job]: hang_timeout_s: {SECONDS} -5.0 (a float)"),
        ("[job]\nhang_timeout_s = true", f"[job]: hang_timeout_s: {SECONDS} true (a boolean)"),
        ('[job]\nhang_timeout_s = "60"', f'[job]: hang_timeout_s: {SECONDS} "60" (a string)'),
        ("[job]\nhang_timeout_s = nan", f"[job]: hang_timeout_s: {SECONDS} nan (a float)"),
        ("[job]\nhang_timeout_s = inf", f"[job]: hang_timeout_s: {SECONDS} inf (a float)"),
        ('[job]\non_hang = "kill"', f'[job]: on_hang: {WAIT_OR_STOP} "kill" (a string)'),
        ('[job]\non_hang = "Stop"', f'[job]: on_hang: {WAIT_OR_STOP} "Stop" (a string)'),
        ("[job]\non_hang = true", f"[job]: on_hang: {WAIT_OR_STOP} true (a boolean)"),
        ('[job]\non_hang = ["stop"]', f'[job]: on_hang: {WAIT_OR_STOP} ["stop"] (an array)'),
        ('[job]\non_hangs = "stop"', '[job]: unknown key "on_hangs" — did you mean "on_hang"?'),
        ("[cluster]\nhang_timeout_s = 60", '[cluster]: "hang_timeout_s" belongs in [job]'),
    ],
)
def test_bad_hang_keys_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(f"{text}\n{HOSTS}", encoding="utf-8")

    assert main(["config", str(path)]) == 2

    assert capsys.readouterr() == ("", f"ddptui config: {path}: {message}\n")


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ('script = "p/train.py"\nmax_upload_mb = 0.01', "over [job] max_upload_mb = 0.01"),
        ('module = "pkg.train"\ndir = "gone"', "[job] dir "),
        ('script = "p/gone.py"', "[job] script "),
        ("loss_pattern = '(?P<los>x)'", "[job]: loss_pattern: no group named loss"),
    ],
)
def test_a_launch_that_cannot_upload_is_one_line_and_exit_2_before_any_host_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job: str, message: str
) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "train.py").write_text("print('train')\n")
    (tmp_path / "p" / "weights.pt").write_bytes(b"w" * 100_000)
    # A host that cannot be reached: asking it would take the connect timeout, and fail.
    path = _write(tmp_path, job)
    assert main(["launch", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and message in err, err
