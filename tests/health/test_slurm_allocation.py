"""What the check inside a Slurm job's allocation says the run cannot go on with (pure)."""

from __future__ import annotations

from ddptui.config.model import SlurmConfig
from ddptui.health.findings import Code, Finding, Severity
from ddptui.health.slurm import allocation_errors, in_allocation


def _finding(severity: Severity, host: str | None, message: str) -> Finding:
    return Finding(Code.TORCH_MISMATCH, severity, host, message, "")


def test_errors_name_their_nodes_with_the_exclude_line_that_avoids_them() -> None:
    slurm = SlurmConfig(nodes=3, exclude=("gpu09",))
    findings = [
        _finding(Severity.ERROR, "gpu02", "torch 2.12.0, the others 2.13.0"),
        _finding(Severity.WARNING, "gpu01", "the clock is 3 s off"),
        _finding(Severity.ERROR, None, "the nodes' NCCL versions differ"),
    ]
    assert allocation_errors(slurm, findings) == (
        "the check inside the allocation found 2 error(s): gpu02: torch 2.12.0, the others "
        "2.13.0; the nodes' NCCL versions differ "
        '(exclude = ["gpu09", "gpu02"] in [slurm] avoids gpu02)'
    )


def test_warnings_alone_let_the_run_go_on() -> None:
    warning = _finding(Severity.WARNING, "gpu01", "the clock is 3 s off")
    assert allocation_errors(SlurmConfig(nodes=2), [warning]) is None
    assert allocation_errors(SlurmConfig(nodes=2), []) is None


def test_a_torch_import_too_slow_beside_the_starting_ranks_is_a_warning_there() -> None:
    slow = Finding(
        Code.TORCH_IMPORT_TIMEOUT, Severity.ERROR, "gpu01", "import torch did not finish", ""
    )
    mismatch = _finding(Severity.ERROR, "gpu02", "torch 2.12.0, the others 2.13.0")
    (eased, kept) = in_allocation([slow, mismatch])
    assert eased.severity is Severity.WARNING and eased.host == "gpu01"
    assert eased.message == "import torch did not finish, while the job's ranks started beside it"
    assert kept == mismatch
    assert allocation_errors(SlurmConfig(nodes=2), [eased]) is None
