"""The checkpoints a user's script writes in its working directory, carried over on resume.

The common pattern (rank 0 saves ``snapshot.pt`` where it runs; every rank loads it if it is
there) diverges on resume without shared storage: only node 0 holds the file, so the other
ranks start again from scratch. ``[job] checkpoint_files`` names those files (globs relative to
the working directory, the run's code directory); before a resume, each is copied from node 0
(where rank 0 saved it; the lowest node rank that holds it where node 0 does not) to every node
that lacks it or holds another copy: through this machine, checksummed end to end, renamed into
place. Which copy is newer is never asked of the hosts: a node that claimed a later mtime would
have its file, whatever it holds, loaded by every rank. Without
the key, a resume whose node 0 holds checkpoint-like files some node lacks is warned about.

:func:`copies` and :func:`only_on_node_0` are pure; :data:`SEND` and :data:`RECEIVE` are the two
small stdlib scripts a copy runs on the hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LIKELY_CHECKPOINTS = ("*.pt", "*.pth", "*.ckpt", "*.safetensors", "*/*.pt", "*/*.pth", "*/*.ckpt")
"""What is looked for without ``checkpoint_files``: two levels deep at most, since a data set
in the working directory can hold millions of files."""
MAX_LISTED = 1000
"""Files a node lists per glob."""

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
# arrived and its SHA-256 is the sender's, then gives it the source's mtime (so that the newest
# copy stays the newest) and renames it into place.
RECEIVE = """\
import hashlib, json, os, sys
path, size, mtime = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
part = path + "." + os.urandom(4).hex() + ".part"
digest, left, source = hashlib.sha256(), size, sys.stdin.buffer
try:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(part, "wb") as out:
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
    """One file to copy from node ``source`` to each of ``targets``."""

    path: str
    source: int
    targets: tuple[int, ...]
    held: Held


def copies(listings: Mapping[int, Mapping[str, Held]]) -> list[Copy]:
    """What to copy, by node rank: each file from node 0, or the lowest node rank that holds
    it, to every node that lacks it or holds another copy."""
    planned = []
    for path in sorted({path for listing in listings.values() for path in listing}):
        holders = {rank: listing[path] for rank, listing in listings.items() if path in listing}
        source = min(holders)
        held = holders[source]
        targets = tuple(rank for rank in sorted(listings) if holders.get(rank) != held)
        if targets:
            planned.append(Copy(path, source, targets, held))
    return planned


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
