"""Layering rules from docs/architecture.md, checked both statically and in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
RUN_ON_HOSTS = {"ddptui/run/bench.py"}
"""Sent to the hosts and run there with their torch (``check --bandwidth``); read on the head
as text, never imported there."""


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _top_level(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def _python_files(package: str) -> list[Path]:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files under {package}/"
    return files


def test_core_never_imports_torch_and_only_ui_imports_textual() -> None:
    offenders = []
    for path in _python_files("ddptui"):
        if str(path.relative_to(ROOT)) in RUN_ON_HOSTS:
            continue
        imported = _top_level(_imported_modules(path))
        in_ui = path.relative_to(ROOT).parts[:2] == ("ddptui", "ui")
        if "torch" in imported or ("textual" in imported and not in_ui):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_what_runs_on_hosts_is_never_imported_on_the_head() -> None:
    modules = {".".join(Path(name).with_suffix("").parts) for name in RUN_ON_HOSTS}
    importers = [
        str(path.relative_to(ROOT))
        for path in _python_files("ddptui")
        if modules & _imported_modules(path)
        or any(
            f"from ddptui.run import {m.rpartition('.')[2]}" in path.read_text() for m in modules
        )
    ]
    assert importers == []


def test_trainer_never_imports_ddptui() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in _python_files("trainer")
        if "ddptui" in _top_level(_imported_modules(path))
    ]
    assert offenders == []


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_help_imports_neither_torch_nor_textual_nor_asyncssh() -> None:
    loaded = _modules_after(
        "import contextlib, io\n"
        "from ddptui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass"
    )
    assert "ddptui.cli" in loaded
    assert not {"torch", "textual", "asyncssh"} & _top_level(loaded)


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_python_dash_m_matches_the_console_script(flag: str) -> None:
    via_module = subprocess.run(
        [sys.executable, "-m", "ddptui", flag], capture_output=True, text=True, cwd=ROOT
    )
    via_script = subprocess.run(
        [str(Path(sys.executable).with_name("ddptui")), flag], capture_output=True, text=True
    )
    assert via_module.returncode == via_script.returncode == 0
    assert via_module.stdout == via_script.stdout
    assert via_module.stdout.strip()


def test_every_core_module_imports_without_textual_or_torch() -> None:
    modules = [
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in _python_files("ddptui")
        if path.relative_to(ROOT).parts[:2] != ("ddptui", "ui")
        and path.name not in {"__main__.py", "script.py"}
        and str(path.relative_to(ROOT)) not in RUN_ON_HOSTS
    ]
    loaded = _modules_after("\n".join(f"import {module}" for module in modules))
    assert not {"torch", "textual"} & _top_level(loaded)


def test_the_head_s_install_leaves_torch_to_an_extra_and_the_demo_says_so() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    assert not [need for need in project["dependencies"] if need.startswith(("torch", "nvidia"))]
    assert any(need.startswith("torch") for need in project["optional-dependencies"]["demo"])
    # Where torch cannot be imported, the demo (whose hosts are this machine) says how to get it
    # before it starts anything.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['torch'] = None\n"
            "from ddptui.cli import main\n"
            "sys.exit(main(['demo', '--headless']))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "its Python has no torch" in done.stderr and "ddptui[demo]" in done.stderr
    assert "starting" not in done.stderr
