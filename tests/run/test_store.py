"""The run store: records round-trip through TOML, ids resolve by prefix, updates are locked."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.run.store import (
    Attempt,
    NodeRecord,
    RunNotFound,
    RunRecord,
    RunState,
    RunStore,
    new_run_id,
    state_home,
)


def _record(run_id: str) -> RunRecord:
    record = RunRecord(
        id=run_id,
        created=1.5,
        hosts_file="/h.toml",
        entry="trainer",
        backend="gloo",
        master_addr="10.0.0.1",
        world_size=4,
        args=["--max-steps", "5"],
        nodes=[
            NodeRecord("a", "10.0.0.1", 0, 2, "/r/a", ["python", "-m", "x"], {"K": "v'\""}),
            NodeRecord("b", "10.0.0.2", 1, 2, "/r/b", ["python"], {}, {"torch": "2.13.0"}),
        ],
    )
    record.attempts.append(Attempt(1, 2.0, 29500))
    record.transition(RunState.STAGING, now=1.0)
    record.transition(RunState.RUNNING, "attempt 1", now=2.0)
    return record


def test_a_record_round_trips_and_reports_its_state(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    record = _record("20261130-120000-abcd")
    store.create(record, "[cluster]\n")
    loaded = store.load(record.id)
    assert loaded == record
    assert loaded.state is RunState.RUNNING and not loaded.state.final
    assert store.hosts_file(record.id).read_text() == "[cluster]\n"


def test_ids_resolve_latest_or_by_unique_prefix(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    with pytest.raises(RunNotFound, match="no runs yet"):
        store.resolve(None)
    for run_id in ("20261130-120000-aaaa", "20261130-120500-bbbb", "20261201-090000-cccc"):
        store.create(_record(run_id), "")
    assert store.resolve(None).id == "20261201-090000-cccc"
    assert store.resolve("20261130-1205").id == "20261130-120500-bbbb"
    with pytest.raises(RunNotFound, match="2 runs matching"):
        store.resolve("20261130")
    (tmp_path / "not-a-run").mkdir()
    assert len(store.records()) == 3


def test_update_changes_what_is_on_disk(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create(_record("20261130-120000-abcd"), "")
    store.update("20261130-120000-abcd", lambda r: r.transition(RunState.STOPPED, "asked"))
    assert store.load("20261130-120000-abcd").state is RunState.STOPPED


def test_a_damaged_record_is_not_found_not_a_crash(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    (tmp_path / "20261130-120000-abcd").mkdir(parents=True)
    (tmp_path / "20261130-120000-abcd" / "run.toml").write_text("version = 1\nid = 3\n")
    with pytest.raises(RunNotFound, match="not a run record"):
        store.load("20261130-120000-abcd")
    assert store.records() == []


def test_state_home_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert state_home() == tmp_path / "ddptui" / "runs"
    assert len({new_run_id(0.0) for _ in range(20)}) > 1
