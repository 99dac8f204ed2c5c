"""``check`` and ``launch`` take one path for every kind of cluster: what differs is said by
RunControl's answers and the words of ``present``. (With Slurm itself:
``tests/commands/test_launch_slurm.py`` and ``tests/run/test_slurm_bed.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.config import Config
from ddptui.config.model import SlurmConfig
from ddptui.health.slurm import SlurmCheck, evaluate_slurm, parse_sinfo
from ddptui.run.control import RunControl


def _answering(monkeypatch: pytest.MonkeyPatch, check: SlurmCheck) -> list[str]:
    asked: list[str] = []

    async def answer(self: RunControl, config: Config, progress: object = None) -> SlurmCheck:
        asked.append(str(config.path))
        return check

    monkeypatch.setattr(RunControl, "check", answer)
    return asked


def _check(nodes: int) -> SlurmCheck:
    up = parse_sinfo("node0|debug*|idle|(null)|none\nnode1|debug*|drained|(null)|bad_gpu")
    return evaluate_slurm(SlurmConfig(nodes=nodes, partition="debug"), up, set())


def test_check_json_of_a_slurm_cluster_is_its_document_and_its_exit_code(
    slurm_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _answering(monkeypatch, _check(nodes=2))
    assert main(["check", "--json", str(slurm_file)]) == 1
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["partition"] == "debug" and document["usable"] == ["node0"]
    assert "not healthy: 1 error, 1 warning, partition debug, 1 of 2 nodes usable" in err


def test_launch_on_slurm_shows_the_findings_and_refuses_without_force(
    slurm_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = _answering(monkeypatch, _check(nodes=2))
    assert main(["launch", str(slurm_file)]) == 1
    err = capsys.readouterr().err
    assert asked == [str(slurm_file)]
    assert "node1 is drained in Slurm (bad_gpu)" in err
    assert "not launching: the check found errors (above)" in err
    assert not (slurm_file.parent / "home").exists()


def test_a_slurm_dry_run_asks_nothing(
    slurm_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = _answering(monkeypatch, _check(nodes=2))
    assert main(["launch", str(slurm_file), "--dry-run"]) == 0
    assert asked == []
    assert capsys.readouterr().out.startswith("#!/bin/bash\n")


@pytest.mark.parametrize(
    ("argv", "what"),
    [(["check", "--bandwidth"], "--bandwidth"), (["trust"], "trusting host keys")],
)
def test_what_needs_ssh_hosts_refuses_a_slurm_cluster_before_asking_anything(
    argv: list[str],
    what: str,
    slurm_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asked = _answering(monkeypatch, _check(nodes=2))
    assert main([*argv, str(slurm_file)]) == 2
    err = capsys.readouterr().err
    assert asked == []
    assert f"{slurm_file}: a [slurm] cluster, whose nodes Slurm gives each job" in err
    assert f"{what} needs [[hosts]]" in err
