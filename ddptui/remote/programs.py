"""The programs the head sends to a host's Python, read from :mod:`ddptui.onhost` as text.

The head never imports that package (it may need a newer Python than the host's, or torch):
it reads the sources beside this package and sends them. A program is several of its modules
sent as one text for ``python - ARGS…`` (:func:`program`): a bootstrap serves each module's
source to Python's import system under its own name, then runs the entry module's ``main``.
Nothing is edited in a module's text: what runs on the host is what the tests import."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

ONHOST = Path(__file__).resolve().parents[1] / "onhost"
AGENT_MODULES = (
    "common",
    "processes",
    "stacks",
    "cache",
    "gpu_health",
    "thinning",
    "follow",
    "sitecustomize",
    "instrument",
    "instrument_frameworks",
    "agent",
)
"""The node agent's program: its commands, and the stack handler and the frameworks' events
its ``start`` writes out."""
PROBE_MODULES = (
    "common",
    "probe_section",
    "probe_network",
    "probe_system",
    "gpu_health",
    "probe_gpus",
    "probe_kernel",
    "probe_workdir",
    "probe_torch",
    "probe_torch_cache",
    "probe",
)
"""The probe's program: its sections, then the module that gathers them."""
_PACKAGES = ("ddptui", "ddptui.onhost")

_BOOTSTRAP = """\
import importlib.abc
import importlib.util
import json
import sys


class _Sources(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    def __init__(self, sources):
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        if name not in self.sources:
            return None
        package = name in {packages!r}
        return importlib.util.spec_from_loader(name, self, is_package=package)

    def get_source(self, name):
        return self.sources[name]


sys.meta_path.insert(0, _Sources({sources}))
from ddptui.onhost.{entry} import main

sys.exit(main(sys.argv[1:], *json.loads({arguments!r})))
"""


@cache
def source(name: str) -> str:
    """The text of ``ddptui/onhost/NAME.py``."""
    return (ONHOST / f"{name}.py").read_text(encoding="utf-8")


@cache
def _sources(modules: tuple[str, ...]) -> str:
    # A dict of string literals, not JSON inside one: JSON's escapes escaped again would add
    # a tenth to every program on the wire.
    sources = {
        "ddptui": '"""ddptui\'s host-side modules, sent by the head."""\n',
        "ddptui.onhost": source("__init__"),
    }
    sources.update((f"ddptui.onhost.{name}", source(name)) for name in modules)
    return repr(sources)


def program(entry: str, modules: tuple[str, ...], *arguments: object) -> str:
    """``ddptui/onhost/ENTRY.py`` as one program for ``python - ARGS…``, with ``modules`` (the
    ones of :mod:`ddptui.onhost` it imports, ``entry`` among them), which calls
    ``main(ARGS, *arguments)`` and exits with what it returns. Each argument is a JSON document,
    sent on stdin inside the program, where argv would cap it at 128 KiB."""
    return _BOOTSTRAP.format(
        packages=_PACKAGES,
        sources=_sources(modules),
        entry=entry,
        arguments=json.dumps(arguments),
    )


def agent_program(sent: object = None) -> str:
    """The node agent as one program for ``python - COMMAND ARGS…``, with ``sent`` (any JSON
    document) as its command's ``SENT``."""
    return program("agent", AGENT_MODULES, sent)


KEPT_AGENT_BOOTSTRAP = (
    "import sys;"
    "source = sys.stdin.buffer.read(int(sys.stdin.buffer.readline()));"
    "exec(compile(source, 'ddptui-agent', 'exec'))"
)
"""For ``python -c KEPT_AGENT_BOOTSTRAP serve``: the agent comes first on stdin (its length, a
line, then its text), and stdin stays open for the commands ``serve`` reads after it."""


def kept_agent_input() -> bytes:
    """What starts the stdin of a :data:`KEPT_AGENT_BOOTSTRAP`: the node agent's program."""
    text = agent_program().encode("utf-8")
    return b"%d\n" % len(text) + text


def probe_program() -> str:
    """The probe as one program for ``python - *probe_args(…)``."""
    return program("probe", PROBE_MODULES)
