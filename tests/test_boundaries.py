"""Layering rules from docs/architecture.md, checked both statically and in a fresh interpreter,
and the size past which a module holds more than one thing."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
ON_HOSTS = "ddptui/onhost"
"""What runs in the hosts' own Pythons (the agent, the probe, the stack handler, the benchmark):
read on the head as text and sent, never imported there."""
HOST_PACKAGES = {
    "ddptui/onhost/bench.py": {"torch"},
    "ddptui/onhost/probe_gpus.py": {"pynvml"},
    "ddptui/onhost/follow.py": {"pynvml"},
    "ddptui/onhost/sitecustomize.py": {"ddptui_instrument"},
    "ddptui/onhost/instrument.py": {"ddptui_instrument_frameworks"},
    "ddptui/onhost/instrument_frameworks.py": {"ddptui_instrument"},
}
"""What a host program may use of the host's own packages: the benchmark runs with its torch
(``check --bandwidth``); the probe asks NVML where its bindings are installed; the ranks' site
directory holds :mod:`ddptui.onhost.instrument` and its frameworks' hooks under the names
``ddptui_instrument`` and ``ddptui_instrument_frameworks``."""


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _top_level(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def _python_files(package: str) -> list[Path]:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files under {package}/"
    return files


def test_core_never_imports_torch_and_only_ui_imports_textual() -> None:
    offenders = []
    for path in _python_files("ddptui"):
        if "torch" in HOST_PACKAGES.get(str(path.relative_to(ROOT)), ()):
            continue
        imported = _top_level(_imported_modules(path))
        in_ui = path.relative_to(ROOT).parts[:2] == ("ddptui", "ui")
        if "torch" in imported or ("textual" in imported and not in_ui):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_what_runs_on_hosts_is_never_imported_on_the_head() -> None:
    modules = _ddptui_modules()
    importers = [
        f"{path.relative_to(ROOT)} imports {imported}"
        for path in _python_files("ddptui")
        if not str(path.relative_to(ROOT)).startswith(ON_HOSTS + "/")
        for imported in sorted(_imports_of(path, modules))
        if _within(imported, ("ddptui.onhost",))
    ]
    assert importers == []


def test_what_runs_on_hosts_needs_only_python_3_8_and_its_standard_library() -> None:
    """A host has its own Python, 3.8 or later, and nothing of ddptui but what is sent: the
    package's own modules, sent together (``ddptui.remote.programs``)."""
    offenders = []
    for path in _python_files(ON_HOSTS):
        source = path.read_text(encoding="utf-8")
        ast.parse(source, feature_version=(3, 8))
        allowed = set(sys.stdlib_module_names) | {"__future__", "ddptui"}
        allowed |= HOST_PACKAGES.get(str(path.relative_to(ROOT)), set())
        for name in _imported_modules(path):
            top = name.split(".")[0]
            if top not in allowed or (top == "ddptui" and not _within(name, ("ddptui.onhost",))):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("on hosts", ("ddptui.onhost",)),
    (
        "foundation",
        (
            "ddptui",
            "ddptui.errors",
            "ddptui.untrusted",
            "ddptui.aio",
            "ddptui.atomic",
            "ddptui.layout",
        ),
    ),
    ("config", ("ddptui.config",)),
    ("reach and facts", ("ddptui.remote", "ddptui.probe", "ddptui.demo")),
    ("health", ("ddptui.health",)),
    ("check and plan", ("ddptui.check", "ddptui.plan")),
    ("runs", ("ddptui.run",)),
    ("present", ("ddptui.present",)),
    ("front ends", ("ddptui.commands", "ddptui.ui")),
    ("entry points", ("ddptui.cli", "ddptui.cli_help", "ddptui.__main__")),
)
"""docs/architecture.md's layers, lowest first: a module imports only from its own layer and
those below it. A module belongs to the layer of its longest prefix here (``ddptui`` itself is
only the package's ``__init__``): a module sits in its layer's package, no exception written
in. ``layout.py``, where a run's files are, is foundation, since the plan takes a run's paths
from it; the demo's hosts (``ddptui/demo/``: a loopback sshd) sit beside ``remote``."""

FRONT_ENDS = ("ddptui.commands", "ddptui.ui", "ddptui.cli", "ddptui.__main__")
BEHIND_RUN_CONTROL = (
    "ddptui.check",
    "ddptui.health",
    "ddptui.probe",
    "ddptui.remote",
    "ddptui.plan",
)
"""What the front ends reach only through :class:`~ddptui.run.control.RunControl` (checks,
plans, host keys) and read only through ``ddptui.present`` (their values in words)."""
RUN_FOR_FRONT_ENDS = frozenset(
    {
        "ddptui.run.control",  # RunControl, Attachment, and the values its methods return
        "ddptui.run.record",  # the run record and its state
        "ddptui.run.store",  # the runs list's store
        "ddptui.run.following.model",  # RunModel: a run's state for rendering
        "ddptui.run.following.state",  # its values (nodes, log lines, judgement), a viewer's steps
        "ddptui.run.protocol",  # what an attachment yields: Ended, Said
        "ddptui.run.following.progress",  # each rank's progress (the rank table, the loss chart)
        "ddptui.run.following.bands",  # the loss across ranks the chart draws as bands
        "ddptui.run.diagnose",  # the errors pane's diagnoses; which log lines mark errors
        "ddptui.run.timeline",  # the launch timeline the launch pane draws
        "ddptui.run.standby",  # a launch's supervisor, started before the command's imports
    }
)
"""The modules of the runs layer a front end may import: RunControl, and values that are
read-only to a front end. Every other one (follow, dump, bandwidth, launcher…) is behind
RunControl, which names the values of theirs that its methods return."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _ddptui_modules() -> frozenset[str]:
    return frozenset(_module_name(path) for path in _python_files("ddptui"))


def _imports_of(path: Path, modules: frozenset[str]) -> set[str]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports_in(path.read_text(encoding="utf-8"), package, modules)


def _imports_in(source: str, package: str, modules: frozenset[str]) -> set[str]:
    """Every ddptui module ``source`` (a module of ``package``) imports anywhere: at the top,
    inside a function, under ``TYPE_CHECKING``. ``from ddptui.run import store`` is
    ``ddptui.run.store``; a relative import is resolved."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - (node.level - 1)])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.add(name if name in modules else base)
    return {name for name in found if name == "ddptui" or name.startswith("ddptui.")}


def _layer(module: str) -> int:
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            within = module.startswith(prefix + ".") and prefix != "ddptui"
            if (module == prefix or within) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    assert best is not None, f"{module} is in no layer of LAYERS: place it"
    return best[0]


def _within(module: str, prefixes: tuple[str, ...] | frozenset[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def test_no_module_imports_a_layer_above_its_own() -> None:
    modules = _ddptui_modules()
    upward = []
    for path in _python_files("ddptui"):
        module = _module_name(path)
        for imported in sorted(_imports_of(path, modules)):
            if _layer(imported) > _layer(module):
                below, above = LAYERS[_layer(module)][0], LAYERS[_layer(imported)][0]
                upward.append(f"{module} ({below}) imports {imported} ({above})")
    assert upward == []


MAX_MODULE_LINES = 500
"""A module of ddptui longer than this holds more than one thing: split it by meaning, each part
into a module whose name and docstring say the one thing it holds, never by size alone."""


def test_no_module_is_over_the_line_limit() -> None:
    over = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in _python_files("ddptui")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert over == [], f"over {MAX_MODULE_LINES} lines (split each by meaning)"


def _import_circles() -> list[list[str]]:
    """The circles of ddptui's imports, wherever written (strongly connected modules)."""
    modules = _ddptui_modules()
    graph = {
        _module_name(path): _imports_of(path, modules) & modules for path in _python_files("ddptui")
    }
    order: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = lowest[module] = len(order)
        stack.append(module)
        for imported in sorted(graph.get(module, set()) - {module}):
            if imported not in order:
                visit(imported)
                lowest[module] = min(lowest[module], lowest[imported])
            elif imported in stack:
                lowest[module] = min(lowest[module], order[imported])
        if lowest[module] == order[module]:
            circle = []
            while True:
                member = stack.pop()
                circle.append(member)
                if member == module:
                    break
            if len(circle) > 1:
                circles.append(sorted(circle))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return circles


def test_no_import_circle() -> None:
    """A circle (two modules that each need the other, a package and its own module) is one
    concept in two places: whichever is read first, the other is half there."""
    assert _import_circles() == []


KIND_BLIND = ("ddptui/present", "ddptui/commands", "ddptui/ui", "ddptui/cli.py", "ddptui/run")
"""Where no code names Slurm, apart from :data:`KINDS`, the backends' package within
``ddptui/run``: RunControl's ``check``, ``plan`` and ``launch`` take both kinds
(``run/backends/__init__.py``'s ``kind_of`` chooses, once), and ``present`` words both through
what they share (``ClusterCheck``, ``RunPlan``). Its words may say "Slurm": a string or a
docstring names nothing."""


def _slurm_names(source: str) -> list[tuple[int, str]]:
    """Each identifier of ``source`` that names Slurm, whatever its case, with its line: a
    name, an attribute, a function's, a class's or an argument's name, a keyword argument, a
    module imported or a name imported from one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str | None] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.arg, ast.keyword)):
            names = [node.arg]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [name for alias in node.names for name in (alias.name, alias.asname)]
            if isinstance(node, ast.ImportFrom):
                names.append(node.module)
        found += [
            (node.lineno, name) for name in names if name is not None and "slurm" in name.lower()
        ]
    return found


def test_no_code_above_the_backends_names_slurm() -> None:
    backends = ROOT / KINDS.replace(".", "/")
    offenders = []
    for where in KIND_BLIND:
        paths = [ROOT / where] if where.endswith(".py") else _python_files(where)
        for path in paths:
            if path.is_relative_to(backends):
                continue
            offenders += [
                f"{path.relative_to(ROOT)}:{line} {name}"
                for line, name in _slurm_names(path.read_text(encoding="utf-8"))
            ]
    assert offenders == []


def test_every_kind_of_identifier_that_names_slurm_is_seen_and_no_words() -> None:
    source = (
        '"""Slurm\'s jobs."""\n'
        "import ddptui.health.slurm\n"
        "from ddptui.plan.slurm import BatchPlan\n"
        "from ddptui.health import slurm_check as check\n"
        "from ddptui.plan import launch as slurm_launch\n"
        "class SlurmWords:\n"
        '    """Slurm job 12."""\n'
        "def words(on_slurm: bool) -> str:\n"
        '    return said(SLURM, config.slurm, kind="Slurm", slurm=1)\n'
        "async def _slurm_summary() -> None: ...\n"
    )
    assert sorted(_slurm_names(source)) == [
        (2, "ddptui.health.slurm"),
        (3, "ddptui.plan.slurm"),
        (4, "slurm_check"),
        (5, "slurm_launch"),
        (6, "SlurmWords"),
        (8, "on_slurm"),
        (9, "SLURM"),
        (9, "slurm"),
        (9, "slurm"),
        (10, "_slurm_summary"),
    ]


KINDS = "ddptui.run.backends"
"""Where the kinds of cluster live, one package each (:data:`KIND_PACKAGES`), beside what they
share (``base``: the backend's ABC and its events; ``cluster``: the cluster's; ``kind``: the
kind's) and the factory that chooses one by the hosts file (the package itself: ``kind_of``)."""
KIND_PACKAGES = ("ddptui.run.backends.ssh", "ddptui.run.backends.slurm")
SLURM_BELOW_RUNS = (
    "ddptui.config",  # the [slurm] table read (SlurmConfig), as every hosts file is
    "ddptui.remote.srun",  # SrunCluster: a Transport, as RemoteCluster is SSH's
    "ddptui.health.slurm",  # pure: sinfo read, the check's and the allocation's findings
    "ddptui.plan.slurm",  # pure: the batch script, as plan.launch is SSH hosts' torchrun argv
)
"""Slurm's parts that stay in the layers below the runs layer, outside its package: each is
pure or reaches no run (the config read, the transport, the check's judgement, the plan), and
sits beside the SSH hosts' own counterpart in its layer. The front ends and ``present`` read the
check and the plan as what both kinds are (``ClusterCheck``, ``RunPlan``), naming neither
(:func:`test_no_code_above_the_backends_names_slurm`). Being below ``run``, none of them may
import a kind's package anyway (:func:`test_no_module_imports_a_layer_above_its_own`)."""


def test_only_the_backends_package_imports_a_kind_s_own_modules() -> None:
    """A kind's modules (``backends/ssh/``, ``backends/slurm/``) are imported only within
    ``ddptui/run/backends/``, where the factory (``kind_of``) hands out each kind's cluster,
    backend and transport: every other module of ddptui asks the kind, apart from
    :data:`SLURM_BELOW_RUNS`, Slurm's parts in the lower layers."""
    modules = _ddptui_modules()
    assert all(_within(package, modules) for package in KIND_PACKAGES)
    offenders = [
        f"{path.relative_to(ROOT)} imports {imported}"
        for path in _python_files("ddptui")
        if not _within(_module_name(path), (KINDS, *SLURM_BELOW_RUNS))
        for imported in sorted(_imports_of(path, modules))
        if _within(imported, KIND_PACKAGES)
    ]
    assert offenders == []


def test_the_kind_of_cluster_is_chosen_in_one_place() -> None:
    """``config.slurm`` is asked about (``is None``, ``is not None``) in the runs layer only by
    the factory, ``ddptui/run/backends/__init__.py``: the others take the kind it gives. An
    ``assert`` chooses nothing (a Slurm module's, for the type checker): it is not counted."""
    factory = ROOT / "ddptui" / "run" / "backends" / "__init__.py"
    asked = []
    for path in _python_files("ddptui/run"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        asserted = {
            id(node)
            for statement in ast.walk(tree)
            if isinstance(statement, ast.Assert)
            for node in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if id(node) not in asserted and (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Attribute)
                and node.left.attr == "slurm"
                and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
            ):
                asked.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert asked == [f"{factory.relative_to(ROOT)}:{_line_of(factory, '.slurm is not None')}"]


def _line_of(path: Path, text: str) -> int:
    return next(
        number
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if text in line
    )


def test_front_ends_reach_checks_and_runs_only_through_run_control() -> None:
    """Rendering goes through ``ddptui.present``, everything else through RunControl: no front
    end imports the check, health, probe, remote or plan layers, nor a runs module outside
    :data:`RUN_FOR_FRONT_ENDS`, anywhere in its source."""
    modules = _ddptui_modules()
    offenders = []
    for path in _python_files("ddptui"):
        if not _within(_module_name(path), FRONT_ENDS):
            continue
        for imported in sorted(_imports_of(path, modules)):
            behind = _within(imported, BEHIND_RUN_CONTROL)
            in_run = _within(imported, ("ddptui.run",)) and imported != "ddptui.run"
            if behind or (in_run and imported not in RUN_FOR_FRONT_ENDS):
                offenders.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert offenders == []


def test_an_import_is_seen_wherever_and_however_it_is_written() -> None:
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import ddptui.health\n"
        "from ddptui.run import store, control\n"
        "from . import cells\n"
        "from ..screens.run import RunScreen\n"
        "if TYPE_CHECKING:\n"
        "    from ddptui.check import CheckReport\n"
        "def later() -> None:\n"
        "    from ddptui.remote.trust import scan_host_keys\n"
    )
    found = _imports_in(source, "ddptui.ui.widgets", _ddptui_modules())
    assert found == {
        "ddptui.health",
        "ddptui.run.store",
        "ddptui.run.control",
        "ddptui.ui.widgets.cells",
        "ddptui.ui.screens.run",
        "ddptui.check",
        "ddptui.remote.trust",
    }


def test_trainer_never_imports_ddptui() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in _python_files("trainer")
        if "ddptui" in _top_level(_imported_modules(path))
    ]
    assert offenders == []


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_help_imports_neither_torch_nor_textual_nor_asyncssh() -> None:
    loaded = _modules_after(
        "import contextlib, io\n"
        "from ddptui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass"
    )
    assert "ddptui.cli" in loaded
    assert not {"torch", "textual", "asyncssh"} & _top_level(loaded)


def test_what_reads_a_run_imports_no_ssh() -> None:
    """The run's model, its views and their wording are pure: the console and the commands
    render a run sent by its supervisor without the SSH that brought its lines."""
    pure = (
        "ddptui.run.following.updates",
        "ddptui.run.following.model",
        "ddptui.run.view",
        "ddptui.run.protocol",
        "ddptui.run.attachment",
        "ddptui.run.journal",
        "ddptui.present.status",
        "ddptui.run.evidence.kept",
        "ddptui.present.stacks",
    )
    loaded = _modules_after("\n".join(f"import {module}" for module in pure))
    assert set(pure) <= loaded
    assert "asyncssh" not in _top_level(loaded)


def test_the_commands_that_ask_a_run_s_supervisor_import_no_ssh() -> None:
    """``status``, ``logs``, ``stop`` and ``dump`` ask the supervisor over its socket; SSH is
    imported only where a run has none and its hosts are read directly: a tenth of a second off
    each."""
    commands = tuple(f"ddptui.commands.{name}" for name in ("status", "logs", "stop", "dump"))
    loaded = _modules_after("\n".join(f"import {module}" for module in commands))
    assert set(commands) <= loaded
    assert "asyncssh" not in _top_level(loaded)


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_python_dash_m_matches_the_console_script(flag: str) -> None:
    via_module = subprocess.run(
        [sys.executable, "-m", "ddptui", flag], capture_output=True, text=True, cwd=ROOT
    )
    via_script = subprocess.run(
        [str(Path(sys.executable).with_name("ddptui")), flag], capture_output=True, text=True
    )
    assert via_module.returncode == via_script.returncode == 0
    assert via_module.stdout == via_script.stdout
    assert via_module.stdout.strip()


def test_every_core_module_imports_without_textual_or_torch() -> None:
    modules = [
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in _python_files("ddptui")
        if path.relative_to(ROOT).parts[:2] != ("ddptui", "ui")
        and path.name != "__main__.py"
        and not str(path.relative_to(ROOT)).startswith(ON_HOSTS + "/")
    ]
    loaded = _modules_after("\n".join(f"import {module}" for module in modules))
    assert not {"torch", "textual"} & _top_level(loaded)


def test_the_head_s_install_leaves_torch_to_an_extra_and_the_demo_says_so() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    assert not [need for need in project["dependencies"] if need.startswith(("torch", "nvidia"))]
    assert any(need.startswith("torch") for need in project["optional-dependencies"]["demo"])
    # Where torch cannot be imported, the demo (whose hosts are this machine) says how to get it
    # before it starts anything.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['torch'] = None\n"
            "from ddptui.cli import main\n"
            "sys.exit(main(['demo', '--headless']))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "its Python has no torch" in done.stderr and "ddptui[demo]" in done.stderr
    assert "starting" not in done.stderr
