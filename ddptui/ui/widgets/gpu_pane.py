"""The run screen's GPUs: each node's newest sample and each GPU's recent use as sparklines (at a
large cluster's size, a line a node: its GPUs' spread and their mean use's sparkline).

Every number here is a host's: a percentage is kept from 0 to 100, a value that is no finite
number is left out (or shown as ``?``), and a GPU without an index is shown without a history
(a sample's reader, :func:`ddptui.run.following.sample.sample_of`, keeps only the indices a host can
have, and as many GPUs).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.present.gpus import gpu_faults
from ddptui.run.following.state import NodeState
from ddptui.ui.widgets.cells import bar, figure, percent, share
from ddptui.untrusted import finite, plain

GPU_HISTORY = 60
"""Samples kept per GPU (one per heartbeat) for its sparklines."""
GPU_ROWS_PER_GPU_UP_TO = 64
"""With more GPUs than this in the run, a line a node (its GPUs' spread and mean) rather than a
line a GPU: 1,024 lines are scrolled through by nobody."""
SPARK = "▁▂▃▄▅▆▇█"


class GpuPane(VerticalScroll):
    """Scrolls the GPUs' text (the ``Static`` ``#gpus-text``)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._utilisation: dict[tuple[str, int], deque[float]] = {}
        """Utilisation (%) per GPU, one sample per heartbeat."""
        self._memory: dict[tuple[str, int], deque[float]] = {}
        """Memory in use (% of the GPU's) per GPU, one sample per heartbeat."""
        self._node_utilisation: dict[str, deque[float]] = {}
        """Each node's GPUs' mean utilisation (%), one sample per heartbeat."""
        self._last_samples: dict[str, Mapping[str, Any]] = {}
        self._shown: Text | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="gpus-text")

    def sample(self, nodes: Mapping[str, NodeState]) -> None:
        """Add each node's sample to the history, once per sample; call it on every redraw,
        on show or not, so that the sparklines have no holes."""
        for host, node in nodes.items():
            if node.sample is self._last_samples.get(host):
                continue
            self._last_samples[host] = node.sample
            utilisations = []
            for gpu in node.sample.get("gpus", ()):
                index = _index(gpu)
                if index is None:
                    continue
                key = (host, index)
                util = percent(gpu.get("utilization.gpu"))
                if util is not None:
                    history = self._utilisation.setdefault(key, deque(maxlen=GPU_HISTORY))
                    history.append(util)
                    utilisations.append(util)
                memory_share = share(gpu.get("memory.used"), gpu.get("memory.total"))
                if memory_share is not None:
                    memory = self._memory.setdefault(key, deque(maxlen=GPU_HISTORY))
                    memory.append(100.0 * memory_share)
            if utilisations:
                mean = self._node_utilisation.setdefault(host, deque(maxlen=GPU_HISTORY))
                mean.append(statistics.fmean(utilisations))

    def show(self, nodes: Mapping[str, NodeState], notes: Mapping[str, str]) -> None:
        """Show each node's newest sample (``notes``: why a host does not answer, by host)."""
        text = Text()
        per_node = sum(len(node.sample.get("gpus") or ()) for node in nodes.values()) > (
            GPU_ROWS_PER_GPU_UP_TO
        )
        for host, node in nodes.items():
            sample = node.sample
            text.append(plain(host, one_line=True), "bold")
            silence = notes.get(host)
            if silence:
                text.append(f"  not answering: {plain(silence, one_line=True)}", "red")
            cpu, rss = finite(sample.get("cpu_pct")), finite(sample.get("rss_mib"))
            if cpu is not None and rss is not None:
                text.append(f"  cpu {figure(cpu, '.0f')}%  rss {figure(rss, '.0f')} MiB")
            gpus = sample.get("gpus") or ()
            if per_node and gpus:
                self._node(text, host, gpus)
                continue
            text.append("\n")
            if not gpus:
                text.append("  no GPU samples\n", "dim")
            for gpu in gpus:
                self._gpu(text, host, gpu)
        # An update lays the whole screen out again: only a change is worth one.
        if text != self._shown:
            self._shown = text
            self.query_one(Static).update(text)

    def _gpu(self, text: Text, host: str, gpu: Mapping[str, Any]) -> None:
        index = _index(gpu)
        text.append(f"  GPU {'?' if index is None else index} ")
        used, total = finite(gpu.get("memory.used")), finite(gpu.get("memory.total"))
        if used is not None and total is not None:
            text.append_text(bar(used, total, width=10))
            text.append(f" {figure(used, '.0f')}/{figure(total, '.0f')} MiB")
        utilisation = percent(gpu.get("utilization.gpu"))
        if utilisation is not None:
            text.append(f"  {utilisation:.0f}%")
        for key, unit in (("temperature.gpu", "°C"), ("power.draw", " W")):
            value = finite(gpu.get(key))
            if value is not None:
                text.append(f"  {figure(value, '.0f')}{unit}")
        if index is not None:
            history = self._utilisation.get((host, index))
            if history:
                text.append("  util " + _spark(history), "cyan")
            memory = self._memory.get((host, index))
            if memory:
                text.append("  mem " + _spark(memory), "magenta")
        faults = gpu_faults(gpu)
        if faults:
            text.append("  ⚠ " + "; ".join(faults), "bold red")
        text.append("\n")

    def _node(self, text: Text, host: str, gpus: Sequence[Mapping[str, Any]]) -> None:
        """The node's GPUs on one line: how many, their utilisation's spread, the fullest
        one's memory, and the mean utilisation's recent history."""
        text.append(f"  {len(gpus)} GPUs")
        utilisations = sorted(
            util for gpu in gpus if (util := percent(gpu.get("utilization.gpu"))) is not None
        )
        if utilisations:
            low, high = utilisations[0], utilisations[-1]
            middle = statistics.median(utilisations)
            text.append(f"  util {low:.0f}–{high:.0f}% (median {middle:.0f}%)")
        shares = [
            (taken, gpu)
            for gpu in gpus
            if (taken := share(gpu.get("memory.used"), gpu.get("memory.total"))) is not None
        ]
        if shares:
            _, fullest = max(shares, key=lambda item: item[0])
            used, total = finite(fullest.get("memory.used")), finite(fullest.get("memory.total"))
            if used is not None and total is not None:
                text.append("  fullest ")
                text.append_text(bar(used, total, width=10))
                text.append(f" {figure(used, '.0f')}/{figure(total, '.0f')} MiB")
        history = self._node_utilisation.get(host)
        if history:
            text.append("  mean util " + _spark(history), "cyan")
        faulty = [(_index(gpu), faults) for gpu in gpus if (faults := gpu_faults(gpu))]
        if faulty:
            index, faults = faulty[0]
            first = f"GPU {'?' if index is None else index}: {'; '.join(faults)}"
            more = f" and {len(faulty) - 1} more" if len(faulty) > 1 else ""
            text.append(f"  ⚠ {first}{more}", "bold red")
        text.append("\n")


def _index(gpu: Mapping[str, Any]) -> int | None:
    """The GPU's index, when its sample has one (one a host can have: see the module's words)."""
    index = gpu.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def _spark(percentages: Iterable[float]) -> str:
    """Percentages (0 to 100) as bars."""
    top = len(SPARK) - 1
    return "".join(SPARK[min(int(value / 100 * len(SPARK)), top)] for value in percentages)
