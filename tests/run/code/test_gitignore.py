"""The .gitignore matcher (:mod:`ddptui.run.code.gitignore`): each rule of gitignore(5), then
agreement with the real ``git check-ignore`` on a nested tree and on a battery of tricky
patterns."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from ddptui.run.code.gitignore import IgnoreRules


def _rules(*lines: str, directory: str = "") -> IgnoreRules:
    rules = IgnoreRules()
    rules.add(directory, lines)
    return rules


def _file_ignored(lines: Iterable[str], path: str) -> bool:
    return _rules(*lines).ignored(path, is_dir=False)


# --- Lines: comments, blanks, escapes, trailing spaces ----------------------------------------


def test_comments_and_blank_lines_are_skipped() -> None:
    rules = _rules("# notes", "", "   ", "#*")
    assert not rules.ignored("# notes", is_dir=False)
    assert not rules.ignored("notes", is_dir=False)
    assert not rules.ignored("anything", is_dir=True)


def test_a_backslash_escapes_a_leading_hash_or_bang() -> None:
    assert _file_ignored([r"\#notes"], "#notes")
    assert _file_ignored([r"\!bang"], "!bang")
    assert not _file_ignored([r"\!bang"], "bang")


def test_trailing_spaces_are_dropped_unless_escaped() -> None:
    assert _file_ignored(["name   "], "name")
    assert not _file_ignored(["name   "], "name ")
    assert _file_ignored(["name\\ "], "name ")
    assert not _file_ignored(["name\\ "], "name")
    assert _file_ignored(["name\\  "], "name ")  # the escaped space stays, the next one goes
    assert _file_ignored(["name\t"], "name\t")  # only spaces are trimmed, not tabs


def test_line_ends_crlf_and_byte_order_mark_are_dropped() -> None:
    rules = _rules("\ufeff*.tmp\r\n", "*.bak\n", "*.old\r")
    assert rules.ignored("a.tmp", is_dir=False)
    assert rules.ignored("a.bak", is_dir=False)
    assert rules.ignored("a.old", is_dir=False)


def test_a_trailing_backslash_never_matches() -> None:
    assert not _file_ignored(["name\\"], "name\\")
    assert not _file_ignored(["name\\"], "name")


def test_a_lone_slash_or_bang_matches_nothing() -> None:
    for line in ("/", "!", "!/"):
        assert not _rules(line).ignored("a", is_dir=True)


# --- Negation and precedence -------------------------------------------------------------------


def test_a_later_negation_reincludes_and_a_later_pattern_wins_again() -> None:
    assert not _file_ignored(["*.log", "!keep.log"], "keep.log")
    assert _file_ignored(["*.log", "!keep.log"], "other.log")
    assert _file_ignored(["!keep.log", "*.log"], "keep.log")


def test_a_deeper_gitignore_overrides_a_shallower_one_below_it() -> None:
    rules = IgnoreRules()
    rules.add("", ["*.txt"])
    rules.add("sub", ["!keep.txt"])
    assert rules.ignored("keep.txt", is_dir=False)
    assert not rules.ignored("sub/keep.txt", is_dir=False)
    assert not rules.ignored("sub/deeper/keep.txt", is_dir=False)
    assert rules.ignored("sub/other.txt", is_dir=False)

    # The deeper file wins even when the root file is added later.
    rules = IgnoreRules()
    rules.add("sub", ["*.tmp"])
    rules.add("", ["!*.tmp"])
    assert rules.ignored("sub/x.tmp", is_dir=False)
    assert not rules.ignored("x.tmp", is_dir=False)


def test_a_nested_gitignore_applies_only_below_its_directory() -> None:
    rules = _rules("*.tmp", "sub", directory="sub")
    assert rules.ignored("sub/x.tmp", is_dir=False)
    assert rules.ignored("sub/a/x.tmp", is_dir=False)
    assert not rules.ignored("other/x.tmp", is_dir=False)
    assert not rules.ignored("x.tmp", is_dir=False)
    assert not rules.ignored("sub", is_dir=True)  # its own directory is its parent's business
    assert rules.ignored("sub/sub", is_dir=True)


def test_adding_to_a_directory_twice_appends() -> None:
    rules = IgnoreRules()
    rules.add("", ["*.log"])
    rules.add("", ["!keep.log"])
    assert not rules.ignored("keep.log", is_dir=False)
    assert rules.ignored("other.log", is_dir=False)


def test_directory_spellings_of_the_root() -> None:
    for root in ("", ".", "/"):
        assert _rules("/top", directory=root).ignored("top", is_dir=False)


# --- Directories only, anchoring, basename matching ----------------------------------------------


def test_a_trailing_slash_matches_directories_only() -> None:
    rules = _rules("build/")
    assert rules.ignored("build", is_dir=True)
    assert rules.ignored("a/b/build", is_dir=True)
    assert not rules.ignored("build", is_dir=False)
    assert not rules.ignored("a/build", is_dir=False)


def test_a_pattern_without_slash_matches_the_name_at_any_depth() -> None:
    rules = _rules("foo")
    assert rules.ignored("foo", is_dir=False)
    assert rules.ignored("a/b/foo", is_dir=True)
    assert not rules.ignored("foo.c", is_dir=False)
    assert not rules.ignored("a/foo/b", is_dir=False)  # the parent is the walk's business


def test_a_leading_or_middle_slash_anchors_to_the_gitignore_directory() -> None:
    rules = _rules("/build", "doc/frotz")
    assert rules.ignored("build", is_dir=True)
    assert not rules.ignored("a/build", is_dir=True)
    assert rules.ignored("doc/frotz", is_dir=False)
    assert not rules.ignored("a/doc/frotz", is_dir=False)

    nested = _rules("/top", "b/c", directory="a")
    assert nested.ignored("a/top", is_dir=False)
    assert not nested.ignored("a/x/top", is_dir=False)
    assert not nested.ignored("top", is_dir=False)
    assert nested.ignored("a/b/c", is_dir=False)
    assert not nested.ignored("b/c", is_dir=False)
    assert not nested.ignored("a/x/b/c", is_dir=False)


# --- Wildcards ---------------------------------------------------------------------------------


def test_star_matches_anything_but_a_slash() -> None:
    assert _file_ignored(["a/*.txt"], "a/x.txt")
    assert _file_ignored(["a/*.txt"], "a/.txt")
    assert not _file_ignored(["a/*.txt"], "a/b/x.txt")
    assert _file_ignored(["*"], "a/b/anything")
    assert _file_ignored(["*/foo"], "x/foo")
    assert not _file_ignored(["*/foo"], "x/y/foo")


def test_question_mark_matches_one_character_but_not_a_slash() -> None:
    assert _file_ignored(["?.txt"], "a.txt")
    assert not _file_ignored(["?.txt"], "ab.txt")
    assert not _file_ignored(["?.txt"], ".txt")
    assert _file_ignored(["x/a?c"], "x/abc")
    assert not _file_ignored(["x/a?c"], "x/a/c")


def test_wildcards_match_bytes_of_utf8_as_git_does() -> None:
    assert not _file_ignored(["caf?.txt"], "café.txt")
    assert _file_ignored(["caf??.txt"], "café.txt")
    assert _file_ignored(["café.txt"], "café.txt")
    assert _file_ignored(["?"], "\udcff")  # a name that is not UTF-8, as os.fsdecode gives it


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        ("[abc].txt", ["a.txt", "c.txt"], ["d.txt", "ab.txt"]),
        ("[!abc].txt", ["d.txt", "1.txt"], ["a.txt"]),
        ("[^abc].txt", ["d.txt"], ["b.txt"]),
        ("[a-c]x", ["ax", "bx", "cx"], ["dx", "-x"]),
        ("[a-c-e]x", ["bx", "-x", "ex"], ["dx"]),
        ("[c-a]x", ["cx"], ["ax", "bx", "-x"]),  # c, then an empty range
        ("[]]x", ["]x"], ["x"]),
        ("[!]]x", ["ax"], ["]x"]),
        ("[a-]x", ["ax", "-x"], ["bx"]),
        ("[-a]x", ["ax", "-x"], ["bx"]),
        (r"[\]a]x", ["]x", "ax"], ["\\x"]),
        (r"[\!]x", ["!x"], ["ax"]),
        ("[[:digit:]]*", ["1abc", "9"], ["abc"]),
        ("[[:alpha:][:digit:]]", ["a", "Z", "5"], ["_", "é"]),
        ("[[:space:]]", [" ", "\t", "\n", "\r"], ["\x0b", "a"]),
        ("[[:punct:]]", [".", "!", "~"], ["a", " "]),
        ("[[:]]x", ["[]x", ":]x"], ["x", "]x"]),
    ],
)
def test_bracket_expressions(pattern: str, matching: list[str], not_matching: list[str]) -> None:
    rules = _rules(pattern)
    for name in matching:
        assert rules.ignored(name, is_dir=False), name
    for name in not_matching:
        assert not rules.ignored(name, is_dir=False), name


def test_a_class_never_matches_a_slash() -> None:
    assert not _file_ignored(["a[!x]b"], "a/b")
    assert not _file_ignored(["a[.-0]b"], "a/b")  # a range that spans "/"
    assert _file_ignored(["a[.-0]b"], "a0b")


@pytest.mark.parametrize("pattern", ["[", "a[", "[ab", "[!]", "[\\", "[[:nope:]]", "[[:alpha:]"])
def test_a_malformed_class_never_matches_as_git_aborts_on_it(pattern: str) -> None:
    rules = _rules(pattern)
    for name in ("[", "a[", "[ab", "a", "b", "[!]", "[\\", "[[:nope:]]", "[[:alpha:]"):
        assert not rules.ignored(name, is_dir=False), name


def test_escaped_wildcards_are_literal() -> None:
    assert _file_ignored([r"\*"], "*")
    assert not _file_ignored([r"\*"], "a")
    assert _file_ignored([r"\?"], "?")
    assert not _file_ignored([r"\?"], "a")
    assert _file_ignored([r"\[a]"], "[a]")
    assert not _file_ignored([r"\[a]"], "a")
    assert _file_ignored([r"\a"], "a")


# --- Double asterisks --------------------------------------------------------------------------


def test_leading_double_star_matches_in_all_directories() -> None:
    rules = _rules("**/foo", "**/bar/baz")
    for path in ("foo", "a/foo", "a/b/foo"):
        assert rules.ignored(path, is_dir=False), path
    assert rules.ignored("bar/baz", is_dir=False)
    assert rules.ignored("x/y/bar/baz", is_dir=False)
    assert not rules.ignored("bar/x/baz", is_dir=False)
    assert not rules.ignored("xfoo", is_dir=False)


def test_trailing_double_star_matches_everything_inside() -> None:
    rules = _rules("abc/**")
    assert rules.ignored("abc/x", is_dir=False)
    assert rules.ignored("abc/x/y/z", is_dir=True)
    assert not rules.ignored("abc", is_dir=True)
    assert not rules.ignored("x/abc/y", is_dir=False)


def test_middle_double_star_matches_zero_or_more_directories() -> None:
    rules = _rules("a/**/b")
    for path in ("a/b", "a/x/b", "a/x/y/b"):
        assert rules.ignored(path, is_dir=False), path
    for path in ("ab", "a/xb", "a/x/b/c", "x/a/b"):
        assert not rules.ignored(path, is_dir=False), path
    assert _file_ignored(["a/**/**/b"], "a/b")
    assert _file_ignored(["a/***/b"], "a/x/y/b")


def test_other_double_stars_are_single_stars() -> None:
    assert _file_ignored(["x/a**b"], "x/aqqb")
    assert not _file_ignored(["x/a**b"], "x/aq/b")
    assert _file_ignored(["**b"], "y/aqb")
    assert _file_ignored(["x/**b"], "x/aqb")
    assert not _file_ignored(["x/**b"], "x/a/qb")


def test_double_star_right_after_the_literal_start_spans_directories_as_in_git() -> None:
    # git compares an anchored pattern's text before the first wildcard literally and gives
    # the rest to wildmatch as a pattern of its own, whose leading "**/" is special.
    assert _file_ignored(["foo**/bar"], "foo/x/bar")
    assert _file_ignored(["foo**/bar"], "foox/y/bar")
    assert _file_ignored(["a/b**"], "a/bc/d")
    assert not _file_ignored(["a/b**"], "a/x")


def test_double_star_before_an_escaped_slash_needs_a_directory() -> None:
    assert _file_ignored(["a/**\\/b"], "a/c/b")
    assert not _file_ignored(["a/**\\/b"], "a/b")


def test_many_stars_against_a_long_name_stay_fast() -> None:
    rules = _rules("*a*a*a*a*a*a*a*b", "**/*a*a*a*a*a*a*/**/*a*a*a*c")
    name = "a" * 250
    started = time.perf_counter()
    assert not rules.ignored(name, is_dir=False)
    assert not rules.ignored(f"{name}/{name}/{name}/{name}", is_dir=False)
    assert rules.ignored(name + "b", is_dir=False)
    assert time.perf_counter() - started < 1.0  # a backtracking translation takes hours


def test_paths_must_be_relative_without_surrounding_slashes() -> None:
    rules = _rules("*")
    for path in ("", "/a", "a/"):
        with pytest.raises(ValueError):
            rules.ignored(path, is_dir=False)


# --- Agreement with git ------------------------------------------------------------------------

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git_env(home: Path) -> dict[str, str]:
    # No GIT_DIR or the like from a surrounding hook, and no user or system configuration,
    # whose core.excludesFile would add patterns.
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
    )
    return env


def _git_ignored(tree: Path, home: Path, paths: Iterable[str]) -> set[str]:
    """The paths that ``git check-ignore --no-index`` calls ignored (a path below an ignored
    directory included, as git says for it)."""
    env = _git_env(home)
    subprocess.run(["git", "init", "-q"], cwd=tree, env=env, check=True, capture_output=True)
    answer = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin", "-z"],
        cwd=tree,
        env=env,
        input=b"".join(os.fsencode(path) + b"\0" for path in paths),
        capture_output=True,
        check=False,
    )
    assert answer.returncode in (0, 1), answer.stderr  # 1: nothing is ignored
    return {os.fsdecode(path) for path in answer.stdout.split(b"\0") if path}


def _read_lines(gitignore: Path) -> list[str]:
    return gitignore.read_bytes().decode("utf-8", "surrogateescape").split("\n")


# Written line by line: "trailing   " and "esc\\ " end in spaces on purpose.
ROOT_GITIGNORE = "\n".join(
    [
        "# build outputs",
        "*.log",
        "!keep.log",
        "/out/",
        "build/",
        "\\#notes",
        "\\!bang",
        "",
        "cache/**",
        "!cache/keep/",
        "**/tmp",
        "docs/**/*.draft",
        "data/[0-9]*.csv",
        "data/[!a-z]x.bin",
        "trailing   ",
        "esc\\ ",
        "*.py[cod]",
        "[",
        "caf?.txt",
        "",
    ]
)

SUB_GITIGNORE = """!*.log
/only-here
nested/deep/
*.txt
!important.txt
"""

TREE_FILES = [
    "app.log",
    "keep.log",
    "notes.txt",
    "out/a.txt",
    "out/.gitignore",
    "sub/out/a.txt",
    "build",
    "sub/build/x",
    "#notes",
    "#other",
    "!bang",
    "cache/a/b.txt",
    "cache/keep/k.txt",
    "cache/top.txt",
    "tmp/x",
    "a/b/tmp",
    "a/b/c.py",
    "docs/x.draft",
    "docs/a/b/x.draft",
    "docs/x.txt",
    "data/1.csv",
    "data/12.csv",
    "data/a.csv",
    "data/9x.bin",
    "data/ax.bin",
    "trailing",
    "trailing ",
    "esc ",
    "esc",
    "m.pyc",
    "m.py",
    "m.pyo",
    "[",
    "café.txt",
    "cafe.txt",
    "only-here",
    "sub/other.log",
    "sub/only-here",
    "sub/x/only-here",
    "sub/nested/deep/f",
    "sub/x/nested/deep/f",
    "sub/a.txt",
    "sub/important.txt",
    "sub/deeper/notes.txt",
    "sub/deeper/x.txt",
    "sub/deeper/y.tmp",
    "sub/deeper/important.txt",
    "sub/crlf/a.bak",
    "sub/crlf/a.txt",
    "sub/crlf/keep.txt",
]


@needs_git
def test_agrees_with_git_check_ignore_on_a_nested_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for name in TREE_FILES:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("x")
    (tree / ".gitignore").write_text(ROOT_GITIGNORE)
    (tree / "sub" / ".gitignore").write_text(SUB_GITIGNORE)
    (tree / "sub" / "deeper" / ".gitignore").write_text("!notes.txt\n*.tmp\n")
    (tree / "sub" / "crlf" / ".gitignore").write_bytes(b"*.bak\r\n!keep.txt\r\n")
    (tree / "out" / ".gitignore").write_text("!a.txt\n")  # inside an ignored directory: unread
    (tree / "sub" / "empty-dir").mkdir()
    all_paths = [
        path.relative_to(tree).as_posix()
        for path in tree.rglob("*")
        if path.relative_to(tree).parts[0] != ".git"
    ]
    git_ignored = _git_ignored(tree, tmp_path, all_paths)

    rules = IgnoreRules()
    compared: list[str] = []
    disagreements: list[tuple[str, bool, bool]] = []

    def walk(directory: Path, relative: str) -> None:
        if (directory / ".gitignore").is_file():
            rules.add(relative, _read_lines(directory / ".gitignore"))
        for entry in sorted(directory.iterdir()):
            if relative == "" and entry.name == ".git":
                continue
            path = f"{relative}/{entry.name}" if relative else entry.name
            is_dir = entry.is_dir() and not entry.is_symlink()
            ours = rules.ignored(path, is_dir=is_dir)
            theirs = path in git_ignored
            compared.append(path)
            if ours != theirs:
                disagreements.append((path, ours, theirs))
            elif is_dir and not ours:
                walk(entry, path)

    walk(tree, "")
    assert disagreements == []
    # The oracle answered, and the tree exercises both outcomes.
    assert {"app.log", "out", "sub/build", "#notes", "data/1.csv", "sub/crlf/a.bak"} <= git_ignored
    assert not {"keep.log", "sub/other.log", "sub/important.txt", "build"} & git_ignored
    assert len(compared) > 60


# Each pattern alone in the .gitignore of its own directory; every path below that directory,
# once as files that do not exist (git then takes them for files) and once as directories.
BATTERY_PATTERNS = [
    "foo",
    "/foo",
    "foo/",
    "/foo/",
    "a/foo",
    "a/foo/",
    "*.txt",
    "a/*.txt",
    "*",
    "a/*",
    "*/foo",
    "*/*",
    "?",
    "??",
    "a?c",
    "a/?/c",
    "**",
    "/**",
    "**/",
    "**/foo",
    "**/a/foo",
    "a/**",
    "a/**/",
    "a/**/foo",
    "a/**/b/**/foo",
    "**/b/**",
    "a**b",
    "a/b**",
    "foo**/bar",
    "a/**\\/foo",
    "a/***/foo",
    "***",
    "a//foo",
    "foo//",
    "//foo",
    "[ab]",
    "[!ab]",
    "[^ab]",
    "[a-c]oo",
    "[]]",
    "[!]]",
    "[a-]",
    "[c-a]",
    "[a-c-e]",
    "[\\]]",
    "[[:digit:]]*",
    "[[:alpha:][:digit:]]",
    "[[:]]",
    "[[:foo:]]",
    "[",
    "a[",
    "[!",
    "\\[a]",
    "\\*",
    "\\?",
    "\\",
    "a\\",
    "\\a",
    "\\#x",
    "\\!x",
    "#x",
    "!x",
    "x  ",
    "x\\ ",
    "x\\  ",
    "x \\ ",
    "x\t",
    "*a*a*b",
    "caf?",
    "caf??",
    "*o",
    "f*",
    "a/*/foo",
    "a/b/",
    "!a/b",
    "x[[:space:]]",
    "x[[:punct:]]",
    "\\ ",
    "   ",
    " foo",
    "*/",
    "**/*",
    "a/**/*.txt",
]

BATTERY_PATHS = [
    "foo",
    "a/foo",
    "a/b/foo",
    "a/b/c/foo",
    "a/x/foo",
    "a/b/x/b/y/foo",
    "x/a/foo",
    "x.txt",
    "a/x.txt",
    "a/b/x.txt",
    "a",
    "b",
    "c",
    "e",
    "ab",
    "axb",
    "ax/yb",
    "abc",
    "a/c",
    "a/x/c",
    "a/bc/d",
    "aoo",
    "doo",
    "]",
    "-",
    "[",
    "a[",
    "[a]",
    "*",
    "?",
    "\\",
    "a\\",
    "#x",
    "!x",
    "x",
    "x ",
    "x  ",
    "x\t",
    "1file",
    "foo/x/bar",
    "foox/y/bar",
    "foobar",
    "aaab",
    "café",
    "cafe",
    "\udcff",
    "x/foo",
    "foo/bar",
    "a:",
    ":",
    "[]",
    "x\x0b",
    "x.",
    " ",
    " foo",
]


@needs_git
def test_agrees_with_git_check_ignore_on_a_battery_of_patterns(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    rules = IgnoreRules()
    queries: list[tuple[str, bool]] = []
    for number, pattern in enumerate(BATTERY_PATTERNS):
        for kind, is_dir in (("f", False), ("d", True)):
            directory = f"p{number:02d}-{kind}"
            (tree / directory).mkdir(parents=True)
            (tree / directory / ".gitignore").write_bytes(os.fsencode(pattern) + b"\n")
            rules.add(directory, [pattern])
            for path in BATTERY_PATHS:
                if is_dir:
                    (tree / directory / path).mkdir(parents=True, exist_ok=True)
                queries.append((f"{directory}/{path}", is_dir))
    git_ignored = _git_ignored(tree, tmp_path, (path for path, _ in queries))

    def ours(path: str, is_dir: bool) -> bool:
        # git also ignores a path below an ignored directory; the pattern's directory is first.
        parts = path.split("/")
        parents = ("/".join(parts[:depth]) for depth in range(2, len(parts)))
        return any(rules.ignored(parent, is_dir=True) for parent in parents) or rules.ignored(
            path, is_dir=is_dir
        )

    disagreements = [
        (BATTERY_PATTERNS[int(path[1:3])], path.split("/", 1)[1], is_dir, path in git_ignored)
        for path, is_dir in queries
        if ours(path, is_dir) != (path in git_ignored)
    ]
    assert disagreements == []
    assert 0.05 * len(queries) < len(git_ignored) < 0.95 * len(queries)
