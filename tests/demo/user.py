"""Running ``python -m ddptui`` as a user with no privileges and nothing set up: a throwaway
system user when the suite runs as root (as CI does), else the current user.

The throwaway user gets a private work directory (its ``HOME``, ``XDG_STATE_HOME`` and
``TMPDIR``, so every temporary file of the demo lands where the test can look) and a bare
environment. When this interpreter lives under a directory others may not enter (a pyenv under
``/root``), the commands run in a private mount namespace where only the interpreter's tree is
visible there: nothing on the machine changes.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


_FOREGROUND = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)
"""Runs its arguments with SIGINT at its default, as a shell runs a foreground command."""


@dataclass(frozen=True)
class DemoUser:
    name: str
    uid: int
    work: Path
    """Owned by the user: ``home/``, ``state/`` and ``tmp/`` inside."""
    throwaway: bool
    prefix: tuple[str, ...]
    """What runs a command as the user: runuser, under unshare where the interpreter is hidden."""

    @property
    def tmp(self) -> Path:
        return self.work / "tmp"

    @property
    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.work / "home"),
            "XDG_STATE_HOME": str(self.work / "state"),
            "TMPDIR": str(self.tmp),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "USER": self.name,
            "LOGNAME": self.name,
        }

    def argv(self, *args: str) -> list[str]:
        """``python -m ddptui ARGS`` as the user."""
        command = [sys.executable, "-m", "ddptui", *args]
        if not self.throwaway:
            return command
        pairs = [f"{key}={value}" for key, value in self.env.items()]
        return [*self.prefix, "runuser", "-u", self.name, "--", "env", "-i", *pairs, *command]

    def popen(self, *args: str) -> subprocess.Popen[str]:
        # A session of its own, so the test can interrupt it as a terminal's Ctrl-C would:
        # SIGINT to the foreground process group. And SIGINT handled as a shell leaves it for
        # a foreground job: a suite started in the background (`pytest &`) ignores SIGINT, and
        # every process it starts would inherit that.
        return subprocess.Popen(
            [sys.executable, "-c", _FOREGROUND, *self.argv(*args)],
            cwd=self.work,
            env=None if self.throwaway else {**os.environ, **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        process = self.popen(*args)
        stdout, stderr = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def processes(self) -> list[int]:
        """Every live process of the throwaway user (none to look for when it is us).

        Zombies have ended: a torchrun whose starter exited is reaped by PID 1, which on some
        machines (a VM's init that is no init) does so only now and then.
        """
        if not self.throwaway:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if not entry.name.isdigit() or entry.stat().st_uid != self.uid:
                    continue
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        return found


@contextlib.contextmanager
def demo_user() -> Iterator[DemoUser]:
    if os.geteuid() != 0:
        work = Path(tempfile.mkdtemp(prefix="ddptui-demo-test-"))
        try:
            for part in ("home", "state", "tmp"):
                (work / part).mkdir()
            yield DemoUser(pwd.getpwuid(os.getuid()).pw_name, os.getuid(), work, False, ())
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    name = f"ddptdemo{os.getpid()}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", name],
        check=True,
        capture_output=True,
    )
    entry = pwd.getpwnam(name)
    work = Path(tempfile.mkdtemp(prefix="ddptui-demo-test-"))
    user = DemoUser(name, entry.pw_uid, work, True, _unhide_prefix(work))
    try:
        for part in ("home", "state", "tmp"):
            (work / part).mkdir()
        for path in (work, *work.iterdir()):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        yield user
    finally:
        for pid in user.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["userdel", name], check=False, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def _unhide_prefix(work: Path) -> tuple[str, ...]:
    """``unshare`` arguments that show the interpreter and the checkout to other users, or none
    when they already can see them."""
    needed = [
        Path(sys.base_prefix).resolve(),
        Path(sys.prefix),
        Path(sys.executable).resolve().parent,
        REPO,
    ]
    hidden: dict[Path, list[Path]] = {}
    for path in needed:
        blocker = _hidden_above(path)
        if blocker is not None:
            hidden.setdefault(blocker, []).append(path)
    if not hidden:
        return ()
    lines = ["set -e"]
    stash = work / "mounts"
    for number, (blocker, paths) in enumerate(hidden.items()):
        # Park each needed tree, cover the closed directory with an open empty one, and put
        # the trees back at their own paths in it.
        for index, path in enumerate(paths):
            parked = stash / f"{number}-{index}"
            lines.append(f"mkdir -p {shlex.quote(str(parked))}")
            lines.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(parked))}")
        lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(blocker))}")
        for index, path in enumerate(paths):
            parked = stash / f"{number}-{index}"
            lines.append(f"mkdir -p {shlex.quote(str(path))}")
            lines.append(f"mount --bind {shlex.quote(str(parked))} {shlex.quote(str(path))}")
    lines.append('exec "$@"')
    return (
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        "\n".join(lines),
        "sh",
    )


def _hidden_above(path: Path) -> Path | None:
    """The outermost directory on the way to ``path`` that other users may not enter."""
    for directory in (*reversed(path.parents), path):
        if not directory.stat().st_mode & stat.S_IXOTH:
            return directory
    return None


def why_unusable(user: DemoUser) -> str | None:
    """Why the user cannot run ddptui with torch here, or None when it can."""
    argv = user.argv("--version")
    argv = [*argv[: argv.index("-m")], "-c", "import ddptui.cli, torch, asyncssh"]
    result = subprocess.run(argv, cwd=user.work, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        return f"{user.name} cannot import ddptui and torch: {result.stderr.strip()[-500:]}"
    return None
