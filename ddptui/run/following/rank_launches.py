"""What an attempt's ranks tell of their launch: each rank's stamps (its start event's
``launch`` and time, its first step's time) and NCCL's account of its slowest communicator
start, which :meth:`RankLaunches.timeline` adds to the record's timeline of the attempt
(:mod:`ddptui.run.timeline`)."""

from __future__ import annotations

from ddptui.run.following import nccl_init
from ddptui.run.following.events import RankEvent, StartEvent, StepEvent
from ddptui.run.following.nccl_init import NcclInit
from ddptui.run.record import RunRecord
from ddptui.run.timeline import Timeline, node_stamps


class RankLaunches:
    """What one attempt's ranks told so far of their launch."""

    def __init__(self) -> None:
        self.stamps: dict[int, dict[str, float]] = {}
        """Rank → when (its host's clock) it passed each stage of the attempt's launch that it
        told of (a start event's ``launch``, ``ready``, ``first_step``)."""
        self.nccl_inits: dict[int, NcclInit] = {}
        """Rank → its slowest communicator start, as NCCL timed it."""

    def awaits_first_step(self, rank: int) -> bool:
        return "first_step" not in self.stamps.get(rank, {})

    def told(self, rank: int, event: RankEvent) -> None:
        """What ``event`` of the attempt says of the rank's launch: a start event's own stamps
        and time (ready), a first step's time."""
        if isinstance(event, StartEvent) and event.rank == rank:
            self.stamps[rank] = {**event.launch, "ready": event.time}
        elif isinstance(event, StepEvent) and event.rank == rank and self.awaits_first_step(rank):
            self.stamps.setdefault(rank, {})["first_step"] = event.time

    def nccl_line(self, rank: int, text: str) -> None:
        """A line of the rank's output, kept if it is NCCL's account of a slower communicator
        start than any before."""
        init = nccl_init.parse(text, rank)
        kept = self.nccl_inits.get(rank)
        if init is not None and (kept is None or init.total_s > kept.total_s):
            self.nccl_inits[rank] = init

    def timeline(self, record: RunRecord, attempt: int) -> Timeline | None:
        """Attempt ``attempt``'s launch timeline: the record's, with what the ranks told since
        of theirs (moved onto the head node's clock); None where the record has none."""
        recorded = record.timeline(attempt)
        if recorded is None:
            return None
        timeline = recorded.copy()
        for node in record.nodes:
            offset = node.clock_offset_s or 0.0
            ranks = record.ranks_of(node)
            for stage, at in node_stamps(self.stamps, ranks).items():
                timeline.stamp(node.host, stage, at - offset)
            for rank in ranks:
                if rank in self.nccl_inits:
                    timeline.note_nccl(node.host, self.nccl_inits[rank])
        return timeline
