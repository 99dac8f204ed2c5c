"""The parts of the docs that are generated from the code, so that they cannot drift from it:
every command and flag of ``ddptui`` (docs/cli.md, from the argparse tree) and every error the
diagnosis recognises (docs/troubleshooting.md, from its catalogue).

Each sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->`` in its page;
``python -m tests.helpers.docs`` writes them again after a change, and tests/test_docs.py fails
while a page is not what the code would generate."""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from ddptui.cli import build_parser
from ddptui.cli_help import examples_text
from ddptui.run.diagnose import Category

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S
)
ROLES = {
    "root": "a failure of its own",
    "consequence": "the echo of another rank's failure",
    "report": "torchrun telling of a failure",
    "warning": "not a failure by itself",
}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def commands() -> str:
    """Every subcommand: what it does, its usage, each of its options, and its examples."""
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = []
    for name, command in sub.choices.items():
        usage = " ".join(command.format_usage().split())
        parts.append(f"### `ddptui {name}`\n\n{_cell(command.description or '')}\n\n")
        parts.append(f"```\n{usage.removeprefix('usage: ')}\n```\n\n")
        rows = [
            (", ".join(f"`{flag}`" for flag in action.option_strings), action.help or "")
            for action in command._actions
            if action.option_strings and action.help != argparse.SUPPRESS
        ]
        positional = [
            (f"`{action.metavar or action.dest}`", action.help or "")
            for action in command._actions
            if not action.option_strings and action.help != argparse.SUPPRESS
        ]
        table = positional + rows
        if table:
            parts.append("| argument | meaning |\n| --- | --- |\n")
            parts += [f"| {flags} | {_cell(said)} |\n" for flags, said in table]
            parts.append("\n")
        examples = examples_text(name).removeprefix("examples:\n")
        parts.append(f"Examples:\n\n```\n{textwrap.dedent(examples)}\n```\n\n")
    return "".join(parts)


def diagnoses() -> str:
    """Every category of error the diagnosis recognises, with its cause and fix."""
    return "".join(
        f"### `{category.value}`\n\n*{ROLES[category.role]}.* {category.cause}\n\n"
        f"**Fix:** {category.fix}\n\n"
        for category in Category
    )


GENERATED: dict[str, tuple[str, Callable[[], str]]] = {
    "commands": ("cli.md", commands),
    "diagnoses": ("troubleshooting.md", diagnoses),
}


def generated(page: str) -> str:
    """``page``'s text with each of its generated blocks as the code would write it now."""
    text = (DOCS / page).read_text()

    def fill(found: re.Match[str]) -> str:
        name = found["name"]
        return found.group(1) + GENERATED[name][1]() + found.group(4)

    return BLOCK.sub(fill, text)


def main() -> int:
    for page in sorted({page for page, _ in GENERATED.values()}):
        (DOCS / page).write_text(generated(page))
    return 0


if __name__ == "__main__":
    sys.exit(main())
