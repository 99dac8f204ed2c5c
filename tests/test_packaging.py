"""What installing ddptui on a head node pulls in (pip's own resolution, not our reading of
pyproject.toml), and that such a head, without torch, checks and launches on hosts that have
it. Needs the package index, as installing does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.run.bed import SMALL, Cli, write_hosts
from tests.testbed import TestBed

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _resolved(tmp_path: Path, target: str) -> set[str]:
    report = tmp_path / "report.json"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--dry-run", "--quiet"),
            *("--ignore-installed", "--report", str(report), target),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower() for item in installs}


def test_the_head_node_s_install_resolves_no_torch(tmp_path: Path) -> None:
    # (Resolving the demo extra would fetch a torch wheel to read its metadata: gigabytes
    # where the index serves CUDA builds. tests/test_boundaries.py reads the extra.)
    head = _resolved(tmp_path, str(ROOT))
    assert {"textual", "asyncssh"} <= head
    assert not {name for name in head if name.startswith(("torch", "nvidia"))}, sorted(head)


def test_a_head_without_torch_checks_and_launches_on_hosts_that_have_it(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    venv = tmp_path / "head"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    no_torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True)
    assert no_torch.returncode != 0, "the head's venv has torch"
    # The hosts run the test bed's own Python, which has torch.
    hosts_file = write_hosts(
        testbed, tmp_path, testbed.hosts[:2], job={"args": [*SMALL, "--max-steps", "5"]}
    )
    ddptui = [str(venv / "bin" / "ddptui")]
    checked = subprocess.run(
        [*ddptui, "check", str(hosts_file)], env=cli.env, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    launched = subprocess.run(
        [*ddptui, "launch", str(hosts_file), "--headless"],
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert launched.returncode == 0, launched.stderr
    assert "completed: every node exited 0" in launched.stderr
