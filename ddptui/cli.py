"""The ``ddptui`` command line: argument parsing and lazy dispatch to ``ddptui.commands``.

Nothing heavy is imported at module level: ``ddptui --help`` must not pay for torch,
textual or asyncssh.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from ddptui import __version__
from ddptui.cli_help import HelpFormatter, examples_text

DEFAULT_HOSTS = "hosts.toml"
SHELLS = ("bash", "zsh", "fish")
PIPE_CLOSED = 141
"""Exit status when the output's reader went away: a shell's for a process ended by SIGPIPE."""


def _add_hosts_argument(parser: argparse.ArgumentParser) -> None:
    hosts = parser.add_argument(
        "hosts",
        metavar="HOSTS",
        nargs="?",
        default=DEFAULT_HOSTS,
        help=f"the hosts file (TOML; see hosts.example.toml; default ./{DEFAULT_HOSTS})",
    )
    hosts.completer = _complete_hosts_files  # type: ignore[attr-defined]


def _complete_hosts_files(prefix: str, **_: object) -> list[str]:
    """For the shell's completion: TOML files and directories under what was typed."""
    from pathlib import Path

    folder, _sep, start = prefix.rpartition("/")
    base = Path(folder or ".")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.name.startswith(start) or (entry.name.startswith(".") and not start):
            continue
        shown = f"{folder}/{entry.name}" if folder else entry.name
        if entry.is_dir():
            found.append(shown + "/")
        elif entry.suffix == ".toml":
            found.append(shown)
    return found


def _complete_runs(prefix: str, **_: object) -> list[str]:
    """For the shell's completion: the run ids in the store, newest first."""
    from ddptui.run.store import RunStore

    return [run for run in reversed(RunStore().ids()) if run.startswith(prefix)]


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
        epilog=(
            "Exit codes: 0 success, healthy or completed; 1 unhealthy or failed; 2 usage or "
            "config error; 3 run stopped by request."
        ),
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
        description=(
            "Write a commented starter hosts file to PATH (default ./hosts.toml). Exit 0 "
            "written, 2 when PATH exists (without --force) or cannot be written."
        ),
    )
    init.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        default=DEFAULT_HOSTS,
        help=f"where to write it (default ./{DEFAULT_HOSTS})",
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.add_argument(
        "--job",
        metavar="SCRIPT",
        help=(
            "your training script: [job] runs it, and for a Lightning, Hugging Face Trainer or "
            "Accelerate script, checkpoint_files and resume_args are set for its checkpoints"
        ),
    )

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
    check.add_argument(
        "--bandwidth",
        action="store_true",
        help=(
            "then measure the interconnect: all-reduce across the hosts (torchrun on each, as a "
            "launch), and each host with its ring neighbour; name a host whose links are slow"
        ),
    )

    trust = commands.add_parser(
        "trust",
        help="show unknown host keys' fingerprints and add them to known_hosts",
        description=(
            "Fetch the host key of every host whose key is not yet known, show its SHA256 "
            "fingerprint and add it to the known_hosts file after confirmation. A key that "
            "differs from the one already recorded is never replaced. Exit 0 when every "
            "host's key is known, 1 when one is not (declined, changed or not reached)."
        ),
    )
    _add_hosts_argument(trust)
    trust.add_argument("--yes", action="store_true", help="add every unknown key without asking")

    _add_run_commands(commands)
    _add_demo_command(commands)
    completion = commands.add_parser(
        "completion",
        help="print the shell code that completes ddptui's commands, hosts files and run ids",
        description=(
            "Print the code that makes SHELL complete ddptui's commands, options, hosts files "
            'and run ids: `eval "$(ddptui completion bash)"` in ~/.bashrc (zsh alike), '
            "`ddptui completion fish | source` in fish's config. Exit 0."
        ),
    )
    completion.add_argument("shell", choices=SHELLS, metavar="SHELL", help=", ".join(SHELLS))
    for name, command in commands.choices.items():
        command.formatter_class = HelpFormatter
        command.epilog = "\n\n".join(filter(None, (command.epilog, examples_text(name))))
    return parser


def _add_demo_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="the whole product on this machine: no sshd, GPU, root or hosts file needed",
        description=(
            "Serve N SSH hosts on 127.0.0.1 from this process, check them, launch the bundled "
            "trainer on every one (gloo on CPU) and open the console; --headless follows the "
            "run to its end instead. Quitting ends the hosts, the run and their files. "
            "Exit 0 completed, 1 failed, 3 stopped."
        ),
    )
    demo.add_argument(
        "--nodes", type=_positive, default=2, metavar="N", help="hosts to serve (default 2)"
    )
    demo.add_argument(
        "--procs", type=_positive, default=2, metavar="P", help="processes per host (default 2)"
    )
    demo.add_argument(
        "--steps",
        type=_steps,
        metavar="S",
        help="steps the demo's run trains for (default: about a minute's on 2 CPU cores)",
    )
    demo.add_argument(
        "--spare",
        action="store_true",
        help=(
            "serve one more host as a spare, with recovery on; x on the console's run screen "
            "kills a node's ranks, and the run resumes on the spare by itself"
        ),
    )
    demo.add_argument(
        "--headless",
        action="store_true",
        help="check, launch and print progress until the run ends, without the console",
    )


def _whole_number(high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to ``high``, or a usage error saying so."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = 0
        if not 1 <= number <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number 1–{high:,}, found {text!r}")
        return number

    return parse


_positive = _whole_number(16)
_steps = _whole_number(10**7)


def _add_follow_flags(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--headless",
        action="store_true",
        help=f"{verb}, then print progress every 2 s until the run ends (Ctrl-C detaches)",
    )
    parser.add_argument(
        "--detach", action="store_true", help=f"{verb} and return at once; the run goes on"
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="NCCL_DEBUG=INFO, TORCH_DISTRIBUTED_DEBUG=DETAIL, TORCH_SHOW_CPP_STACKTRACES=1",
    )


def _add_run_argument(parser: argparse.ArgumentParser) -> None:
    run = parser.add_argument(
        "run", metavar="RUN", nargs="?", help="a run id or a unique prefix (default: the latest)"
    )
    run.completer = _complete_runs  # type: ignore[attr-defined]


def _add_run_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    launch = commands.add_parser(
        "launch",
        help="check the hosts, then start the job with torchrun on every host",
        description=(
            "Check every host, plan one torchrun per host (static rendezvous), upload the "
            "code, and start every node detached so the run outlives this command. Refuses "
            "when the check finds errors, unless --force. A healthy check of the same hosts "
            "file from the last 5 minutes stands for a new one when no run started since "
            "still runs (--recheck checks again). Exit 0 completed, 1 failed, 2 bad input, "
            "3 stopped."
        ),
    )
    _add_hosts_argument(launch)
    _add_follow_flags(launch, "start the run")
    launch.add_argument("--force", action="store_true", help="launch despite check errors")
    launch.add_argument(
        "--recheck",
        action="store_true",
        help="check every host again even if a recent healthy check could stand",
    )
    launch.add_argument(
        "--dry-run",
        action="store_true",
        help="print each host's exact command and environment; start nothing",
    )
    launch.set_defaults(takes_passthrough=True, starts_a_run=True)
    launch.epilog = "-- ARGS: everything after -- goes to the trainer, after [job] args."

    status = commands.add_parser(
        "status",
        help="a run's state, ranks and processes",
        description=(
            "Show a run's state, attempts and progress; for a running run, ask every host "
            "which of its processes live. Exit 0 running or completed, 1 failed, 3 stopped."
        ),
    )
    _add_run_argument(status)
    _add_json_flag(status, "the run")

    stop = commands.add_parser(
        "stop",
        help="stop a run: checkpoint first, then SIGTERM, then SIGKILL",
        description=(
            "Ask the trainer to checkpoint and stop, wait up to [job] stop_grace_s, then "
            "SIGTERM and SIGKILL what is left; confirm no process of the run remains. Exit 0 "
            "stopped (or already ended), 1 when the stop could not be confirmed."
        ),
    )
    _add_run_argument(stop)
    stop.add_argument("--kill", action="store_true", help="skip the checkpoint: SIGTERM at once")

    dump = commands.add_parser(
        "dump",
        help="every rank's Python stacks, from every host at once, the odd ones first",
        description=(
            "Ask every rank of a running run for its Python stacks (all threads; py-spy where "
            "installed, else a handler ddptui puts in each rank), group the ranks that do the "
            "same thing and show the odd ones first; read the ranks' flight-recorder dumps (of "
            "a finished run too). Exit 0 when stacks or dumps came, 1 when none did."
        ),
    )
    _add_run_argument(dump)
    _add_json_flag(dump, "the groups")

    resume = commands.add_parser(
        "resume",
        help="start a stopped or failed run again from its latest checkpoint",
        description=(
            "Start a new attempt of a stopped or failed run on the same hosts, with [job] "
            "resume_args (the trainer's --resume latest). Hosts that recovery set aside stay "
            "out of the run; --with HOST takes one back as a spare. Exit 0 completed or "
            "detached, 1 failed or refused (the run still runs), 2 when the hosts file needs a "
            "change, 3 stopped."
        ),
    )
    _add_run_argument(resume)
    resume.add_argument(
        "--with",
        dest="bring_back",
        action="append",
        default=[],
        metavar="HOST",
        help="a host recovery set aside, usable again (as a spare); may be repeated",
    )
    _add_follow_flags(resume, "resume the run")

    logs = commands.add_parser(
        "logs",
        help="print a run's logs (every rank's stdout and stderr, torchrun's output)",
        description=(
            "Print a run's logs from every host; --follow keeps printing new lines. Exit 0, "
            "2 for a run id that names no run."
        ),
    )
    _add_run_argument(logs)
    logs.add_argument("--rank", type=int, metavar="N", help="only global rank N")
    logs.add_argument("--follow", action="store_true", help="keep printing until the run ends")
    logs.add_argument(
        "--events",
        action="store_true",
        help="also print every rank's events (while it runs, a fast rank's steps every 1–2 s)",
    )
    logs.add_argument(
        "--errors",
        action="store_true",
        help="print the classified errors (cause and fix, first failing rank first) instead",
    )

    runs = commands.add_parser(
        "runs",
        help="list past and current runs",
        description="List the runs in the run store, newest last. Exit 0.",
    )
    _add_json_flag(runs, "the runs")


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    return next(
        list(action.choices)
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    )


def _opens_console(words: list[str], parser: argparse.ArgumentParser) -> bool:
    """``ddptui`` alone or ``ddptui HOSTS``: a first word that is neither an option nor a
    subcommand names the hosts file to open the console on."""
    if not words:
        return True
    return len(words) == 1 and not words[0].startswith("-") and words[0] not in _commands(parser)


def _console_refusal(words: list[str], parser: argparse.ArgumentParser) -> str | None:
    """Why the console does not open, or None.

    A word that names no file and looks like no path is a mistyped command far more often
    than a hosts file yet to be written (``ddptui stauts``). And the console draws on a
    terminal and reads its keys: without one it would wait forever for keys that never
    come, writing escape sequences into a log.
    """
    from pathlib import Path

    if words and not Path(words[0]).exists() and not _looks_like_a_path(words[0]):
        import difflib

        close = difflib.get_close_matches(words[0], _commands(parser), n=1, cutoff=0.6)
        hint = f"; did you mean `ddptui {close[0]}`?" if close else ""
        return (
            f"{words[0]!r} is neither a command nor a hosts file{hint} "
            "(`ddptui --help` lists the commands)"
        )
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return (
            "the console needs a terminal, and stdin or stdout is not one; without it, use "
            "`ddptui check HOSTS`, `ddptui launch HOSTS --headless` or `ddptui status`"
        )
    return None


def _looks_like_a_path(word: str) -> bool:
    return "/" in word or word.endswith(".toml") or word.startswith(".")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:
        # The shell asks for completions (argcomplete's protocol): answered, then exit.
        import argcomplete

        argcomplete.autocomplete(parser)
    words = list(sys.argv[1:] if argv is None else argv)
    if _opens_console(words, parser):
        refusal = _console_refusal(words, parser)
        if refusal is not None:
            from ddptui.untrusted import plain

            print(f"ddptui: {plain(refusal, one_line=True)}", file=sys.stderr)
            return 2
        from pathlib import Path

        from ddptui.ui.app import run_console

        return run_console(Path(words[0]) if words else None)
    # Split here: argparse treats options after "--" inside a subcommand as its own again.
    passthrough: list[str] = []
    if "--" in words:
        cut = words.index("--")
        words, passthrough = words[:cut], words[cut + 1 :]
    args = parser.parse_args(words)
    if passthrough and not getattr(args, "takes_passthrough", False):
        parser.error(f"unexpected arguments after --: {' '.join(passthrough)}")
    args.passthrough = passthrough
    args.standby = None
    if getattr(args, "starts_a_run", False) and not args.dry_run:
        # Before the command's own imports: the run's supervisor imports meanwhile.
        from ddptui.run.standby import Standby

        args.standby = Standby.start()
    from ddptui.errors import DdptuiError

    command = importlib.import_module(f"ddptui.commands.{args.command}")
    try:
        exit_code: int = command.run(args)
    except BrokenPipeError:
        # `ddptui status --json | head`: the reader has what it wanted. What is left to write
        # goes nowhere, so the flush at exit raises nothing either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return PIPE_CLOSED
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
