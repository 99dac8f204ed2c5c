"""What every new run's plan is, whoever starts its ranks: ddptui, on each of a hosts file's
hosts (:class:`~ddptui.plan.launch.LaunchPlan`), or a scheduler, handed a batch job
(:class:`~ddptui.plan.slurm.BatchPlan`).

Front ends hold a :class:`RunPlan` and :mod:`ddptui.present.plan` words it through this much
alone, so that neither asks which kind of plan it is. ``upload`` is always what a run uploads,
in lines, its total first (:meth:`ddptui.run.code.contents.CodeTree.describe`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


class RunPlan(ABC):
    """One attempt of a new run, planned."""

    run_id: str

    @property
    @abstractmethod
    def heading(self) -> str:
        """The plan in one line, as the console's launch dialog heads it."""

    @property
    @abstractmethod
    def queues(self) -> bool:
        """Whether a scheduler queues the run until it has the nodes (a batch job): a launch
        says :attr:`heading` as it hands the run over, whose own lines may be long in
        coming."""

    @abstractmethod
    def text(self, upload: Sequence[str]) -> str:
        """The plan as the launch dialog shows it, after what is uploaded; safe to print as it
        is."""

    @abstractmethod
    def dry_run(self, upload: Sequence[str]) -> tuple[str, str | None]:
        """What ``ddptui launch --dry-run`` prints on stdout, safe to print as it is, and the
        line it says on stderr, if any."""

    @abstractmethod
    def started(self, job_id: str | None) -> str:
        """What a launch that leaves the run going says of it (``job_id``: the scheduler's id
        of the job it queued, None where ddptui started the ranks itself)."""
