"""Validators for single values of the hosts file.

Each validator takes what the TOML parser produced and returns the typed value, or raises
:class:`Invalid` saying what was expected and what was found. Where in the file the value
sits is the caller's business (:mod:`ddptui.config.load`).
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from ddptui.config.found import describe, key_label

Validator = Callable[[object], Any]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HOSTNAME_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# C0 and C1 controls and DEL: no hosts-file value needs one, and each is a way to break a
# remote command line or a terminal (newline, ESC, CSI).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NO_CONTROL = "a string without control characters (newlines, tabs, escapes)"
# What an IPv6 zone (the part after %) may hold: interface names as Linux spells them.
_SCOPE_ID = re.compile(r"[A-Za-z0-9_.-]{1,15}")
# Linux caps interface names at IFNAMSIZ - 1 characters.
_MAX_IFNAME = 15

_NAME_RULE = "a name of letters, digits, '.', '_' or '-' (at most 64; a letter or digit first)"


class Invalid(Exception):
    """A value that does not fit. ``str()`` is the problem; ``subkey`` narrows the key.

    ``subkey`` is appended to the key in the message: ``".NCCL_DEBUG"`` for an ``env``
    entry, ``"[2]"`` for a list element.
    """

    def __init__(self, problem: str, subkey: str = "") -> None:
        super().__init__(problem)
        self.subkey = subkey


def expected(what: str, value: object, subkey: str = "") -> Invalid:
    return Invalid(f"expected {what}, found {describe(value)}", subkey)


def _string(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or _CONTROL.search(value):
        raise expected(what, value)
    return value


def _no_spaces(value: object, what: str) -> str:
    text = _string(value, what)
    if any(char.isspace() for char in text):
        raise expected(what, value)
    return text


def _integer(value: object, low: int, high: int | None, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise expected(what, value)
    if value < low or (high is not None and value > high):
        raise expected(what, value)
    return value


def _number(value: object, low: float, *, inclusive: bool, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise expected(what, value)
    number = float(value)
    if not math.isfinite(number) or number < low or (number == low and not inclusive):
        raise expected(what, value)
    return number


def user(value: object) -> str:
    return _no_spaces(value, "a user name (a string without spaces)")


def port(value: object) -> int:
    return _integer(value, 1, 65535, "an integer 1–65535")


def remote_path(value: object) -> str:
    """A path on the host; a leading ``~`` stays: the host's shell expands it."""
    return _string(value, "a path (a non-empty string)")


def python(value: object) -> str:
    return _string(value, "a Python executable: a path or a command (a non-empty string)")


def conda_env(value: object) -> str:
    what = "a conda environment name (a string without spaces or '/')"
    name = _no_spaces(value, what)
    if "/" in name:
        raise expected(what, value)
    return name


def env(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise expected('a table of environment variables, like { NAME = "value" }', value)
    variables: dict[str, str] = {}
    for name, item in value.items():
        subkey = f".{key_label(name)}"
        if not _ENV_NAME.fullmatch(name):
            raise Invalid(
                "expected an environment variable name (letters, digits and '_', "
                "not starting with a digit)",
                subkey,
            )
        if not isinstance(item, str):
            hint = f" — quote it: {json.dumps(str(item))}" if isinstance(item, (int, float)) else ""
            raise Invalid(f"expected a string, found {describe(item)}{hint}", subkey)
        if _CONTROL.search(item):
            raise expected(_NO_CONTROL, item, subkey)
        variables[name] = item
    return variables


def gpus(value: object) -> str | int | tuple[int, ...]:
    what = '"all", a number of GPUs ≥ 0, or a non-empty list of distinct GPU indices ≥ 0'
    if value == "all":
        return "all"
    if _is_index(value):
        return value
    if not isinstance(value, list) or not value:
        raise expected(what, value)
    indices: list[int] = []
    for position, item in enumerate(value):
        if not _is_index(item):
            raise expected("a GPU index (an integer ≥ 0)", item, f"[{position}]")
        if item in indices:
            raise Invalid(f"GPU {item} is listed twice", f"[{position}]")
        indices.append(item)
    return tuple(indices)


def _is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def socket_ifname(value: object) -> str:
    what = f"\"auto\" or a network interface name (1–{_MAX_IFNAME} characters, no spaces or '/')"
    name = _no_spaces(value, what)
    if len(name) > _MAX_IFNAME or "/" in name or name in {".", ".."}:
        raise expected(what, value)
    return name


def master_port(value: object) -> str | int:
    if value == "auto":
        return "auto"
    return _integer(value, 1, 65535, '"auto" or an integer 1–65535')


def backend(value: object) -> str:
    if not isinstance(value, str) or value not in ("auto", "nccl", "gloo"):
        raise expected('"auto", "nccl" or "gloo"', value)
    return value


def seconds(value: object) -> float:
    """A duration: ``connect_timeout``, ``torch_import_timeout``, ``max_clock_skew_s``,
    ``stop_grace_s``, ``hang_timeout_s``, ``window_s``."""
    return _number(value, 0, inclusive=False, what="a number of seconds > 0")


def max_parallel_connects(value: object) -> int:
    return _integer(value, 1, None, "an integer ≥ 1")


def min_free_disk_gb(value: object) -> float:
    return _number(value, 0, inclusive=True, what="a number of GB ≥ 0")


def name(value: object) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise expected(_NAME_RULE, value)
    return value


def address(value: object) -> str:
    what = "a hostname or an IP address"
    text = _no_spaces(value, what)
    if "@" in text:
        raise Invalid(f"expected {what}, found {describe(value)} — put the user in user = …")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        labels = text.removesuffix(".").split(".")
        if len(text) > 253 or not all(_HOSTNAME_LABEL.fullmatch(label) for label in labels):
            raise expected(what, value) from None
        return text
    # Python accepts any zone after "%"; the address ends up in commands and fix hints.
    scope = ip.scope_id if isinstance(ip, ipaddress.IPv6Address) else None
    if scope is not None and not _SCOPE_ID.fullmatch(scope):
        raise Invalid(
            f"expected {what}, found {describe(value)} — an IPv6 zone (after %) is an "
            "interface name: letters, digits, '_', '.' or '-'"
        )
    return text


def true_or_false(value: object) -> bool:
    if not isinstance(value, bool):
        raise expected("true or false", value)
    return value


def nproc_per_node(value: object) -> str | int:
    if value == "gpus":
        return "gpus"
    return _integer(value, 1, None, '"gpus" or an integer ≥ 1')


def checkpoint_every(value: object) -> int:
    return _integer(value, 1, None, "a number of steps ≥ 1")


def args(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise expected("an array of strings", value)
    for position, item in enumerate(value):
        if not isinstance(item, str):
            raise expected("a string", item, f"[{position}]")
        if _CONTROL.search(item):
            raise expected(_NO_CONTROL, item, f"[{position}]")
    return tuple(value)


def module(value: object) -> str:
    what = "a Python module name such as mypkg.train"
    if not isinstance(value, str) or not _MODULE.fullmatch(value):
        raise expected(what, value)
    return value


def patterns(value: object) -> tuple[str, ...]:
    """Paths to leave out, as lines of a ``.gitignore``."""
    return args(value)


def relative_globs(value: object) -> tuple[str, ...]:
    """Globs of files inside a directory: relative, never climbing out of it."""
    globs = args(value)
    for position, glob in enumerate(globs):
        if not glob or glob.startswith(("/", "~")) or ".." in glob.split("/"):
            raise expected("a glob relative to the script's directory", glob, f"[{position}]")
    return globs


def loss_pattern(value: object) -> str:
    """A regular expression with a group named ``loss`` (and optionally ``step``)."""
    text = _string(value, "a regular expression with a group named loss")
    try:
        compiled = re.compile(text)
    except re.error as error:
        raise Invalid(f"not a regular expression ({error}): {text!r}") from None
    if "loss" not in compiled.groupindex:
        raise Invalid(f"no group named loss in {text!r}: write (?P<loss>...) around the number")
    return text


def memory_per_process_gb(value: object) -> float:
    return _number(value, 0, inclusive=False, what="a number of GB > 0")


def max_upload_mb(value: object) -> float:
    return _number(value, 0, inclusive=False, what="a number of MiB > 0")


def on_hang(value: object) -> str:
    if not isinstance(value, str) or value not in ("wait", "stop"):
        raise expected('"wait" or "stop"', value)
    return value


def recovery_mode(value: object) -> str:
    if not isinstance(value, str) or value not in ("off", "resume"):
        raise expected('"off" or "resume"', value)
    return value


def max_restarts(value: object) -> int:
    return _integer(value, 0, None, "a number of restarts ≥ 0")


def min_nodes(value: object) -> int:
    return _integer(value, 1, None, "a number of nodes ≥ 1")


def command(value: object) -> tuple[str, ...]:
    """A command as its words, the program first: run as it is, with no shell to split or
    expand it, so that a word with spaces or ``$`` in it means just itself."""
    what = 'a command as an array of its words, such as ["/usr/local/bin/page-me", "--team"]'
    if not isinstance(value, list) or not value:
        raise expected(what, value)
    words = args(value)
    for position, word in enumerate(words):
        if not word:
            raise expected("a non-empty string", word, f"[{position}]")
    return words


def local_path(base_dir: Path) -> Validator:
    """A validator for a path on this machine: ``$VARS`` and ``~`` expanded, then made absolute.

    Relative paths are relative to ``base_dir`` (the hosts file's directory), so the file
    means the same thing whatever directory ddptui is started from.
    """

    def validate(value: object) -> Path:
        text = _string(value, "a path (a non-empty string)")
        try:
            expanded = Path(_expand_variables(text)).expanduser()
        except RuntimeError:
            user = text.split("/")[0]
            raise Invalid(f"cannot expand {user}: no such user or no home directory") from None
        return expanded if expanded.is_absolute() else base_dir / expanded

    return validate


def _expand_variables(text: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        variable = match.group("braced") if match.group("bare") is None else match.group("bare")
        if not _ENV_NAME.fullmatch(variable):
            raise Invalid(f"{match.group(0)!r} is not a valid variable reference")
        if variable not in os.environ:
            raise Invalid(f"${variable} is not set in the environment (found in {text!r})")
        return os.environ[variable]

    return _VARIABLE.sub(substitute, text)


# Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes and days-hours:minutes:seconds.
_SLURM_TIME = re.compile(r"\d+(?::\d\d){0,2}|\d+-\d+(?::\d\d){0,2}", re.ASCII)
_SLURM_NODES = re.compile(r"[A-Za-z0-9._\-\[\],]+")
_SBATCH_OWN: dict[str, str] = {
    "--nodes": "[slurm] nodes",
    "-N": "[slurm] nodes",
    "--gpus-per-node": "[slurm] gpus_per_node",
    "--partition": "[slurm] partition",
    "-p": "[slurm] partition",
    "--time": "[slurm] time",
    "-t": "[slurm] time",
    "--account": "[slurm] account",
    "-A": "[slurm] account",
    "--qos": "[slurm] qos",
    "-q": "[slurm] qos",
    "--constraint": "[slurm] constraint",
    "-C": "[slurm] constraint",
    "--exclude": "[slurm] exclude",
    "-x": "[slurm] exclude",
}
# Options whose value ddptui depends on: where Slurm writes the job's output, one task per node,
# the preemption signal, requeueing and the job's working directory.
_SBATCH_FIXED = (
    "--ntasks-per-node",
    "--ntasks",
    "-n",
    "--output",
    "-o",
    "--error",
    "-e",
    "--signal",
    "--requeue",
    "--no-requeue",
    "--chdir",
    "-D",
    "--parsable",
    "--wrap",
)


def slurm_nodes(value: object) -> int:
    return _integer(value, 1, None, "a number of nodes ≥ 1")


def spare_nodes(value: object) -> int:
    return _integer(value, 0, None, "a number of nodes ≥ 0")


def gpus_per_node(value: object) -> int:
    return _integer(value, 0, None, "a number of GPUs ≥ 0")


def slurm_name(value: object) -> str:
    return _no_spaces(value, "a name without spaces")


def slurm_constraint(value: object) -> str:
    return _sbatch_word(value, 'a Slurm constraint such as "a100&ib"')


def _sbatch_word(value: object, what: str) -> str:
    # An #SBATCH line is split at whitespace, and sbatch's own quoting differs from a shell's.
    text = _no_spaces(value, what)
    if any(quote in text for quote in "\"'"):
        raise Invalid(f"expected {what}, found {describe(value)}: no quotes")
    return text


def slurm_time(value: object) -> str:
    what = 'a Slurm time limit: "MINUTES", "HH:MM:SS" or "DAYS-HH:MM:SS"'
    if isinstance(value, str) and value.lower() in ("infinite", "unlimited"):
        return value
    if not isinstance(value, str) or not _SLURM_TIME.fullmatch(value):
        raise expected(what, value)
    return value


def slurm_exclude(value: object) -> tuple[str, ...]:
    """Node names or host lists (``gpu[07-09]``): one string, or an array of them."""
    names = args([value] if isinstance(value, str) else value)
    for position, text in enumerate(names):
        if not _SLURM_NODES.fullmatch(text):
            raise expected('node names such as "gpu07" or "gpu[07-09]"', text, f"[{position}]")
    return names


def sbatch_args(value: object) -> tuple[str, ...]:
    """Options for ``sbatch`` beyond the ``[slurm]`` keys; those ddptui sets are refused."""
    options = args(value)
    for position, option in enumerate(options):
        try:
            _sbatch_word(option, 'one option such as "--mem=0" (no spaces or quotes)')
        except Invalid as invalid:
            raise Invalid(str(invalid), f"[{position}]") from None
        # "-N3" is "-N 3": a short option's value may follow it at once.
        flag = option.split("=", 1)[0] if option.startswith("--") else option[:2]
        if flag in _SBATCH_OWN:
            raise Invalid(f"{option!r}: set it with {_SBATCH_OWN[flag]}", f"[{position}]")
        if flag in _SBATCH_FIXED:
            raise Invalid(f"{option!r}: ddptui sets {flag} itself for every run", f"[{position}]")
    return options
