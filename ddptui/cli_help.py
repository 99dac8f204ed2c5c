"""What each command's ``--help`` ends with: examples of its use, kept as written.

Also read by docs/cli.md's generator, so the page and the help show the same examples."""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "config": (
        ("ddptui config", "is ./hosts.toml right? every host's settings, defaults applied"),
        ("ddptui config lab.toml --json | jq '.hosts[].address'", "the hosts' addresses"),
    ),
    "init": (
        ("ddptui init", "a commented ./hosts.toml to fill in"),
        ("ddptui init lab.toml --job train.py", "[job] set to run your script"),
    ),
    "check": (
        ("ddptui check", "every host of ./hosts.toml, each problem with its fix"),
        ("ddptui check lab.toml --json > check.json", "the facts and findings, for a script"),
        ("ddptui check --bandwidth", "then the interconnect, naming a slow host's link"),
    ),
    "trust": (
        ("ddptui trust", "show each new host key's fingerprint, ask before adding it"),
        ("ddptui trust lab.toml --yes", "add every new key (a changed key never)"),
    ),
    "launch": (
        ("ddptui launch --dry-run", "each host's exact torchrun command; start nothing"),
        ("ddptui launch --detach -- --epochs 10", "start and return; the trainer gets --epochs 10"),
        ("ddptui launch lab.toml --headless", "start, then print progress until the end"),
    ),
    "status": (
        ("ddptui status", "the latest run: state, nodes, ranks, incidents"),
        ("ddptui status 20261205-1313 --json", "one run (an id's unique prefix), for a script"),
    ),
    "stop": (
        ("ddptui stop", "the latest run: checkpoint, then stop every rank"),
        ("ddptui stop 20261205-1313 --kill", "no checkpoint: SIGTERM at once"),
    ),
    "dump": (
        ("ddptui dump", "where is each rank? the odd ones first"),
        ("ddptui dump --json > stacks.json", "every group of stacks, for a script"),
    ),
    "resume": (
        ("ddptui resume --detach", "the latest run, from its newest checkpoint"),
        ("ddptui resume --with gpu-b", "and use gpu-b again, which recovery set aside"),
    ),
    "logs": (
        ("ddptui logs --errors", "what failed, first failing rank first, with fixes"),
        ("ddptui logs --rank 3 --follow", "rank 3's output as it comes"),
    ),
    "runs": (
        ("ddptui runs", "every run: state, restarts, the share of time kept"),
        ("ddptui runs --json | jq '.[-1].id'", "the latest run's id"),
    ),
    "demo": (
        ("ddptui demo", "2 hosts x 2 processes on this machine, in the console"),
        ("ddptui demo --nodes 3 --spare", "x kills a node; the run heals on the spare"),
        ("ddptui demo --headless --steps 200", "no console: progress lines until the end"),
    ),
    "completion": (
        ("ddptui completion bash", 'in ~/.bashrc as: eval "$(ddptui completion bash)"'),
        ("ddptui completion fish | source", "in fish's config"),
    ),
}
"""A command line or more per command, each with what it does: in its ``--help`` and in
docs/cli.md (a test parses every one)."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, but a paragraph of indented lines (the examples) is kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        fill = super()._fill_text
        return "\n\n".join(
            paragraph if "\n  " in paragraph else fill(paragraph, width, indent)
            for paragraph in text.split("\n\n")
        )


def examples_text(command: str) -> str:
    """``command``'s examples as its ``--help`` ends with them ("" where it has none)."""
    lines = EXAMPLES.get(command, ())
    if not lines:
        return ""
    width = max(len(line) for line, _ in lines)
    return "examples:\n" + "\n".join(f"  {line:<{width}}  # {said}" for line, said in lines)
