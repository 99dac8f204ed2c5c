"""``ddptui launch`` on a ``[slurm]`` cluster: ``--dry-run`` prints the batch script alone on
stdout, ready for sbatch; without Slurm, and for the commands that need SSH hosts, one line
says what to do. (Submitting for real: ``tests/run/test_slurm_bed.py``.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ddptui.cli import main


def test_dry_run_prints_only_the_script_with_the_home_expanded(
    slurm_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["launch", str(slurm_file), "--dry-run", "--", "--lr", "0.1"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("#!/bin/bash\n# ddptui run ")
    assert "#SBATCH --partition=debug\n" in out
    assert f"{tmp_path}/home/runs/runs/" in out and "~/runs" not in out
    assert " --lr 0.1 " in out
    subprocess.run(["bash", "-n"], input=out, text=True, check=True)
    assert "2 node(s) × 3 = 6 ranks, backend gloo" in err
    assert re.search(r"the ranks run from \S+/code, where the code goes: uploads \d+ file", err)
    # Nothing is written or submitted by a dry run.
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("command", ["launch", "check"])
def test_a_launch_or_check_where_slurm_is_not_installed_says_where_to_run_it(
    command: str,
    slurm_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main([command, str(slurm_file)]) == 2
    err = capsys.readouterr().err
    assert "sinfo is not on PATH: run ddptui on a machine that submits Slurm jobs" in err
    assert not (tmp_path / "home").exists()


def test_commands_for_ssh_hosts_refuse_a_slurm_cluster_naming_what_works(
    slurm_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trust", str(slurm_file)]) == 2
    err = capsys.readouterr().err
    assert f"{slurm_file}: a [slurm] cluster, whose nodes Slurm gives each job" in err
    assert "trusting host keys needs [[hosts]]" in err


def test_the_docs_show_what_dry_run_prints_for_their_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    section = (Path(__file__).parents[2] / "docs" / "slurm.md").read_text()
    example = tmp_path / "slurm.toml"
    example.write_text(section.split("```toml\n", 1)[1].split("```", 1)[0])
    shown = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert main(["launch", str(example), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    run_id = re.compile(r"\d{8}-\d{6}-[a-z0-9]{4}")
    assert run_id.sub("RUN", printed) == run_id.sub("RUN", shown)
