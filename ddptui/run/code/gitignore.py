"""Whether git would ignore a path, decided from the text of ``.gitignore`` files.

ddptui uploads a job directory to the hosts and leaves out what git would ignore. Running git
is not an option (the directory need not be a repository, and git need not be installed), so
this module reproduces the matching of git's ``dir.c`` and ``wildmatch.c`` (gitignore(5)),
with the standard library only and no I/O: callers read the files and pass their lines.

Matching works on UTF-8 bytes, as git does: ``?`` and ``[...]`` match one byte, so ``?``
does not match ``é``. Each pattern becomes one compiled regular expression when it is added,
translated so that many ``*`` in one name do not make the engine backtrack polynomially in the
name's length (:func:`_translate`).

What is not modelled: ``core.ignorecase`` (matching is case-sensitive, git's default on a
case-sensitive file system); the index (git never ignores a tracked file; an upload has no
index); ``$GIT_DIR/info/exclude`` and ``core.excludesFile``, which are files to read, but
adding their lines first, as the root's, gives them git's precedence (below every .gitignore).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["IgnoreRules"]

# The characters after which git's wildmatch stops comparing literally (dir.c simple_length).
_GLOB_SPECIAL = b"*?[\\"

# git's own ctype (sane_ctype), ASCII only whatever the locale: its space class has no \v or \f.
_POSIX_CLASSES: dict[bytes, bytes] = {
    b"alnum": b"0-9A-Za-z",
    b"alpha": b"A-Za-z",
    b"blank": b"\t ",
    b"cntrl": b"\x01-\x1f\x7f",
    b"digit": b"0-9",
    b"graph": b"!-~",
    b"lower": b"a-z",
    b"print": b" -~",
    b"punct": b"!-/:-@\\[-`{-~",
    b"space": b"\t\n\r ",
    b"upper": b"A-Z",
    b"xdigit": b"0-9A-Fa-f",
}

# A whole-component ``**/``: zero or more directories. Each repetition must end at a slash, so
# the engine has one way to reach each slash, never a combinatorial number.
_ANY_DIRECTORIES = rb"(?:[^/]*/)*"
_ANY_TEXT = rb".*"
_ONE_STAR = rb"[^/]*"


def _encode(text: str) -> bytes:
    # surrogateescape gives back the bytes of a name that was decoded with it (os.fsdecode).
    return text.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class _Rule:
    """One pattern line: ``regex`` is matched in full against the basename (``basename_only``)
    or against the path relative to the directory of its .gitignore."""

    regex: re.Pattern[bytes]
    negated: bool
    directories_only: bool
    basename_only: bool


class IgnoreRules:
    """The patterns of the .gitignore files of one tree, each file's patterns relative to its
    own directory."""

    def __init__(self) -> None:
        self._rules_by_directory: dict[bytes, list[_Rule]] = {}

    def add(self, directory: str, lines: Iterable[str]) -> None:
        """Add the patterns of the .gitignore in `directory` ("" for the tree's root, else a POSIX
        relative path like "a/b").

        `lines` are the file's lines, with or without their line ends (``text.split("\\n")`` or
        iterating over the open file); the CR of a CRLF end and a byte order mark on the first
        line are dropped, as git drops them. Adding to the same directory twice appends, as if
        the second lines followed the first in one file.
        """
        key = _encode(directory.strip("/"))
        if key == b".":
            key = b""
        rules = self._rules_by_directory.setdefault(key, [])
        for number, line in enumerate(lines):
            text = line.removeprefix("\ufeff") if number == 0 else line
            rule = _parse_line(_encode(text))
            if rule is not None:
                rules.append(rule)

    def ignored(self, path: str, *, is_dir: bool) -> bool:
        """Whether `path` (POSIX, relative to the tree root, no leading/trailing slash) is
        ignored by the rules, as ``git check-ignore`` would say for that path itself.

        `is_dir` says whether the path is a directory (a symbolic link to one is not, for git):
        patterns with a trailing slash match directories only.

        Only the path's own name is matched. git also ignores everything inside an ignored
        directory, and a negation cannot re-include a path below one ("It is not possible to
        re-include a file if a parent directory of that file is excluded"); this method does not
        look at the parents, so callers must walk top-down and not descend into a directory for
        which it returns True, which is what git's own walk does. Likewise a .gitignore inside an
        ignored directory is never read by git, so callers should not add it.
        """
        if not path or path.startswith("/") or path.endswith("/"):
            raise ValueError(f"not a relative path without leading or trailing slash: {path!r}")
        components = _encode(path).split(b"/")
        basename = components[-1]
        # git's order: the deepest .gitignore first, and in each file the last matching line
        # decides, so a deeper file overrides a shallower one for everything below it.
        for depth in range(len(components) - 1, -1, -1):
            rules = self._rules_by_directory.get(b"/".join(components[:depth]))
            if not rules:
                continue
            relative = b"/".join(components[depth:])
            for rule in reversed(rules):
                if rule.directories_only and not is_dir:
                    continue
                subject = basename if rule.basename_only else relative
                if rule.regex.fullmatch(subject):
                    return not rule.negated
        return False


def _parse_line(line: bytes) -> _Rule | None:
    """The rule of one .gitignore line, or None for a line that matches nothing (dir.c
    add_patterns_from_buffer, trim_trailing_spaces and parse_path_pattern)."""
    line = line.removesuffix(b"\n").removesuffix(b"\r")
    if not line or line.startswith(b"#"):
        return None
    pattern = _trim_trailing_spaces(line)
    negated = pattern.startswith(b"!")
    if negated:
        pattern = pattern[1:]
    directories_only = pattern.endswith(b"/")
    if directories_only:
        pattern = pattern[:-1]
    if not pattern:
        return None
    basename_only = b"/" not in pattern
    if basename_only:
        body = _translate(pattern)
    else:
        # Anchored: a leading slash only says so. git compares the part before the first
        # wildcard literally and hands the rest to wildmatch as a pattern of its own, so a `**`
        # right after that part counts as the start of a pattern ("foo**/bar" matches
        # "foo/x/bar"); translating the two parts separately reproduces that.
        pattern = pattern.removeprefix(b"/")
        literal_length = len(pattern)
        for index, byte in enumerate(pattern):
            if byte in _GLOB_SPECIAL:
                literal_length = index
                break
        rest = _translate(pattern[literal_length:])
        body = None if rest is None else re.escape(pattern[:literal_length]) + rest
    if body is None:
        return None
    return _Rule(re.compile(body, re.DOTALL), negated, directories_only, basename_only)


def _trim_trailing_spaces(line: bytes) -> bytes:
    """Drop the spaces (not tabs) at the end of a line; one escaped by a backslash stays, and so
    do the spaces before it."""
    trailing_spaces_start: int | None = None
    index = 0
    while index < len(line):
        byte = line[index : index + 1]
        if byte == b" ":
            if trailing_spaces_start is None:
                trailing_spaces_start = index
        else:
            trailing_spaces_start = None
            if byte == b"\\":
                index += 1  # the escaped character, a space included, is kept
        index += 1
    return line if trailing_spaces_start is None else line[:trailing_spaces_start]


# One element of a pattern: a single-character matcher (regex source), or one of the markers.
_STAR = "*"
_ANY_DIRECTORIES_MARK = "**/"
_ANY_TEXT_MARK = "**"
_Token: TypeAlias = "str | bytes"


def _tokenize(glob: bytes) -> list[_Token] | None:
    """The elements of a wildmatch pattern (matched with WM_PATHNAME), or None where git's
    wildmatch aborts on it and so never matches: an unclosed ``[``, an unknown ``[:class:]``, a
    trailing backslash."""
    tokens: list[_Token] = []
    index = 0
    while index < len(glob):
        byte = glob[index : index + 1]
        if byte == b"*":
            end = index
            while end < len(glob) and glob[end : end + 1] == b"*":
                end += 1
            at_component_start = index == 0 or glob[index - 1 : index] == b"/"
            following = glob[end : end + 2]
            if end - index < 2 or not at_component_start:
                tokens.append(_STAR)  # other runs of asterisks are one `*`
            elif end == len(glob):
                tokens.append(_ANY_TEXT_MARK)  # trailing "/**": everything inside
            elif following.startswith(b"/"):
                tokens.append(_ANY_DIRECTORIES_MARK)
                end += 1
            elif following == b"\\/":
                # wildmatch tries "no directory" only before a plain slash, so "a/**\/b" needs
                # one; the escaped slash itself follows as a literal.
                tokens.append(_ANY_TEXT_MARK)
            else:
                tokens.append(_STAR)
            index = end
        elif byte == b"?":
            tokens.append(b"[^/]")
            index += 1
        elif byte == b"[":
            parsed = _parse_class(glob, index)
            if parsed is None:
                return None
            class_regex, index = parsed
            tokens.append(class_regex)
        elif byte == b"\\":
            if index + 1 == len(glob):
                return None
            tokens.append(re.escape(glob[index + 1 : index + 2]))
            index += 2
        else:
            tokens.append(re.escape(byte))
            index += 1
    return tokens


def _translate(glob: bytes) -> bytes | None:
    """A regular expression (for fullmatch) equivalent to git's wildmatch of `glob` with
    WM_PATHNAME, or None if git never matches it.

    A `*` that is followed, in the same path component, by a fixed-width run and then another
    `*` takes the leftmost place where that run matches, atomically: a later place could only
    leave the next `*` less to match, so nothing is lost, and the engine never retries, which
    keeps "*a*a*a*a*b" linear instead of polynomial in the name's length. Python 3.10 has no
    atomic groups; a lookahead that captures, followed by a backreference to the capture, is
    one.
    """
    tokens = _tokenize(glob)
    if tokens is None:
        return None
    parts: list[bytes] = []
    atomic_groups = 0
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if isinstance(token, bytes):
            parts.append(token)
        elif token == _ANY_DIRECTORIES_MARK:
            parts.append(_ANY_DIRECTORIES)
        elif token == _ANY_TEXT_MARK:
            parts.append(_ANY_TEXT)
        else:
            run: list[bytes] = []
            for following in tokens[index:]:
                if not isinstance(following, bytes) or following == b"/":
                    break
                run.append(following)
            if run and index + len(run) < len(tokens) and tokens[index + len(run)] == _STAR:
                name = b"a%d" % atomic_groups
                atomic_groups += 1
                parts.append(b"(?=(?P<%s>[^/]*?%s))(?P=%s)" % (name, b"".join(run), name))
                index += len(run)
            else:
                parts.append(_ONE_STAR)
    return b"".join(parts)


def _parse_class(glob: bytes, start: int) -> tuple[bytes, int] | None:
    """The regex of the bracket expression at ``glob[start] == "["`` and the index after it, or
    None where wildmatch aborts on it. Follows wildmatch.c: ``!`` or ``^`` negates; a ``]``
    first is a member; ``-`` between two members is a range (an empty one when reversed), a
    member otherwise; a backslash escapes; ``[:name:]`` is a POSIX class, ``[:`` without its
    ``:]`` a plain ``[``. A class never matches a slash."""
    index = start + 1
    if index >= len(glob):
        return None
    negated = glob[index : index + 1] in (b"!", b"^")
    if negated:
        index += 1
    members: list[bytes] = []
    previous: int | None = None  # the last single member, which may start a range
    while True:
        if index >= len(glob):
            return None
        byte = glob[index]
        current: int | None = byte
        if byte == ord("\\"):
            index += 1
            if index >= len(glob):
                return None
            current = glob[index]
            members.append(re.escape(bytes([current])))
        elif (
            byte == ord("-")
            and previous is not None
            and index + 1 < len(glob)
            and glob[index + 1] != ord("]")
        ):
            index += 1
            last = glob[index]
            if last == ord("\\"):
                index += 1
                if index >= len(glob):
                    return None
                last = glob[index]
            if previous <= last:
                members.append(re.escape(bytes([previous])) + b"-" + re.escape(bytes([last])))
            current = None
        elif glob[index : index + 2] == b"[:":
            name_start = index + 2
            close = glob.find(b"]", name_start)
            if close == -1:
                return None
            if close - name_start - 1 < 0 or glob[close - 1] != ord(":"):
                members.append(re.escape(b"["))  # not a class after all: scan on after the [
            else:
                posix_class = _POSIX_CLASSES.get(glob[name_start : close - 1])
                if posix_class is None:
                    return None
                members.append(posix_class)
                current = None
                index = close
        else:
            members.append(re.escape(bytes([byte])))
        previous = current
        index += 1
        if index < len(glob) and glob[index] == ord("]"):
            break
    # Never empty: a range, the only member that may add nothing, follows a member.
    body = b"".join(members)
    if negated:
        return b"[^/" + body + b"]", index + 1
    return b"(?!/)[" + body + b"]", index + 1
