"""What the command tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def slurm_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A [slurm] cluster's hosts file of two nodes, three processes each, with HOME and the run
    store in ``tmp_path``."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = tmp_path / "slurm.toml"
    path.write_text(
        '[cluster]\nworkdir = "~/runs"\n[slurm]\nnodes = 2\npartition = "debug"\n'
        "[job]\nnproc_per_node = 3\n"
    )
    return path
