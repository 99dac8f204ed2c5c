"""The programs the head sends to a host's Python, read from :mod:`ddptui.onhost` as text.

The head never imports that package (it may need a newer Python than the host's, or torch):
it reads the sources beside this package and sends them. The node agent is several modules:
:func:`agent_program` sends them as one program, whose bootstrap serves each module's source
to Python's import system under its own name, then runs the agent's ``main`` with the
document too large for argv. Nothing is edited in a module's text: what runs on the host is
what the tests import."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

ONHOST = Path(__file__).resolve().parents[1] / "onhost"
AGENT_MODULES = ("__init__", "common", "processes", "stacks", "cache", "follow", "agent")
"""The modules of the agent's program (``__init__`` is the package's)."""
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


sys.meta_path.insert(0, _Sources(json.loads({sources!r})))
from ddptui.onhost.agent import main

sys.exit(main(sys.argv[1:], json.loads({sent!r})))
"""


@cache
def source(name: str) -> str:
    """The text of ``ddptui/onhost/NAME.py``."""
    return (ONHOST / f"{name}.py").read_text(encoding="utf-8")


@cache
def _agent_sources() -> str:
    sources = {"ddptui": '"""ddptui\'s host-side modules, sent by the head."""\n'}
    for name in AGENT_MODULES:
        module = "ddptui.onhost" if name == "__init__" else f"ddptui.onhost.{name}"
        sources[module] = source(name)
    sources["ddptui.onhost.sitecustomize"] = source("sitecustomize")
    return json.dumps(sources)


def agent_program(sent: object = None) -> str:
    """The node agent as one program for ``python - COMMAND ARGS…``, with ``sent`` (any JSON
    document: on stdin, where argv would cap it at 128 KiB) as its command's ``SENT``."""
    return _BOOTSTRAP.format(packages=_PACKAGES, sources=_agent_sources(), sent=json.dumps(sent))
