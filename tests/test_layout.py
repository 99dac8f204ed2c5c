"""One layout of a run's files: the node agent, which travels alone, keeps its own copy of the
patterns it needs; they must stay what ddptui.layout says."""

from __future__ import annotations

from ddptui import layout
from ddptui.onhost import common


def test_the_agent_follows_and_counts_the_files_the_layout_names() -> None:
    assert common.FOLLOWED.pattern == layout.FOLLOWED.pattern
    assert common.ATTEMPT_FILE.pattern == layout.ATTEMPT_FILE.pattern
    flight = layout.flight_prefix("/w/runs/r/node0")
    assert flight.startswith("/w/runs/r/node0/node/")
    assert common.FLIGHT_FILE.match(flight.rpartition("/")[2] + "12")


def test_every_file_the_watch_reads_is_one_the_agent_streams() -> None:
    run_dir = "/w/runs/20261201-120000-abcd/node3"
    log_dir = layout.log_dir(run_dir, 3).removeprefix(run_dir + "/")
    paths = {
        layout.EVENTS: "events/rank12.jsonl",
        layout.RANK_LOG: f"{log_dir}/none_x1/attempt_0/1/stderr.log",
        layout.ERROR_FILE: f"{log_dir}/none_x1/attempt_0/1/error.json",
        layout.NODE_OUT: "node/attempt-3.out",
        layout.NODE_EXIT: "node/attempt-3.exit",
    }
    for pattern, path in paths.items():
        assert pattern.match(path), (pattern.pattern, path)
        assert common.FOLLOWED.match(path), path
    assert not common.FOLLOWED.match("node/attempt-3.pgid")
    assert common.ATTEMPT_FILE.match("attempt-3.pgid") and common.ATTEMPT_FILE.match(
        "attempt-3.exit"
    )
    # Beside the node directories: hosts that share the workdir share the code and its cwd.
    assert layout.code_dir(run_dir) == "/w/runs/20261201-120000-abcd/code"
    assert layout.code_dir("/w/runs/20261130-120000-abcd") == "/w/runs/20261130-120000-abcd/code"
    assert layout.host_run_dir("/w", "20261201-120000-abcd", 3) == run_dir
    assert layout.code_cache_dir(run_dir) == "/w/code-cache"
