"""A launch timeline's words and bars: ``ddptui status`` prints the lines, the console's run
screen shows the bars (its launch pane), from the same :class:`~ddptui.run.timeline.Timeline`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from ddptui.run.timeline import STAGES, Stage, Timeline
from ddptui.untrusted import plain

SHORT = {
    "checking": "ddptui",
    "connected": "ssh",
    "probed": "probe",
    "checked": "check",
    "staged": "stage",
    "started": "torchrun",
    "spawned": "spawn",
    "imported": "import",
    "rendezvous": "rendezvous",
    "ready": "setup",
    "first_step": "step 1",
}
COLOUR = {
    "checking": "white",
    "connected": "blue",
    "probed": "cyan",
    "checked": "bright_black",
    "staged": "magenta",
    "started": "yellow",
    "spawned": "bright_yellow",
    "imported": "red",
    "rendezvous": "green",
    "ready": "bright_blue",
    "first_step": "bright_green",
}
SLOWEST_STYLE = "bold yellow"
HOST_CHARS = 24


def heading(timeline: Timeline, hosts: Sequence[str]) -> Text:
    """``launch of attempt 1: first step in 8.9 s; slowest: node2, 5.1 s importing torch``, or
    how far it got while some host has not made its first step."""
    line = Text(f"launch of attempt {timeline.attempt}: ")
    summary = timeline.summary(hosts)
    if summary is not None:
        line.append(plain(summary, limit=300, one_line=True))
        return line
    waiting = [host for host in hosts if not timeline.complete([host])]
    named = ", ".join(plain(host, one_line=True) for host in waiting[:3])
    more = f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
    line.append(f"waiting for the first step of {named}{more}", "italic")
    return line


def host_line(timeline: Timeline, host: str, *, slowest: bool) -> Text:
    """One host's stages: ``node2  0.4 ssh · 1.2 probe … = 10.6 s`` (the slowest marked)."""
    line = Text(f"{plain(host, limit=HOST_CHARS, one_line=True):<{HOST_CHARS}} ")
    stages = timeline.stages(host)
    line.append_text(_durations(stages))
    reached = timeline.reached(host)
    if reached is not None:
        line.append(f" = {reached:.1f} s", SLOWEST_STYLE if slowest else "bold")
    if slowest:
        line.append("  ◀ slowest", SLOWEST_STYLE)
    init = timeline.nccl.get(host)
    if init is not None:
        line.append(f"  {init.words(f'on rank {init.rank}')}", "dim")
    return line


def _durations(stages: Sequence[Stage]) -> Text:
    text = Text()
    for index, stage in enumerate(stages):
        if index:
            text.append(" · ", "dim")
        text.append(f"{stage.took_s:.1f} ")
        text.append(SHORT[stage.key], COLOUR[stage.key])
    return text


STATUS_HOSTS = 8
"""Hosts whose stages ``status`` lists, those that reached their last stage latest first."""


def status_lines(timeline: Timeline, hosts: Sequence[str]) -> list[Text]:
    """What ``ddptui status`` says of the launch: the heading, then the stages of the hosts
    that took longest (the rest counted)."""
    slowest = timeline.slowest(hosts)
    # In the order slowest picks by: the same host first, ties included.
    latest = sorted(hosts, key=lambda host: (timeline.reached(host) or 0.0, host), reverse=True)
    lines = [heading(timeline, hosts)] + [
        Text("  ") + host_line(timeline, host, slowest=host == slowest)
        for host in latest[:STATUS_HOSTS]
    ]
    if len(latest) > STATUS_HOSTS:
        lines.append(Text(f"  … and {len(latest) - STATUS_HOSTS} more hosts, quicker", "dim"))
    return lines


def slowest_nccl(timeline: Timeline, hosts: Sequence[str]) -> Text | None:
    """The slowest host's ``NCCL init 1.20 s on node2 rank 5 (bootstrap 0.90, …)``, where NCCL
    told (``--debug``)."""
    timed = [(init.total_s, host, init) for host in hosts if (init := timeline.nccl.get(host))]
    if not timed:
        return None
    _, host, init = max(timed, key=lambda found: (found[0], found[1]))
    named = plain(host, limit=HOST_CHARS, one_line=True)
    return Text(init.words(f"on {named} rank {init.rank}"), "dim")


def bar(timeline: Timeline, host: str, scale_s: float, width: int) -> Text:
    """``host``'s stages as a bar ``width`` cells long for ``scale_s`` seconds, a colour a
    stage (a stage shorter than a cell shows as none)."""
    text = Text()
    if scale_s <= 0 or width <= 0:
        return text
    cells = 0
    for stage in timeline.stages(host):
        end = round(stage.at_s / scale_s * width)
        if end > cells:
            text.append("█" * (end - cells), COLOUR[stage.key])
            cells = end
    return text


def bars(timeline: Timeline, hosts: Sequence[str], width: int) -> list[Text]:
    """The console's launch pane: the heading, a bar row a host on one time scale (the
    slowest host highlighted), and the legend."""
    reached = [at for host in hosts if (at := timeline.reached(host)) is not None]
    scale = max(reached, default=0.0)
    slowest = timeline.slowest(hosts)
    name_width = min(HOST_CHARS, max((len(host) for host in hosts), default=4))
    bar_width = max(10, width - name_width - 12)
    rows = [heading(timeline, hosts)]
    for host in hosts:
        mark = host == slowest
        row = Text(
            f"{plain(host, limit=name_width, one_line=True):<{name_width}} ",
            SLOWEST_STYLE if mark else "",
        )
        row.append_text(bar(timeline, host, scale, bar_width))
        at = timeline.reached(host)
        if at is not None:
            row.append(f" {at:.1f} s", SLOWEST_STYLE if mark else "")
        rows.append(row)
    nccl = slowest_nccl(timeline, hosts)
    if nccl is not None:
        rows.append(nccl)
    legend = Text()
    for index, (key, _) in enumerate(STAGES):
        if index:
            legend.append("  ")
        legend.append("█", COLOUR[key])
        legend.append(f" {SHORT[key]}", "dim")
    rows.append(legend)
    return rows
