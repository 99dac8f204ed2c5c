"""Without a test bed, cluster tests are skipped and the session summary says why."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BRINGUP = "tests/testbed/test_bringup.py::test_run_on_runs_inside_the_host"


def test_summary_names_the_skipped_cluster_tests_and_the_reason() -> None:
    out, status = _pytest(
        [BRINGUP, "tests/testbed/test_localssh.py::test_an_untrusted_client_key_is_refused"],
        {"DDPTUI_TESTBED": "off"},
    )
    assert status == 0, out
    assert "1 passed, 1 skipped" in out
    assert "test bed unavailable: turned off by DDPTUI_TESTBED=off" in out
    summary = out[out.index("ddptui test bed") :]
    assert "1 cluster test(s) SKIPPED: turned off by DDPTUI_TESTBED=off" in summary
    # What .ci/run reads to know the beds ran: the skipped one is not counted.
    assert "ddptui tiers run: cluster 0, slow 0, slurm 0 (of 1 tests run)" in out
    assert "local_ssh_server" in summary


def test_under_ci_a_bed_that_cannot_come_up_fails_the_run_naming_what_is_missing(
    tmp_path: Path,
) -> None:
    # No `ip` on PATH, as on a CI machine that lost iproute2: the cluster test fails, never
    # skips, and says what is missing.
    out, status = _pytest([BRINGUP], {"CI": "true", "PATH": str(tmp_path)})
    assert status == 1, out
    assert "1 error" in out
    missing = "ip is not installed" if os.geteuid() == 0 else "network namespaces need root"
    assert f"CI runs every test bed, and this machine cannot bring one up: {missing}" in out


def _pytest(tests: list[str], env: dict[str, str]) -> tuple[str, int]:
    """A pytest session of ``tests`` outside CI but for what ``env`` says: its output and
    exit status. It runs every tier (``-m ""``): plain ``pytest`` deselects the cluster tests."""
    outside_ci = {key: value for key, value in os.environ.items() if key != "CI"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "", *tests],
        cwd=REPO,
        env={**outside_ci, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout, result.returncode


def test_ci_fails_a_run_whose_tiers_ran_short_and_passes_one_that_ran_them_all(
    tmp_path: Path,
) -> None:
    def checked(line: str) -> tuple[int, str]:
        summary = tmp_path / "summary.txt"
        summary.write_text(f"collected\n{line}\n1 passed\n")
        result = subprocess.run(
            [sys.executable, str(REPO / ".ci" / "tiers.py"), str(summary)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return result.returncode, result.stdout

    expected = runpy.run_path(str(REPO / ".ci" / "tiers.py"))["EXPECTED"]
    cluster, slow, slurm = (expected[tier] for tier in ("cluster", "slow", "slurm"))
    all_ran = f"ddptui tiers run: cluster {cluster}, slow {slow}, slurm {slurm} (of 2000 tests run)"
    assert checked(all_ran) == (
        0,
        f"every tier ran: cluster {cluster}, slow {slow}, slurm {slurm}\n",
    )
    short = f"ddptui tiers run: cluster {cluster - 1}, slow {slow}, slurm 0 (of 1999 tests run)"
    status, said = checked(short)
    assert status == 1
    assert said == (
        f"the suite reached fewer real parts than it holds: cluster: {cluster - 1} ran, "
        f"{cluster} expected; slurm: 0 ran, {slurm} expected\n"
    )
    assert checked("no tiers line at all")[0] == 1
