"""`ddptui config` end to end: what goes to stdout and stderr, and the exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.config import config_to_dict, load_config, parse_config

HOSTS = """
[cluster]
env = { NCCL_DEBUG = "WARN" }

[[hosts]]
name = "gpu-a"
address = "10.0.0.1"

[[hosts]]
name = "gpu-b"
address = "10.0.0.2"
rank0 = true
"""


@pytest.fixture
def hosts_file(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(HOSTS, encoding="utf-8")
    return path


def test_config_prints_the_resolved_file(
    hosts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", str(hosts_file)]) == 0

    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"# {hosts_file}, resolved")
    resolved = parse_config(out, hosts_file)
    assert [host.name for host in resolved.hosts] == ["gpu-b", "gpu-a"]
    assert resolved.ordered_hosts == load_config(hosts_file).ordered_hosts


def test_config_json_is_one_document_on_stdout(
    hosts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", str(hosts_file), "--json"]) == 0

    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out) == config_to_dict(load_config(hosts_file))


def test_python_dash_m_config_json(hosts_file: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ddptui", "config", "--json", str(hosts_file)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert (result.returncode, result.stderr) == (0, "")
    assert [host["node_rank"] for host in json.loads(result.stdout)["hosts"]] == [0, 1]
