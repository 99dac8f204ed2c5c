"""The check's hosts as both front ends show them: one row value per host (:func:`host_rows`,
what ``ddptui check``'s hosts table and the health screen's read), a host's status and GPUs (or
why it has none), the version parity grid, and the check's progress while it runs.

Every value from a host is one line through the sanitiser here: a front end places it, and
never reads a host's facts itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from rich.table import Table
from rich.text import Text

from ddptui.check import CheckReport
from ddptui.config import AUTO, Config, HostConfig
from ddptui.health import ClusterCheck, HostCheck, Severity, parity_rows
from ddptui.health.resources import choose_socket_ifname, is_free, present_gpus, selected_gpus
from ddptui.present.numbers import bar
from ddptui.probe.facts import NA, HostFacts, Maybe
from ddptui.untrusted import plain

VALUE_CHARS = 60
"""The most characters a host's value takes in a row (a cell, not a log)."""
EVENT_CHARS = 20
"""The most characters of a host's latest step shown as its status while it is checked."""
NOT_AVAILABLE = "n/a"
"""A fact the host could not give."""
VERSIONS = ("python", "torch", "cuda", "nccl", "driver")
"""The fields of :class:`HostRow` compared across hosts, in the order the tables show them."""
_PARITY_KEY = {
    "python": "python",
    "torch": "torch",
    "cuda": "torch_cuda",
    "nccl": "nccl",
    "driver": "driver",
}
"""A version field → the parity row (:func:`ddptui.health.parity_rows`) whose odd hosts it
marks."""


@dataclass(frozen=True)
class HostRow:
    """One host of the hosts file, as both front ends' hosts tables show it.

    The facts are empty for a host that was not probed (``probed`` is False); ``n/a`` for one
    its probe could not give. ``odd`` names the :data:`VERSIONS` whose value on this host
    differs from the other hosts'."""

    node: int | None
    """Its node rank; None for a spare, which runs nothing until a node fails."""
    name: str
    address: str
    status: Text
    """``ok``, how the host failed (:func:`host_status`), its latest step
    while it is checked, or ``–`` before any check."""
    probed: bool = False
    hostname: str = ""
    python: str = ""
    torch: str = ""
    """torch's version, or why it could not be imported (``missing``, ``error``…)."""
    cuda: str = ""
    """torch's CUDA build, ``cpu`` for a CPU build."""
    nccl: str = ""
    driver: str = ""
    """The NVIDIA driver."""
    gpus: Text = field(default_factory=Text)
    """``2/2 free``; ``1/2 free (4 present)`` when the host's ``gpus`` key selects 2 of 4, in
    yellow when one of them is busy; ``none`` (dim) without one."""
    interface: str = ""
    """The socket interface the run would use: the hosts file's, else the one chosen, ``?``."""
    odd: frozenset[str] = frozenset()


def host_rows(
    config: Config, report: ClusterCheck | None, progress: Mapping[str, str] | None = None
) -> list[HostRow]:
    """A row for every host of ``config``, in node-rank order, with what ``report`` found on it
    (none before a check, nor from a check that probed no host); ``progress``: each host's
    latest step while a check runs (a host named there shows it as its status)."""
    probed = report if isinstance(report, CheckReport) else None
    checks = {check.host.name: check for check in probed.checks} if probed is not None else {}
    odd = _odd_hosts(probed) if probed is not None else {}
    return [
        host_row(
            node,
            host,
            checks.get(host.name),
            head_address=config.head.address,
            odd=frozenset(key for key, hosts in odd.items() if host.name in hosts),
            progress=(progress or {}).get(host.name),
        )
        for node, host in (*enumerate(config.ordered_hosts), *((None, s) for s in config.spares))
    ]


CONCERN_FIRST_ABOVE = 16
"""More hosts than this are listed the odd ones first (:func:`by_concern`); up to it, in node
order, every one in view."""


def by_concern(rows: list[HostRow], report: ClusterCheck | None) -> list[HostRow]:
    """``rows`` with the hosts to look at first, past :data:`CONCERN_FIRST_ABOVE` hosts:
    those an error names, then a warning, then those whose versions differ from the rest,
    each kind grouped by its finding (the first that names the host), in node order within;
    the rest after them in node order. At 512 hosts the few odd ones would otherwise be
    anywhere among them."""
    if report is None or len(rows) <= CONCERN_FIRST_ABOVE:
        return rows
    concern: dict[str, tuple[int, str]] = {}
    order = {Severity.ERROR: 0, Severity.WARNING: 1}
    for finding in report.findings:
        if finding.host is None or finding.severity not in order:
            continue
        name, key = _value(finding.host), (order[finding.severity], finding.code.value)
        concern[name] = min(concern.get(name, key), key)
    # Stable: within each kind, rows keep their node order.
    return sorted(rows, key=lambda row: concern.get(row.name, (2 if row.odd else 3, "")))


def node_label(row: HostRow) -> str:
    """Its node rank, or ``spare``."""
    return "spare" if row.node is None else str(row.node)


def host_row(
    node: int | None,
    host: HostConfig,
    check: HostCheck | None,
    *,
    head_address: str,
    odd: frozenset[str] = frozenset(),
    progress: str | None = None,
) -> HostRow:
    """One host's row: see :class:`HostRow`."""
    if progress is not None:
        status = Text(f"… {plain(progress, limit=EVENT_CHARS, one_line=True)}", "italic")
    elif check is None:
        status = Text("–", "dim")
    else:
        status = host_status(check)
    name, address = _value(host.name), _value(host.address)
    facts = check.facts if check is not None else None
    if facts is None:
        return HostRow(node, name, address, status)
    torch = facts.torch
    return HostRow(
        node,
        name,
        address,
        status,
        probed=True,
        hostname=_value(facts.hostname),
        python=_value(facts.python.version),
        torch=_value(torch.version if torch.status == "ok" else torch.status),
        cuda=_value("cpu" if torch.cuda_build is None else torch.cuda_build),
        nccl=_value(torch.nccl_version),
        driver=_value(facts.gpus.driver_version),
        gpus=_gpus(host, facts),
        interface=_value(_interface(host, facts, head_address)),
        odd=odd,
    )


def differing(rows: list[HostRow]) -> list[str]:
    """The :data:`VERSIONS` whose value differs between the hosts of ``rows``, in order."""
    return [key for key in VERSIONS if any(key in row.odd for row in rows)]


def check_progress(latest: Mapping[str, str], total: int | None = None) -> str:
    """The check's progress in one line: ``checking 3 hosts…`` before any host has moved on,
    then how many hosts are at each step, ``checking 3 hosts: 1 connected, 2 probed``.

    ``latest``: each host's latest step (the check's progress events); ``total``: the hosts
    checked, when ``latest`` does not name them all yet."""
    count = len(latest) if total is None else total
    hosts = f"{count} host{'s' * (count != 1)}"
    if not latest:
        return f"checking {hosts}…"
    counts = Counter(latest.values())
    summary = ", ".join(
        f"{number} {plain(event, limit=EVENT_CHARS, one_line=True)}"
        for event, number in sorted(counts.items())
    )
    return f"checking {hosts}: {summary}"


def gpus_text(report: ClusterCheck, name: str) -> Text | None:
    """Host ``name``'s GPUs as the health screen shows them beside its findings: each GPU, free
    or busy, its memory and use, the processes holding it; why there is none; or why the host
    was not probed. None when ``report`` did not check the host."""
    checks = report.checks if isinstance(report, CheckReport) else ()
    check = next((check for check in checks if check.host.name == name), None)
    if check is None:
        return None
    text = Text(f"GPUs on {plain(name, one_line=True)}\n", "bold")
    facts = check.facts
    if facts is None:
        text.append(plain(check.reach.detail or "not probed", limit=400))
        return text
    devices = facts.gpus.devices
    if not devices:
        absence = gpu_absence(facts.gpus.problem)
        text.append(plain(absence, limit=200, one_line=True), "dim")
        return text
    for gpu in devices:
        mark = "✓ free" if is_free(gpu) else "● busy"
        text.append(f"{gpu.index} {plain(str(gpu.name), limit=30, one_line=True)}  ")
        text.append(f"{mark}\n", "green" if is_free(gpu) else "yellow")
        used, total = gpu.memory_used_mib, gpu.memory_total_mib
        if used is not NA and total is not NA:
            text.append("  mem ")
            text.append_text(bar(used, total))
            text.append(f" {used}/{total} MiB\n")
        if gpu.utilization_pct is not NA:
            text.append(f"  util {gpu.utilization_pct}%\n")
        if gpu.processes is not NA:
            for process in gpu.processes:
                held = "" if process.used_memory_mib is NA else f" {process.used_memory_mib} MiB"
                holder = plain(str(process.name), limit=40, one_line=True)
                text.append(f"  held by {holder} (pid {process.pid}){held}\n", "yellow")
    return text


HOST_COLUMNS = (
    "node", "name", "address", "status", "hostname", "python", "torch", "GPUs", "interface",
)  # fmt: skip
"""``ddptui check``'s hosts table's columns; the versions it leaves out are in the parity grid
below it."""


def hosts_table(report: CheckReport) -> Table:
    """``ddptui check``'s hosts table: a row per host (:func:`host_rows`)."""
    table = Table()
    for column in HOST_COLUMNS:
        table.add_column(column)
    for row in host_rows(report.config, report):
        # Text cells, never markup: rich reads a plain string as markup ("[/]" raises,
        # "[link=…]" makes a hyperlink), and the values come from hosts.
        cells = [Text(node_label(row)), Text(row.name), Text(row.address), row.status]
        if row.probed:
            cells += [Text(row.hostname), Text(row.python), Text(row.torch), row.gpus]
            cells += [Text(row.interface)]
        table.add_row(*cells)
    return table


def parity_table(report: CheckReport) -> Table | None:
    """Every probed host's versions side by side, the odd values in bold red (``ddptui
    check``'s grid); None when no host was probed."""
    probed = [(check.host, check.facts) for check in report.checks if check.facts is not None]
    if not probed:
        return None
    rows = parity_rows(probed)
    table = Table()
    table.add_column("")
    hosts = list(rows[0].values) if rows else []
    for host in hosts:
        table.add_column(Text(host))
    for row in rows:
        cells = [
            Text(_value(value), "bold red" if host in row.odd_hosts else "")
            for host, value in row.values.items()
        ]
        table.add_row(Text(row.label), *cells)
    return table


def _odd_hosts(report: CheckReport) -> dict[str, tuple[str, ...]]:
    """A version field → the hosts whose value differs from the others'."""
    probed = [(check.host, check.facts) for check in report.checks if check.facts is not None]
    odd = {parity.key: parity.odd_hosts for parity in parity_rows(probed)}
    return {version: odd.get(key, ()) for version, key in _PARITY_KEY.items()}


def _value(value: Maybe[object] | None) -> str:
    """A host's value for a row: one line, control characters as escapes, ``n/a`` when the host
    could not give it."""
    if value is NA or value is None:
        return NOT_AVAILABLE
    return plain(str(value), limit=VALUE_CHARS, one_line=True)


def _gpus(host: HostConfig, facts: HostFacts) -> Text:
    present = present_gpus(facts)
    if not present:
        return Text("none", "dim")
    # Counted as the findings count them: only the GPUs the host's `gpus` key lets a run use.
    selected = selected_gpus(host, facts)
    free = sum(1 for gpu in selected if is_free(gpu))
    counted = f"{free}/{len(selected)} free"
    if len(selected) != len(present):
        counted += f" ({len(present)} present)"
    return Text(counted, "" if free == len(selected) else "yellow")


def _interface(host: HostConfig, facts: HostFacts, head_address: str) -> str:
    if host.socket_ifname != AUTO:
        return host.socket_ifname
    return choose_socket_ifname(facts, head_address) or "?"


def host_status(check: HostCheck) -> Text:
    """A host's status cell: ``ok`` in green, else ``probe failed`` or how SSH failed, in red."""
    if check.probe_failure is not None:
        return Text("probe failed", "red")
    if not check.reach.ok:
        # In words, as the findings say them: `host key unknown`, not the code `hostkey_unknown`.
        words = check.reach.reach.value.replace("hostkey", "host key").replace("_", " ")
        return Text(words, "red")
    return Text("ok", "green")


_NO_DRIVER = ("pynvml is not installed", "LibraryNotFound", "nvidia-smi not found")
"""What the probe says when a host has no NVIDIA driver to ask (a CPU-only host)."""


def gpu_absence(problem: str) -> str:
    """Why a host shows no GPU, in words: a CPU-only host is no error."""
    parts = [part.strip() for part in problem.split(";") if part.strip()]
    if not parts or all(any(sign in part for sign in _NO_DRIVER) for part in parts):
        return "no NVIDIA GPU: no NVIDIA driver here (a CPU-only host)"
    return f"no NVIDIA GPU found: {problem}"
