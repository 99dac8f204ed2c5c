"""The run screen's GPUs: each node's newest sample and each GPU's recent use as sparklines."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.run.state import NodeState
from ddptui.ui.widgets.cells import bar
from ddptui.untrusted import plain

GPU_HISTORY = 60
"""Samples kept per GPU (one per heartbeat) for its sparklines."""
SPARK = "▁▂▃▄▅▆▇█"


class GpuPane(VerticalScroll):
    """Scrolls the GPUs' text (the ``Static`` ``#gpus-text``)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._utilisation: dict[tuple[str, int], deque[float]] = {}
        """Utilisation (%) per GPU, one sample per heartbeat."""
        self._memory: dict[tuple[str, int], deque[float]] = {}
        """Memory in use (% of the GPU's) per GPU, one sample per heartbeat."""
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
            for gpu in node.sample.get("gpus", ()):
                key = (host, int(gpu.get("index", 0)))
                util = gpu.get("utilization.gpu")
                if isinstance(util, (int, float)):
                    history = self._utilisation.setdefault(key, deque(maxlen=GPU_HISTORY))
                    history.append(float(util))
                used, total = gpu.get("memory.used"), gpu.get("memory.total")
                if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total:
                    memory = self._memory.setdefault(key, deque(maxlen=GPU_HISTORY))
                    memory.append(100.0 * used / total)

    def show(self, nodes: Mapping[str, NodeState], notes: Mapping[str, str]) -> None:
        """Show each node's newest sample (``notes``: why a host does not answer, by host)."""
        text = Text()
        for host, node in nodes.items():
            sample = node.sample
            text.append(plain(host, one_line=True), "bold")
            silence = notes.get(host)
            if silence:
                text.append(f"  not answering: {plain(silence, one_line=True)}", "red")
            cpu, rss = sample.get("cpu_pct"), sample.get("rss_mib")
            if isinstance(cpu, (int, float)) and isinstance(rss, (int, float)):
                text.append(f"  cpu {cpu:.0f}%  rss {rss:.0f} MiB")
            text.append("\n")
            gpus = sample.get("gpus") or ()
            if not gpus:
                text.append("  no GPU samples\n", "dim")
            for gpu in gpus:
                self._gpu(text, host, gpu)
        # An update lays the whole screen out again: only a change is worth one.
        if text != self._shown:
            self._shown = text
            self.query_one(Static).update(text)

    def _gpu(self, text: Text, host: str, gpu: Mapping[str, Any]) -> None:
        index = int(gpu.get("index", 0))
        text.append(f"  GPU {index} ")
        used, total = gpu.get("memory.used"), gpu.get("memory.total")
        if isinstance(used, (int, float)) and isinstance(total, (int, float)):
            text.append_text(bar(used, total, width=10))
            text.append(f" {used:.0f}/{total:.0f} MiB")
        for key, unit in (("utilization.gpu", "%"), ("temperature.gpu", "°C")):
            value = gpu.get(key)
            if isinstance(value, (int, float)):
                text.append(f"  {value:.0f}{unit}")
        power = gpu.get("power.draw")
        if isinstance(power, (int, float)):
            text.append(f"  {power:.0f} W")
        utilisation = self._utilisation.get((host, index))
        if utilisation:
            text.append("  util " + _spark(utilisation), "cyan")
        memory = self._memory.get((host, index))
        if memory:
            text.append("  mem " + _spark(memory), "magenta")
        text.append("\n")


def _spark(values: Iterable[float]) -> str:
    """Percentages as bars; a host's value outside 0–100 shows as the nearest end."""
    top = len(SPARK) - 1
    return "".join(SPARK[max(0, min(int(value / 100 * len(SPARK)), top))] for value in values)
