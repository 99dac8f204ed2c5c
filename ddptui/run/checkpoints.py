"""The checkpoints a user's script writes in its working directory, carried over on resume.

The common pattern (rank 0 saves ``snapshot.pt`` where it runs; every rank loads it if it is
there) diverges on resume without shared storage: only node 0 holds the file, so the other
ranks start again from scratch. ``[job] checkpoint_files`` names those files (globs relative to
the working directory, the run's code directory); before a resume, each is copied from node 0
(where rank 0 saved it) to every node that lacks it or holds another copy: through this
machine, checksummed end to end, renamed into place. Without the key, a resume whose node 0
holds checkpoint-like files some node lacks is warned about.

Every host's listing is its word, and a host is heard only about itself:

- A listed path is carried only when the node agent's lister could have listed it under its
  glob (:func:`matches`): relative, in normal form, no ``..``. A listing that names anything
  else is garbage (:func:`ddptui.run.agent.answers.listed_files`).
- No file of the staged code (what the launch uploaded: the script, a ``torch.py`` shipped
  beside it) is ever replaced, and no Python module is carried (:data:`MODULE_SUFFIXES`),
  whoever offers it, node 0 included: the code directory is where the ranks import from.
- A file node 0 lacks (the Hugging Face Trainer's ``checkpoint-N/rng_state_<rank>.pth``, which
  each rank writes on its own host) is carried from the lowest node rank that holds it only
  into a directory where node 0 holds a listed file too, and never into the code's own
  directories, the top one included (the ranks' working directory): another node can neither
  start a checkpoint of its own nor add a file beside the code (a config the script reads).
- Which copy is newer is never asked of the hosts: node 0's is carried whatever another node
  claims, and no copy is dated after this machine's clock (with the hosts file's clock skew),
  nor a file node 0 lacks after the newest file node 0 holds beside it. A script that picks
  its newest checkpoint by mtime, or the framework by the number in its name, picks one node 0
  holds.

What node 0 holds is otherwise carried as it is: a checkpoint is code to a script that unpickles
it (``torch.load(weights_only=False)``), so a compromised node 0 reaches every rank through it,
with or without ddptui.

:func:`plan_copies`, :func:`matches`, :func:`only_on_node_0` and :func:`unmatched` are pure;
:data:`SEND` and :data:`RECEIVE` are the two small stdlib scripts a copy runs on the hosts.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

LIKELY_CHECKPOINTS = ("*.pt", "*.pth", "*.ckpt", "*.safetensors", "*/*.pt", "*/*.pth", "*/*.ckpt")
"""What is looked for without ``checkpoint_files``: two levels deep at most, since a data set
in the working directory can hold millions of files."""
MAX_LISTED = 1000
"""Files a node lists per glob."""
MAX_PATH_CHARS = 4096
"""Linux's PATH_MAX: no longer path can be opened, so none is listed for a copy."""

# What a path to copy never holds, although a file's name can: control characters (shown as
# escapes, never meant), backslashes (a separator to Windows tools) and lone surrogates (the
# lister's stand-in for bytes that are not UTF-8, which no command line can carry).
_UNCARRIABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\\\ud800-\udfff]")

# argv: the file. Its bytes, then their SHA-256 (64 hex digits) as it read them.
SEND = """\
import hashlib, sys
digest, out = hashlib.sha256(), sys.stdout.buffer
with open(sys.argv[1], "rb") as source:
    for chunk in iter(lambda: source.read(1 << 20), b""):
        digest.update(chunk)
        out.write(chunk)
out.write(digest.hexdigest().encode())
"""

# argv: the file, its size, its mtime. Reads what SEND writes; keeps it only when all of it
# arrived and its SHA-256 is the sender's, then dates it as planned (the source's mtime, or
# earlier: see plan_copies) and renames it into place.
RECEIVE = """\
import hashlib, json, os, sys
path, size, mtime = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
part = path + "." + os.urandom(4).hex() + ".part"
digest, left, source = hashlib.sha256(), size, sys.stdin.buffer
try:
    # Each level made, and the file, with a mode of its own: under umask 002 a group member
    # could replace a checkpoint every rank loads.
    missing, level = [], os.path.dirname(path)
    while level and not os.path.isdir(level):
        missing.append(level)
        level = os.path.dirname(level)
    for level in reversed(missing):
        try:
            os.mkdir(level, 0o755)
            os.chmod(level, 0o755)
        except FileExistsError:
            pass
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.fchmod(fd, 0o644)
    with open(fd, "wb") as out:
        while left:
            chunk = source.read(min(left, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
        out.flush()
        os.fsync(out.fileno())
    if left or source.read(64).decode("ascii", "replace") != digest.hexdigest():
        os.unlink(part)
        print(json.dumps({"error": "it arrived damaged, or changed while it was read"}))
        sys.exit(1)
    os.utime(part, (mtime, mtime))
    os.replace(part, path)
except OSError as error:
    if os.path.exists(part):
        os.unlink(part)
    print(json.dumps({"error": str(error)}))
    sys.exit(1)
print(json.dumps({"copied": size}))
"""


@dataclass(frozen=True)
class Held:
    """A file as one node holds it."""

    size: int
    mtime: float


@dataclass(frozen=True)
class Copy:
    """One file to copy from node ``source`` to each of ``targets``, dated ``held.mtime``."""

    path: str
    source: int
    targets: tuple[int, ...]
    held: Held


@dataclass(frozen=True)
class Refused:
    """A copy planned from node ``source`` to ``targets`` that is not made, and why not."""

    path: str
    source: int
    targets: tuple[int, ...]
    why: str


@dataclass(frozen=True)
class CopyPlan:
    """What :func:`plan_copies` copies, and what it refuses."""

    copies: list[Copy]
    refused: list[Refused]


MODULE_SUFFIXES = (".py", ".pyc", ".so")
"""What Python imports (every extension module's suffix ends in ``.so`` on Linux): under the
ranks' working directory, their ``sys.path[0]``, any of these can shadow a module."""

STAGED_CODE = "it is a file of the run's code, which only a launch stages"
MODULE = "it is a Python module, which a rank would import: no checkpoint is one"
AMONG_CODE = "node 0 lacks it, and the code's own directories take no file node 0 lacks"
APART_FROM_NODE_0 = "node 0 lacks it and holds nothing beside it: it is no part of a checkpoint"


def carriable(path: str) -> bool:
    """Whether ``path`` can name a file to copy: not too long to open, and no character a
    command line cannot carry or a person would misread."""
    return len(path) <= MAX_PATH_CHARS and not _UNCARRIABLE.search(path)


def matches(path: str, glob: str) -> bool:
    """Whether the node agent's lister (:func:`ddptui.onhost.cache.list_files`, pathlib's
    ``Path.glob`` on any Python from 3.8) can list ``path`` under ``glob``.

    Its paths are relative and in normal form: no empty, ``.`` or ``..`` part, no leading
    ``/``. The glob is matched part by part (empty and ``.`` parts dropped, as pathlib does):
    ``**`` is any number of directories; any other part matches one name by :mod:`fnmatch`,
    case-sensitively, ``*`` matching names that start with ``.`` too, as pathlib's does. Never
    narrower than the lister: a trailing ``**`` matches files as Python 3.13's does.
    """
    names = path.split("/")
    if any(name in ("", ".", "..") for name in names):
        return False
    parts = [part for part in glob.split("/") if part not in ("", ".")]
    # The positions in `names` the parts matched so far can end at: linear in both lengths,
    # whatever number of `**` the glob holds.
    ends = {0}
    for part in parts:
        if part == "**":
            ends = set(range(min(ends), len(names) + 1))
        else:
            ends = {end + 1 for end in ends if end < len(names) and fnmatchcase(names[end], part)}
        if not ends:
            return False
    return len(names) in ends


def plan_copies(
    listings: Mapping[int, Mapping[str, Held]], *, staged: Collection[str], latest: float
) -> CopyPlan:
    """What to copy, by node rank (``listings``: node → path → file): each file from node 0 (a
    file node 0 lacks: from the lowest node rank that holds it) to every other node that lacks
    it or holds another copy, as the module's rules allow; and what they refuse, and why.

    ``staged``: the paths of the run's code. ``latest``: the latest time a copy may be dated
    (this machine's clock, and the skew allowed between it and the hosts'). A copy's date is
    to the millisecond, as listed, so that a copy reads back equal and is not copied again.
    """
    head = listings.get(0, {})
    code_directories = {""} | {posixpath.dirname(path) for path in staged}
    newest_of_node_0: dict[str, float] = {}
    for path, file in head.items():
        directory = posixpath.dirname(path)
        newest_of_node_0[directory] = max(file.mtime, newest_of_node_0.get(directory, file.mtime))
    planned, refused = [], []
    for path in sorted({path for listing in listings.values() for path in listing}):
        holders = {rank: listing[path] for rank, listing in listings.items() if path in listing}
        source = min(holders)
        directory = posixpath.dirname(path)
        newest = latest if source == 0 else min(latest, newest_of_node_0.get(directory, latest))
        listed = holders[source]
        held = Held(listed.size, round(min(listed.mtime, newest), 3))
        targets = tuple(
            rank for rank in sorted(listings) if rank != source and listings[rank].get(path) != held
        )
        if not targets:
            continue
        if path in staged:
            refused.append(Refused(path, source, targets, STAGED_CODE))
        elif path.endswith(MODULE_SUFFIXES):
            refused.append(Refused(path, source, targets, MODULE))
        elif source != 0 and directory in code_directories:
            refused.append(Refused(path, source, targets, AMONG_CODE))
        elif source != 0 and directory not in newest_of_node_0:
            refused.append(Refused(path, source, targets, APART_FROM_NODE_0))
        else:
            planned.append(Copy(path, source, targets, held))
    return CopyPlan(planned, refused)


def only_on_node_0(listings: Mapping[int, Mapping[str, Held]]) -> list[str]:
    """The files node 0 holds that some other node lacks."""
    head = listings.get(0, {})
    return sorted(
        path
        for path in head
        if any(path not in listing for rank, listing in listings.items() if rank != 0)
    )


def unmatched(
    globs: Sequence[str], matched: Mapping[int, Mapping[str, Mapping[str, Held]]]
) -> list[str]:
    """The globs that match no file on any node (``matched``: node → glob → path → file)."""
    return [glob for glob in globs if not any(found.get(glob) for found in matched.values())]
