"""The docs as users read them: a short README, links that resolve, a site that builds with
``--strict``, and the pages that the code must not drift from — every command and flag, every
error the diagnosis names (both generated: tests/helpers/docs.py), every finding code."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.config import load
from ddptui.health.findings import Code
from tests.helpers.docs import DOCS, GENERATED, generated

ROOT = DOCS.parent
README = ROOT / "README.md"
PAGES = sorted(DOCS.glob("*.md"))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> list[str]:
    """The lines outside code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(page: Path) -> set[str]:
    """The ids of ``page``'s headings, as the site's table of contents makes them."""
    headings = [line.lstrip("#").strip() for line in _prose(page.read_text()) if line[:1] == "#"]
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_the_readme_is_short_and_its_lines_are_too() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    long = [line for line in _prose(text) if len(line) > 120]
    assert long == []


def test_the_readme_keeps_the_test_command_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    (command,) = re.findall(r"^\.venv/bin/python -m pytest [^|\n]*?(?= \||$)", ci, re.M)
    assert f"`{command}`" in README.read_text()


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda page: page.name)
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for found in LINK.finditer("\n".join(_prose(page.read_text()))):
        target = found.group(1) or found.group(2)
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        on_page = not anchor or resolved.suffix != ".md" or anchor in _anchors(resolved)
        if not (resolved.exists() and on_page):
            broken.append(target)
    assert broken == []


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "cli" / "index.html").exists()


def test_every_page_is_in_the_site_s_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [page.name for page in PAGES if page.name not in nav] == []


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_the_generated_pages_are_what_the_code_says(name: str) -> None:
    page = GENERATED[name][0]
    assert (DOCS / page).read_text() == generated(page), (
        f"docs/{page} is not what the code says: run `python -m tests.helpers.docs`"
    )


def test_every_finding_code_has_its_line_in_the_docs() -> None:
    said = (DOCS / "checking.md").read_text() + (DOCS / "slurm.md").read_text()
    assert [code.value for code in Code if f"`{code.value}`" not in said] == []


def _hosts_files() -> list[tuple[str, str]]:
    """Every TOML block of the docs that is a hosts file: (page, text)."""
    found = []
    for page in PAGES:
        for block in re.findall(r"^```toml\n(.*?)^```", page.read_text(), re.M | re.S):
            if "[[hosts]]" in block or "[slurm]" in block:
                found.append((page.name, block))
    return found


@pytest.mark.parametrize(("page", "text"), _hosts_files(), ids=lambda value: value[:12])
def test_every_hosts_file_of_the_docs_passes_config(page: str, text: str, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "ddptui", "config", str(hosts)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (page, done.stdout + done.stderr)


def test_the_docs_have_a_hosts_file_for_ssh_hosts_and_one_for_slurm() -> None:
    texts = [text for _, text in _hosts_files()]
    assert any("[[hosts]]" in text for text in texts)
    assert any("[slurm]" in text for text in texts)


@pytest.mark.parametrize(
    "table", ["CLUSTER_KEYS", "HOST_KEYS", "JOB_KEYS", "SLURM_KEYS", "RECOVERY_KEYS"]
)
def test_every_key_of_the_hosts_file_is_documented(table: str) -> None:
    keys = getattr(load, table)
    example = (ROOT / "hosts.example.toml").read_text()
    pages = "".join(
        (DOCS / page).read_text() for page in ("hosts-file.md", "slurm.md", "recovery.md")
    )
    assert [key for key in keys if not re.search(rf"^#? ?{key} =", example, re.M)] == []
    said = [key for key in keys if re.search(rf"`{key}( = [^`]*)?`|^{key} =", pages, re.M)]
    assert [key for key in keys if key not in said] == []


SHOWN_AS = {"question_mark": "?", "slash": "/", "colon": ":", "escape": "esc", "f5": "F5"}
"""A binding's key as the console's footer and the docs show it."""


def test_every_key_of_the_console_is_on_its_page() -> None:
    keys = set()
    for path in (ROOT / "ddptui" / "ui").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Binding":
                first = node.args[0]
                assert isinstance(first, ast.Constant), ast.dump(first)
                keys |= {(key, path.name) for key in str(first.value).split(",")}
    page = (DOCS / "console.md").read_text()
    missing = sorted(
        (key, where) for key, where in keys if f"`{SHOWN_AS.get(key, key)}`" not in page
    )
    assert missing == []
