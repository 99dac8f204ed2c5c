"""The ``ddptui`` command line: argument parsing and lazy dispatch to ``ddptui.commands``.

Nothing heavy is imported at module level: ``ddptui --help`` must not pay for torch,
textual or asyncssh.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ddptui import __version__

DEFAULT_HOSTS = "hosts.toml"


def _add_hosts_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "hosts",
        metavar="HOSTS",
        help="the hosts file (TOML; see hosts.example.toml)",
    )


def _add_json_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as one JSON document on stdout (messages go to stderr)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ddptui",
        description=(
            "A keyboard-driven console for multi-node PyTorch DDP: check every host over SSH, "
            "launch the bundled trainer with torchrun, watch it, stop it and resume it."
        ),
        epilog="Exit codes: 0 success or healthy, 1 unhealthy or failed, 2 usage or config error.",
    )
    parser.add_argument("--version", action="version", version=f"ddptui {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    config = commands.add_parser(
        "config",
        help="validate a hosts file and print the resolved configuration",
        description=(
            "Validate HOSTS and print the resolved configuration: defaults applied and the "
            "effective values for every host. Exit 0 when valid, 2 when not."
        ),
    )
    _add_hosts_argument(config)
    _add_json_flag(config, "the resolved configuration")

    init = commands.add_parser(
        "init",
        help="write a commented starter hosts file",
        description="Write a commented starter hosts file to PATH (default ./hosts.toml).",
    )
    init.add_argument("path", metavar="PATH", nargs="?", default=DEFAULT_HOSTS)
    init.add_argument("--force", action="store_true", help="overwrite an existing file")

    check = commands.add_parser(
        "check",
        help="check every host over SSH: versions, GPUs, network pitfalls",
        description=(
            "Connect to every host in parallel, probe it, and report what would stop DDP from "
            "working, each problem with a fix. Exit 0 healthy, 1 problems found, 2 bad input."
        ),
    )
    _add_hosts_argument(check)
    _add_json_flag(check, "the hosts, their facts and the findings")

    trust = commands.add_parser(
        "trust",
        help="show unknown host keys' fingerprints and add them to known_hosts",
        description=(
            "Fetch the host key of every host whose key is not yet known, show its SHA256 "
            "fingerprint and add it to the known_hosts file after confirmation. A key that "
            "differs from the one already recorded is never replaced."
        ),
    )
    _add_hosts_argument(trust)
    trust.add_argument("--yes", action="store_true", help="add every unknown key without asking")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from ddptui.errors import DdptuiError

    command = importlib.import_module(f"ddptui.commands.{args.command}")
    try:
        exit_code: int = command.run(args)
    except DdptuiError as error:
        from ddptui.untrusted import plain

        # Messages may quote a host's words or a hosts-file value: neither reaches the
        # terminal with its escape sequences live.
        print(f"ddptui {args.command}: {plain(str(error))}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(f"ddptui {args.command}: interrupted", file=sys.stderr)
        return 130
    return exit_code
