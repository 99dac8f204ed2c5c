"""A run's words: its state and why, its attempts, each node, each classified error, a hang.

``ddptui status`` prints these (their ``.plain``), the console's run screen shows them; both
from the same values (:class:`~ddptui.run.view.RunView`, a
:class:`~ddptui.run.following.state.Judgement`), so they say the same thing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text

from ddptui.present.timeline import status_lines as launch_lines
from ddptui.run.diagnose import Diagnosis
from ddptui.run.diagnose.lines import strip_prefixes
from ddptui.run.evidence.stacks import rank_spans
from ddptui.run.following.state import Hang, Judgement
from ddptui.run.incidents import Incident, SetAside
from ddptui.run.record import Attempt, RunRecord, RunState
from ddptui.run.training_time import effective_training_time_ratio
from ddptui.run.view import NodeView, RunView
from ddptui.untrusted import plain

STATE_STYLE = {
    RunState.FAILED: "bold red",
    RunState.HUNG: "bold red",
    RunState.COMPLETED: "bold green",
    RunState.STOPPED: "bold yellow",
}
PROGRESS_STATES = frozenset({RunState.STARTING, RunState.RUNNING, RunState.HUNG})
"""States in which the ranks' progress always says something. In the others it is shown only
once a rank has stepped: ``starting (0 of 6 ranks started)`` under a run that failed while
staging would only mislead."""


def state_line(record: RunRecord, judgement: Judgement) -> Text:
    """``run ID (demo): STATE, attempt N: why — now what the supervisor does about it`` —
    every state with its reason."""
    demo = " (demo)" if record.demo else ""
    line = Text(f"run {record.id}{demo}: ")
    line.append(judgement.state.value, STATE_STYLE.get(judgement.state, "bold"))
    if judgement.attempt:
        line.append(f", attempt {judgement.attempt}")
    if judgement.detail:
        line.append(f": {plain(judgement.detail, limit=400, one_line=True)}")
    if judgement.doing:
        line.append(f" — now {plain(judgement.doing, limit=200, one_line=True)}", "italic")
    return line


def progress_line(state: RunState, progress: str, *, stepped: bool) -> Text | None:
    """The ranks' progress, where it says something (``stepped``: some rank has stepped)."""
    if not progress or (state not in PROGRESS_STATES and not stepped):
        return None
    return Text(plain(progress, limit=400, one_line=True))


def attempt_line(attempt: Attempt) -> Text:
    ended = f", {attempt.outcome}" if attempt.outcome else ", running"
    detail = f": {plain(attempt.detail, limit=400, one_line=True)}" if attempt.detail else ""
    return Text(f"attempt {attempt.number} (port {attempt.master_port}){ended}{detail}")


INCIDENTS_SHOWN = 10
"""Incidents ``status`` words, the latest; the earlier ones are counted (``status --json``
gives every one the record keeps)."""


def incident_line(incident: Incident) -> Text:
    """``incident 1 at 14:02:11: what failed; blamed whom (why); what came of it (attempt 2,
    40 steps redone)``."""
    at = time.strftime("%H:%M:%S", time.localtime(incident.detected_at))
    line = Text(f"incident {incident.number}", "bold")
    line.append(f" at {at}: {plain(incident.cause, limit=300, one_line=True)}")
    blamed = plain(", ".join(incident.blamed), limit=200, one_line=True)
    line.append(f"; blamed {blamed}" if blamed else "; no host blamed")
    if incident.why:
        line.append(f" ({plain(incident.why, limit=300, one_line=True)})")
    if incident.action:
        line.append(f"; {plain(incident.action, limit=300, one_line=True)}")
    came = []
    if incident.resumed_attempt is not None:
        came.append(f"attempt {incident.resumed_attempt}")
    if (redone := incident.steps_redone) is not None:
        came.append(f"{redone:,} step{'' if redone == 1 else 's'} redone")
    if came:
        line.append(f" ({', '.join(came)})")
    if incident.notified not in ("", "ok"):
        line.append(f"; {plain(incident.notified, limit=300, one_line=True)}", "red")
    return line


def incident_lines(incidents: Sequence[Incident]) -> list[Text]:
    """The latest :data:`INCIDENTS_SHOWN` incidents, oldest first, after a count of the rest."""
    earlier = len(incidents) - INCIDENTS_SHOWN
    lines = [Text(f"{earlier} earlier incident(s) not shown", "dim")] if earlier > 0 else []
    return lines + [incident_line(incident) for incident in incidents[-INCIDENTS_SHOWN:]]


def ratio_text(value: float | None) -> str:
    """``0.93``; ``—`` while not known."""
    return "—" if value is None else f"{value:.2f}"


def training_time_line(record: RunRecord, now: float) -> Text:
    """``effective training time ratio 0.93: the share of the time since the first step spent
    on steps that were kept``."""
    kept = effective_training_time_ratio(record, now)
    said = "not known yet" if kept is None else ratio_text(kept)
    return Text(
        f"effective training time ratio {said}: the share of the time since the first step "
        "spent on steps that were kept"
    )


SET_ASIDE_SHOWN = 16
"""Hosts set aside that ``status`` names; the rest are counted."""


def set_aside_line(hosts: Sequence[SetAside]) -> Text:
    """``set aside: gpu-b (why), gpu-c (why; its processes may live on)``: hosts the run will
    not use again."""
    named = [_aside(each) for each in hosts[:SET_ASIDE_SHOWN]]
    if len(hosts) > SET_ASIDE_SHOWN:
        named.append(f"and {len(hosts) - SET_ASIDE_SHOWN} more")
    return Text(f"set aside: {', '.join(named)}", "yellow")


def _aside(host: SetAside) -> str:
    said = [plain(host.why, limit=200, one_line=True)] if host.why else []
    if host.leftovers:
        said.append("its processes may live on")
    name = plain(host.host, one_line=True)
    return f"{name} ({'; '.join(said)})" if said else name


NODE_LINES_UP_TO = 16
"""With more nodes than this, nodes that stand alike are one line (a ``status`` of 128 nodes
running as they should is one line, not 128), and each node that stands apart its own."""


def node_lines(nodes: Sequence[NodeView]) -> list[Text]:
    """A line a node, or past :data:`NODE_LINES_UP_TO` nodes, a line a group of nodes that
    stand alike (same ranks, same state), in the order of each group's first node."""
    if len(nodes) <= NODE_LINES_UP_TO:
        return [node_line(node) for node in nodes]
    groups: dict[tuple[int, str], list[NodeView]] = {}
    for node in nodes:
        groups.setdefault((node.nproc, _node_state(node).plain), []).append(node)
    lines = []
    for (nproc, _), alike in groups.items():
        if len(alike) == 1:
            lines.append(node_line(alike[0]))
            continue
        ranks = rank_spans([node.node_rank for node in alike])
        line = Text(f"{len(alike)} of {len(nodes)} nodes ({ranks}): {nproc} rank(s) each, ")
        lines.append(line.append_text(_node_state(alike[0])))
    return lines


def node_line(node: NodeView) -> Text:
    """``node 0 gpu-a: 2 rank(s), running`` — or not answering and why, torchrun's exit, no
    process."""
    line = Text(f"node {node.node_rank} {plain(node.host, one_line=True)}: {node.nproc} rank(s), ")
    return line.append_text(_node_state(node))


def _node_state(node: NodeView) -> Text:
    line = Text()
    if node.note:
        line.append(f"not answering ({plain(node.note, limit=300, one_line=True)})", "red")
    elif node.exit is not None:
        line.append(f"torchrun exited {node.exit}", "red" if node.exit else "green")
    elif node.alive:
        line.append("running")
    else:
        line.append("no process", "dim")
    return line


def diagnosis_lines(diagnosis: Diagnosis, *, first: bool) -> list[Text]:
    """A classified error: what, where and how often, the message, its cause and fix; the
    first failure says so."""
    ranks = ", ".join(str(rank) for rank in diagnosis.ranks) or "torchrun"
    hosts = plain(", ".join(diagnosis.hosts), one_line=True)
    head = Text.assemble(
        ("✗ ", "bold red" if first else "red"),
        ("first failure: " if first else "", "bold red"),
        (diagnosis.category.value, "bold red" if first else "red"),
        f"  rank {ranks} on {hosts}  ×{diagnosis.count}",
    )
    # A line as a rank wrote it: the grouping key has its numbers normalised away ("c10d" as
    # "cNd", the port as N), which is no text to show a person.
    said = strip_prefixes(diagnosis.example)
    lines = [head, Text(f"  {plain(said, limit=300, one_line=True)}")]
    if diagnosis.detail:
        lines.append(Text(f"  {plain(diagnosis.detail, limit=300, one_line=True)}"))
    lines.append(Text(f"  cause: {diagnosis.cause}", "dim"))
    lines.append(Text(f"  fix: {diagnosis.fix}", "bold"))
    return lines


def hang_lines(hang: Hang, now: float) -> list[Text]:
    """Since when, at which step, and each rank that differs (or that none does)."""
    since = time.strftime("%H:%M:%S", time.localtime(hang.since))
    where = f",{hang.where}" if hang.where else ""
    lines = [
        Text(
            f"hung since {since} ({now - hang.since:.0f} s without {hang.without}, window "
            f"{hang.window_s:.0f} s){where}",
            "bold red",
        )
    ]
    odd = hang.odd
    for rank in odd:
        step = f" at step {rank.step}" if rank.step is not None else ""
        lines.append(
            Text(
                f"  rank {rank.rank} on {plain(rank.host, one_line=True)}{step}: {rank.why}", "red"
            )
        )
    if not odd:
        lines.append(Text("  every rank waits alike: a collective that never completes?"))
    return lines


LAST_LINES_SHOWN = 8
"""Ranks whose last line ``status`` shows while none has stepped; the rest are counted."""


def last_lines(view: RunView, now: float) -> list[Text]:
    """Each rank's latest line and its age: what there is to see of a script that writes no
    step events."""
    lines = []
    for rank in view.ranks[:LAST_LINES_SHOWN]:
        where = f"rank {rank.rank} on {plain(rank.host, one_line=True)}"
        if rank.last_line is None or rank.last_line_at is None:
            lines.append(Text(f"{where}: no output yet", "dim"))
            continue
        age = max(0.0, now - rank.last_line_at)
        said = plain(rank.last_line, limit=160, one_line=True)
        lines.append(Text(f"{where}, {age:.0f} s ago: {said}"))
    if len(view.ranks) > LAST_LINES_SHOWN:
        lines.append(Text(f"… and {len(view.ranks) - LAST_LINES_SHOWN} more ranks", "dim"))
    return lines


def resumed_line(view: RunView) -> Text | None:
    """Where the latest attempt's ranks resumed from, as the lowest such rank said."""
    rank = next((rank for rank in view.ranks if rank.resumed_from), None)
    if rank is None:
        return None
    path = plain(rank.resumed_from or "", limit=200, one_line=True)
    at = f" after step {rank.start_step:,}" if rank.start_step else ""
    return Text(f"resumed from {path}{at} (rank {rank.rank}'s checkpoint)")


def status_lines(view: RunView, now: float | None = None) -> list[Text]:
    """Everything ``ddptui status`` prints: state and why, when and what, attempts, incidents
    and the hosts set aside, nodes, progress, a hang, and the first classified errors with
    their fixes."""
    now = time.time() if now is None else now
    record, judgement = view.record, view.judgement
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
    lines = [
        state_line(record, judgement),
        Text(
            f"  started {started}; {record.entry}, {record.backend}, world size "
            f"{record.world_size}, master {record.master_addr}"
        ),
    ]
    lines += [Text("  ") + attempt_line(attempt) for attempt in record.attempts]
    resumed = resumed_line(view)
    if resumed is not None:
        lines.append(Text("  ") + resumed)
    lines += [Text("  ") + line for line in incident_lines(record.incidents)]
    if record.incidents:
        lines.append(Text("  ") + training_time_line(record, now))
    if record.set_aside:
        lines.append(Text("  ") + set_aside_line(record.set_aside))
    timeline = record.timeline()
    if timeline is not None and timeline.hosts:
        hosts = [node.host for node in record.nodes]
        lines += [Text("  ") + line for line in launch_lines(timeline, hosts)]
    lines += [Text("  ") + line for line in node_lines(view.nodes)]
    stepped = any(rank.step is not None for rank in view.ranks)
    progress = progress_line(judgement.state, view.progress, stepped=stepped)
    if progress is not None:
        lines.append(Text("  ") + progress)
    if not stepped and judgement.state is RunState.RUNNING:
        lines += [Text("  ") + line for line in last_lines(view, now)]
    if judgement.hang is not None:
        lines += [Text("  ") + line for line in hang_lines(judgement.hang, now)]
    for index, diagnosis in enumerate(view.diagnoses[:5]):
        lines += [Text("  ") + line for line in diagnosis_lines(diagnosis, first=index == 0)]
    return lines
