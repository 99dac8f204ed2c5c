"""The workdir's safety: what the probe records on the way to it, and how the head reads that.

The host is untrusted: whatever it sends in the ``workdir`` section is a
:class:`~ddptui.probe.facts.WorkdirSafety` or not available, never an exception.
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddptui import layout
from ddptui.onhost.probe_torch_cache import TORCH_CACHE_DIR
from ddptui.onhost.probe_workdir import MADE_IN_WORKDIR, workdir_section
from ddptui.probe.facts import NA, PathEntry, WorkdirSafety
from ddptui.probe.parse import parse_facts
from ddptui.probe.sections import MAX_PATH_CHARS, MAX_PATH_ENTRIES

RECORDED = Path(__file__).parents[1] / "fixtures" / "probe"
DIR = stat.S_IFDIR
LINK = stat.S_IFLNK


def document(workdir: Any) -> str:
    return json.dumps({"probe_version": 1, "time": 1.5e9, "workdir": workdir})


def section(**changes: Any) -> dict[str, Any]:
    """A well-formed section: /home/alice/runs, alice's, that exists."""
    value: dict[str, Any] = {
        "path": "/home/alice/runs",
        "uid": 1000,
        "private_gid": 1000,
        "exists": True,
        "target": 3,
        "entries": [
            {"path": "/", "uid": 0, "gid": 0, "mode": DIR | 0o755},
            {"path": "/home", "uid": 0, "gid": 0, "mode": DIR | 0o755},
            {"path": "/home/alice", "uid": 1000, "gid": 1000, "mode": DIR | 0o750},
            {"path": "/home/alice/runs", "uid": 1000, "gid": 1000, "mode": DIR | 0o775},
        ],
    }
    value.update(changes)
    return value


def parsed(value: Any) -> WorkdirSafety:
    safety = parse_facts(document(value)).workdir
    assert isinstance(safety, WorkdirSafety)
    return safety


def test_a_well_formed_section_is_read_whole() -> None:
    safety = parsed(section())
    assert (safety.path, safety.uid, safety.private_gid, safety.exists) == (
        "/home/alice/runs",
        1000,
        1000,
        True,
    )
    assert [entry.path for entry in safety.entries] == [
        "/",
        "/home",
        "/home/alice",
        "/home/alice/runs",
    ]
    assert safety.target == PathEntry("/home/alice/runs", 1000, 1000, 0o775, "directory")


def test_kinds_and_modes_come_from_st_mode() -> None:
    entries = [
        {"path": "/", "uid": 0, "gid": 0, "mode": DIR | 0o755},
        {"path": "/tmp", "uid": 0, "gid": 0, "mode": DIR | 0o1777},
        {"path": "/tmp/l", "uid": 5, "gid": 5, "mode": LINK | 0o777},
        {"path": "/tmp/f", "uid": 5, "gid": 5, "mode": stat.S_IFREG | 0o644},
    ]
    safety = parsed(section(entries=entries, target=None, exists=False))
    assert [(entry.kind, entry.mode) for entry in safety.entries] == [
        ("directory", 0o755),
        ("directory", 0o1777),
        ("link", 0o777),
        ("other", 0o644),
    ]
    assert safety.target is None


def test_the_directories_ddptui_makes_in_the_workdir_are_read_as_entries() -> None:
    safety = parsed(section(made=[3, 2]))
    assert [entry.path for entry in safety.made] == ["/home/alice/runs", "/home/alice"]
    assert parsed(section()).made == (), "a probe older than the field made nothing there"


def test_an_older_probe_without_the_section_is_not_available_and_not_a_problem() -> None:
    facts = parse_facts(json.dumps({"probe_version": 1}))
    assert facts.workdir is NA
    assert "workdir" not in facts.section_errors


def test_a_failed_section_says_why() -> None:
    facts = parse_facts(document({"error": "PermissionError: [Errno 13] /"}))
    assert facts.workdir is NA
    assert facts.section_errors["workdir"] == "PermissionError: [Errno 13] /"


@pytest.mark.parametrize("name", sorted(path.name for path in RECORDED.glob("*.json")))
def test_recorded_probe_outputs_still_parse(name: str) -> None:
    facts = parse_facts((RECORDED / name).read_text())
    assert facts.hostname == "vm"
    assert facts.workdir is NA
    assert "workdir" not in facts.section_errors


def _entry(**changes: Any) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = section()["entries"]
    return [*entries[:3], {**entries[3], **changes}]


GARBAGE = {
    "not a dict": [1, 2],
    "uid missing": section(uid=None),
    "uid negative": section(uid=-1),
    "uid a bool": section(uid=True),
    "uid too large": section(uid=2**32),
    "uid a float": section(uid=1000.0),
    "path relative": section(path="runs"),
    "path not text": section(path=["/"]),
    "path too long": section(path="/" + "a" * MAX_PATH_CHARS),
    "exists not a bool": section(exists="yes"),
    "no entries": section(entries=[]),
    "entries not a list": section(entries={"/": 0}),
    "too many entries": section(
        entries=[{"path": "/", "uid": 0, "gid": 0, "mode": DIR}] * (MAX_PATH_ENTRIES + 1)
    ),
    "an entry not a dict": section(entries=[*section()["entries"][:3], "/home/alice/runs"]),
    "an entry without a mode": _entry(mode=None),
    "an entry's mode out of range": _entry(mode=2**16),
    "an entry's uid text": _entry(uid="1000"),
    "an entry's gid negative": _entry(gid=-5),
    "an entry's path relative": _entry(path="alice/runs"),
    "target past the entries": section(target=4),
    "target negative": section(target=-1),
    "target a bool": section(target=True),
    "target text": section(target="3"),
    "made not a list": section(made=3),
    "made past the entries": section(made=[4]),
    "made a bool": section(made=[True]),
    "made text": section(made=["3"]),
}


@pytest.mark.parametrize("value", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_is_not_available(value: Any) -> None:
    assert parse_facts(document(value)).workdir is NA


@pytest.mark.parametrize("value", [-1, "1000", 1.5, True, 2**40])
def test_a_garbled_private_group_is_no_private_group(value: Any) -> None:
    assert parsed(section(private_gid=value)).private_gid is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=30,
)
ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "path": st.one_of(st.text(max_size=10).map(lambda text: "/" + text), JSON),
        "uid": st.one_of(st.integers(-2, 2**33), JSON),
        "gid": st.one_of(st.integers(-2, 2**33), JSON),
        "mode": st.one_of(st.integers(-2, 2**17), JSON),
    },
)
SECTION = st.fixed_dictionaries(
    {},
    optional={
        "path": st.one_of(st.just("/w"), JSON),
        "uid": st.one_of(st.integers(-2, 2**33), JSON),
        "private_gid": JSON,
        "exists": JSON,
        "target": st.one_of(st.integers(-2, 70), JSON),
        "entries": st.one_of(st.lists(ENTRY, max_size=70), JSON),
        "error": JSON,
        "made": st.one_of(st.lists(st.integers(-2, 70), max_size=5), JSON),
    },
)


@given(st.one_of(SECTION, JSON))
def test_any_section_is_read_or_not_available_never_raised(value: Any) -> None:
    facts = parse_facts(document(value))
    assert facts.workdir is NA or isinstance(facts.workdir, WorkdirSafety)
    json.dumps(facts.to_json(), allow_nan=False)


# --- the probe's own walk, on this machine ---------------------------------------------------


def walk(path: Path | str) -> WorkdirSafety:
    """The probe's section for ``path``, through the JSON the head reads."""
    return parsed(json.loads(json.dumps(workdir_section(str(path)))))


def paths(safety: WorkdirSafety) -> list[str]:
    return [entry.path for entry in safety.entries]


def test_an_existing_workdir_is_the_target_with_every_directory_above_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    safety = walk(work)
    assert safety.exists and safety.uid == os.geteuid()
    assert safety.target is not None and safety.target.path == str(work)
    assert safety.target.mode == 0o700 and safety.target.kind == "directory"
    assert paths(safety)[0] == "/" and paths(safety)[-2:] == [str(tmp_path), str(work)]
    assert paths(safety) == [str(work.parents[n]) for n in reversed(range(len(work.parents)))] + [
        str(work)
    ]


def test_a_missing_workdir_is_judged_by_the_directory_it_would_be_made_in(
    tmp_path: Path,
) -> None:
    safety = walk(tmp_path / "not" / "yet")
    assert not safety.exists
    assert safety.target is not None and safety.target.path == str(tmp_path)
    assert paths(safety)[-1] == str(tmp_path)


def test_links_are_followed_and_each_link_and_directory_on_the_way_recorded(
    tmp_path: Path,
) -> None:
    (tmp_path / "real" / "runs").mkdir(parents=True)
    (tmp_path / "hop").mkdir()
    (tmp_path / "hop" / "to-runs").symlink_to("../real/runs")
    (tmp_path / "work").symlink_to(tmp_path / "hop" / "to-runs")
    safety = walk(tmp_path / "work")
    kinds = {entry.path: entry.kind for entry in safety.entries}
    assert kinds[str(tmp_path / "work")] == "link"
    assert kinds[str(tmp_path / "hop")] == "directory"
    assert kinds[str(tmp_path / "hop" / "to-runs")] == "link"
    assert kinds[str(tmp_path / "real")] == "directory"
    assert safety.exists
    assert safety.target is not None and safety.target.path == str(tmp_path / "real" / "runs")


def test_a_dangling_link_is_judged_where_its_target_would_be_made(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "work").symlink_to(tmp_path / "elsewhere" / "runs")
    safety = walk(tmp_path / "work")
    assert not safety.exists
    assert safety.target is not None and safety.target.path == str(tmp_path / "elsewhere")


def test_a_link_loop_stops_the_walk_without_a_target(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop")
    safety = walk(tmp_path / "loop" / "runs")
    assert safety.target is None and not safety.exists
    assert paths(safety)[-1] == str(tmp_path / "loop")


def test_a_path_deeper_than_the_cap_stops_the_walk_without_a_target(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["d"] * MAX_PATH_ENTRIES)
    deep.mkdir(parents=True)
    safety = walk(deep)
    assert safety.target is None
    assert len(safety.entries) == MAX_PATH_ENTRIES


def test_a_file_in_the_way_leaves_no_workdir_to_judge(tmp_path: Path) -> None:
    (tmp_path / "file").touch()
    assert walk(tmp_path / "file" / "runs").target is None


def test_dot_dot_climbs_from_where_the_links_led(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b")
    safety = walk(f"{tmp_path}/link/../../c")
    assert safety.target is not None and safety.target.path == str(tmp_path / "c")


def test_a_relative_workdir_is_under_the_probes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    safety = walk("runs")
    assert safety.path == str(tmp_path / "runs")
    assert safety.target is not None and safety.target.path == str(tmp_path)


def test_the_directories_ddptui_makes_in_the_workdir_are_walked_to_where_they_exist(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    (work / "runs").mkdir(parents=True)
    (tmp_path / "cache-elsewhere").mkdir()
    (work / "code-cache").symlink_to(tmp_path / "cache-elsewhere")
    safety = walk(work)
    assert [entry.path for entry in safety.made] == [
        str(work / "runs"),
        str(tmp_path / "cache-elsewhere"),
    ]
    assert str(work / "code-cache") in paths(safety), "the link is judged on the way"


def test_a_missing_workdir_holds_nothing_ddptui_made(tmp_path: Path) -> None:
    assert walk(tmp_path / "not-yet").made == ()


def test_what_the_probe_walks_to_is_what_ddptui_makes_in_the_workdir() -> None:
    made = {
        posixpath.dirname(layout.run_root("/w", "id")),
        layout.code_cache_dir(layout.host_run_dir("/w", "id", 0)),
        posixpath.dirname(layout.bench_path("/w")),
        posixpath.join("/w", TORCH_CACHE_DIR),
    }
    assert made == {posixpath.join("/w", name) for name in MADE_IN_WORKDIR}
