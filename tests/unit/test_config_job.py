"""The [job] keys that choose what runs: the trainer, a user's script or an installed module."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_a_script_is_a_path_next_to_the_hosts_file(tmp_path: Path) -> None:
    job = load_config(_write(tmp_path, 'script = "jobs/train.py"\nresume_args = []')).job
    assert job.script == tmp_path / "jobs" / "train.py"
    assert job.resume_args == ()


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ('script = "t.py"\nmodule = "m"', "[job]: set script or module, not both"),
        ('module = "my pkg"', "[job]: module: expected a Python module name"),
        ('module = "a..b"', "[job]: module: expected a Python module name"),
        ("stop_grace_s = 0", "[job]: stop_grace_s: expected a number of seconds > 0"),
        ('resume_args = "--resume"', "[job]: resume_args: expected an array of strings"),
    ],
)
def test_bad_job_keys_are_refused_with_the_key_named(
    tmp_path: Path, job: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(_write(tmp_path, job))
    assert message in str(raised.value)
