"""The programs sent to the hosts' Pythons: several modules of ``ddptui/onhost`` as one text,
which runs where ddptui is not installed."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.probe import PROBE_SOURCE, probe_args
from ddptui.probe.parse import parse_facts
from ddptui.remote.programs import AGENT_MODULES, ONHOST, PROBE_MODULES, agent_program
from tests.helpers import recorded_torch, torch_recording, write_package

PROGRAMS = {"agent": AGENT_MODULES, "probe": PROBE_MODULES}


def _onhost_imports(module: str) -> set[str]:
    tree = ast.parse((ONHOST / f"{module}.py").read_text(encoding="utf-8"))
    return {
        node.module.rpartition(".")[2]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module is not None
        and node.module.startswith("ddptui.onhost.")
    }


@pytest.mark.parametrize("entry", sorted(PROGRAMS))
def test_a_program_holds_every_module_its_modules_import(entry: str) -> None:
    modules = PROGRAMS[entry]
    assert entry in modules
    imported = set().union(*(_onhost_imports(module) for module in modules))
    assert imported <= set(modules)


@pytest.mark.parametrize("program", [agent_program(), PROBE_SOURCE], ids=["agent", "probe"])
def test_the_bootstrap_parses_as_python_3_8(program: str) -> None:
    ast.parse(program, feature_version=(3, 8))


def _isolated(program: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """``program`` run by ``python -I -S -``: neither ddptui's install nor this checkout is on
    its path, so every module it imports of ddptui is one it carries."""
    command = [sys.executable, "-I", "-S", "-", *args]
    return subprocess.check_output(command, input=program, text=True, cwd=cwd, env=env, timeout=60)


def test_the_probe_runs_where_ddptui_is_not_installed(tmp_path: Path) -> None:
    # The parent ignores PYTHONPATH (-I); torch's child, started without -I, finds the stand-in.
    site = write_package(tmp_path / "site", {"torch/__init__.py": recorded_torch()})
    out = _isolated(
        PROBE_SOURCE,
        *probe_args(str(tmp_path / "work")),
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    facts = parse_facts(out)
    assert facts.section_errors == {}
    assert facts.torch.ok and facts.torch.version == torch_recording()["version"]


def test_the_agent_gets_its_document_where_ddptui_is_not_installed(tmp_path: Path) -> None:
    target = tmp_path / "written.txt"
    out = _isolated(agent_program("sent inside the program"), "write", str(target), cwd=tmp_path)
    assert json.loads(out) == {"written": len("sent inside the program")}
    assert target.read_text() == "sent inside the program"
