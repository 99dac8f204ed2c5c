"""`ddptui init` and the example file: commented, valid, complete, and never clobbering."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.config import (
    CLUSTER_KEYS,
    HOST_KEYS,
    JOB_KEYS,
    RECOVERY_KEYS,
    SLURM_KEYS,
    ClusterConfig,
    HostConfig,
    JobConfig,
    RecoveryConfig,
    SlurmConfig,
    load_config,
    starter_text,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "hosts.example.toml"
KEY_LINE = re.compile(r"^(?:# )?(?P<key>[a-z_0-9]+) = ", re.MULTILINE)


def test_init_writes_a_starter_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hosts.toml"

    assert main(["init", str(path)]) == 0

    assert path.read_text(encoding="utf-8") == starter_text()
    assert f"ddptui config {path}" in capsys.readouterr().out
    config = load_config(path)
    assert [host.name for host in config.hosts] == ["gpu-a", "gpu-b"]


def test_init_with_a_job_writes_it_for_the_framework_the_script_trains_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "project" / "train.py"
    script.parent.mkdir()
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"
    script.write_text((fixture / "transformers_regression.py").read_text())
    path = tmp_path / "cluster" / "hosts.toml"
    path.parent.mkdir()

    assert main(["init", str(path), "--job", str(script)]) == 0

    job = load_config(path).job
    assert job.script is not None and job.script.resolve() == script
    assert job.args == () and job.resume_args == ()
    assert job.checkpoint_files == ("out/checkpoint-*/*",)
    assert 'script = "../project/train.py"' in path.read_text(encoding="utf-8")
    out = capsys.readouterr().out
    assert f"{script} trains with Hugging Face's Trainer: [job] script = " in out
    assert main(["init", str(tmp_path / "other.toml"), "--job", str(tmp_path / "none.py")]) == 2
    assert "--job" in capsys.readouterr().err and not (tmp_path / "other.toml").exists()


def test_init_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text("mine\n", encoding="utf-8")

    assert main(["init", str(path)]) == 2

    assert path.read_text(encoding="utf-8") == "mine\n"
    err = capsys.readouterr().err
    assert err.startswith(f"ddptui init: {path} already exists")
    assert "--force" in err


def test_init_force_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text("mine\n", encoding="utf-8")

    assert main(["init", str(path), "--force"]) == 0

    assert path.read_text(encoding="utf-8") == starter_text()


def test_init_into_a_missing_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "no" / "hosts.toml"

    assert main(["init", str(path)]) == 2

    assert "no such directory" in capsys.readouterr().err


def test_init_defaults_to_hosts_toml_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    assert main(["init"]) == 0

    assert (tmp_path / "hosts.toml").read_text(encoding="utf-8") == starter_text()


def test_example_file_is_the_starter_and_loads() -> None:
    assert EXAMPLE.read_text(encoding="utf-8") == starter_text(), (
        "regenerate it: ddptui init hosts.example.toml --force"
    )
    load_config(EXAMPLE)


def test_loader_accepts_exactly_the_dataclass_fields() -> None:
    host_fields = {field.name for field in fields(HostConfig)}
    machine_keys = host_fields - {"name", "address", "rank0", "spare"}
    assert set(HOST_KEYS) == host_fields
    assert set(CLUSTER_KEYS) == machine_keys | {field.name for field in fields(ClusterConfig)}
    assert set(JOB_KEYS) == {field.name for field in fields(JobConfig)}
    assert set(RECOVERY_KEYS) == {field.name for field in fields(RecoveryConfig)}


def _documented_keys(text: str) -> dict[str, set[str]]:
    """Keys written in each table (commented out or not), each checked to have a comment above."""
    documented: dict[str, set[str]] = {}
    table = ""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith(("[", "# [")):
            table = line.removeprefix("# ")
        match = KEY_LINE.match(line)
        if match:
            above = lines[number - 1]
            assert above.startswith("# ") and not KEY_LINE.match(above), f"no comment: {line!r}"
            documented.setdefault(table, set()).add(match["key"])
    return documented


@pytest.mark.parametrize(
    "text",
    [starter_text(), EXAMPLE.read_text(encoding="utf-8")],
    ids=["starter", "hosts.example.toml"],
)
def test_every_key_of_every_table_is_explained(text: str) -> None:
    documented = _documented_keys(text)

    assert set(documented) == {"[cluster]", "[[hosts]]", "[job]", "[recovery]", "[slurm]"}
    assert documented["[cluster]"] == set(CLUSTER_KEYS)
    assert documented["[job]"] == set(JOB_KEYS)
    assert documented["[slurm]"] == set(SLURM_KEYS)
    assert documented["[recovery]"] == set(RECOVERY_KEYS)
    assert {"name", "address", "rank0", "spare"} <= documented["[[hosts]]"] <= set(HOST_KEYS)
    every_field = {
        field.name
        for kind in (ClusterConfig, HostConfig, JobConfig, RecoveryConfig, SlurmConfig)
        for field in fields(kind)
    }
    assert every_field <= set().union(*documented.values())
