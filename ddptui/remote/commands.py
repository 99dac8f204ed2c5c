"""Remote command lines, built from argv lists, and what came back from running one.

sshd runs every command through the user's login shell, which need not be POSIX: fish and
tcsh read quotes, backslashes and newlines their own way. So the login shell only ever sees
``sh -c '<one line>'`` whose one line holds nothing it could read differently, and the
command itself (each argv quoted with :func:`shlex.join`) reaches ``sh`` intact; nothing is
ever pasted into a string.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddptui.config.model import HostConfig
from ddptui.remote.status import Reach, Reachability

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Where conda is looked for, in order: a non-interactive SSH shell rarely has it on PATH,
# because `conda init` edits .bashrc after its "not interactive: return" line.
_CONDA_SCRIPT = """\
env_name=$1; shift
for conda in "$(command -v conda)" "$HOME/miniconda3/bin/conda" "$HOME/anaconda3/bin/conda" \
"$HOME/miniforge3/bin/conda"; do
  if [ -x "$conda" ]; then
    exec "$conda" run --no-capture-output -n "$env_name" python "$@"
  fi
done
echo "conda: not found on PATH nor in ~/miniconda3, ~/anaconda3, ~/miniforge3" >&2
exit 127"""

# $0 is the path below $HOME: the remote shell never sees a bare "~" it could mis-expand.
_HOME_SCRIPT = 'exec "$HOME/$0" "$@"'

# `conda run -n NAME` for an environment that does not exist exits 1 with one of these
# (conda ≥ 4.6 / older releases), not 127.
_CONDA_ENV_MISSING = re.compile(
    r"EnvironmentLocationNotFound|Could not find conda environment", re.IGNORECASE
)

_NOT_FOUND = 127
_NOT_EXECUTABLE = 126


@dataclass(frozen=True)
class Overflow:
    """A command sent more than ``limit`` bytes on ``stream`` and was hung up on."""

    stream: str
    limit: int

    def __str__(self) -> str:
        return f"sent more than {_size(self.limit)} on {self.stream}"


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} bytes"


@dataclass(frozen=True)
class CommandResult:
    """A finished remote command.

    ``exit_status`` is None when the command's fate is unknown: the connection dropped, could
    not be made (``reach`` says why), the command timed out, or it sent more than the
    caller's cap (``overflow``; the output kept is what came before). None never means
    success.
    """

    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    reach: Reachability | None = None
    overflow: Overflow | None = None

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def python_argv(host: HostConfig, *args: str) -> list[str]:
    """The argv that runs ``host``'s Python with ``args``.

    - ``conda_env`` set: ``conda run --no-capture-output -n ENV python ARGS`` (``python`` is
      then ignored), with conda found on PATH or in ``~/miniconda3``, ``~/anaconda3`` or
      ``~/miniforge3``; exit 127 when there is none.
    - ``python`` starting with ``~/``: that path under the remote ``$HOME``.
    - otherwise ``python`` as given: a name looked up on the remote PATH, or a path.
    """
    if host.conda_env is not None:
        return ["sh", "-c", _CONDA_SCRIPT, "ddptui-conda", host.conda_env, *args]
    if host.python.startswith("~/"):
        return ["sh", "-c", _HOME_SCRIPT, host.python[2:], *args]
    return [host.python, *args]


def command_line(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The remote command string for ``argv``, with ``env`` exported first.

    The :func:`posix_script` travels base64-encoded inside ``sh -c 'eval "$(echo … |
    base64 -d)"'``: letters, digits and ``+/=`` mean the same to every login shell (sh, bash,
    zsh, fish, tcsh), whatever quotes, backslashes, newlines or ``=`` the values hold.
    """
    encoded = base64.b64encode(posix_script(argv, env).encode("utf-8")).decode("ascii")
    return f"sh -c 'eval \"$(echo {encoded} | base64 -d)\"'"


def posix_script(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """``export NAME='value' …; exec 'argv0' 'arg' …``: what :func:`command_line` runs, as a
    person reads it (``--dry-run``, logs).

    Shell assignments rather than ``env NAME=value cmd``, which would read a command
    containing ``=`` as one more assignment. SSH's own environment requests are refused by
    sshd unless listed in its AcceptEnv, so variables travel in the command instead.
    """
    if not argv:
        raise ValueError("empty argv")
    exports = []
    for name, value in (env or {}).items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        exports.append(f"{name}={shlex.quote(value)}")
    script = f"exec {shlex.join(argv)}"
    return f"export {' '.join(exports)}; {script}" if exports else script


def classify_python_failure(host: HostConfig, result: CommandResult) -> Reachability | None:
    """``PYTHON_MISSING`` when a :func:`python_argv` command could not start its interpreter.

    The remote shell exits 127 for a program it cannot find (and 126 for one it cannot
    execute), and conda says so when the environment does not exist; anything else is the
    program's own exit status, and None is returned.
    """
    missing_env = host.conda_env is not None and _CONDA_ENV_MISSING.search(result.stderr)
    if result.exit_status not in (_NOT_FOUND, _NOT_EXECUTABLE) and not missing_env:
        return None
    interpreter = f"conda env {host.conda_env!r}" if host.conda_env else host.python
    lines = result.stderr.strip().splitlines()
    why = lines[-1] if lines else f"exit status {result.exit_status}"
    return Reachability(
        Reach.PYTHON_MISSING,
        f"{host.name}: cannot start {interpreter}: {why}; set python or conda_env for this host",
    )
