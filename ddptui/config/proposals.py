"""What ``ddptui init --job SCRIPT`` proposes for a script's ``[job]`` table (pure).

The script is read, never run: its syntax tree says which framework it trains with (Lightning,
Hugging Face's Trainer, Accelerate) and, where it names them as plain strings, where that
framework saves its checkpoints, so ``checkpoint_files`` copies them to every node on resume.
The frameworks resume from inside the script, so their ``resume_args`` are empty; what the
script lacks for a resume to continue (``ckpt_path="last"``, ``resume_from_checkpoint``,
``load_state``) is said as a note.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

LIGHTNING, TRANSFORMERS, ACCELERATE = "Lightning", "Hugging Face's Trainer", "Accelerate"
MAX_SCRIPT_BYTES = 2 * 2**20
"""A training script longer than this is not read for proposals."""
_LIGHTNING_MODULES = ("lightning", "pytorch_lightning")
_TRAINERS = ("Trainer", "Seq2SeqTrainer", "SFTTrainer")
"""Hugging Face's trainers (TRL's included): they take a ``TrainingArguments``."""


@dataclass(frozen=True)
class Proposal:
    framework: str | None
    """The framework the script trains with, as the README names it; None: none known."""
    job: dict[str, object] = field(default_factory=dict)
    """``[job]`` keys to write as active, with their values."""
    notes: tuple[str, ...] = ()
    """What the script should do for stop and resume to continue from its checkpoints."""


def propose(source: str, script: str) -> Proposal:
    """The ``[job]`` proposal for the script whose text is ``source``, named ``script`` in the
    hosts file; a script that does not parse gets the script key alone and says why."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as error:
        note = f"{script} could not be read as Python ({error}): nothing else proposed"
        return Proposal(None, {"script": script, "args": []}, (note,))
    imported = set(_imports(tree))
    calls = list(_calls(tree))
    paths = _Paths(tree)
    job: dict[str, object] = {"script": script, "args": [], "resume_args": []}
    if imported & {*_LIGHTNING_MODULES} or any(
        name.startswith(tuple(f"{module}." for module in _LIGHTNING_MODULES)) for name in imported
    ):
        return _lightning(job, calls, paths)
    if "transformers" in imported and any(_name(call) in _TRAINERS for call in calls):
        return _transformers(job, calls, paths)
    if "accelerate" in imported:
        return _accelerate(job, calls, paths)
    return Proposal(None, {"script": script, "args": []})


def _lightning(job: dict[str, object], calls: list[ast.Call], paths: _Paths) -> Proposal:
    notes = []
    checkpoint = next((call for call in calls if _name(call) == "ModelCheckpoint"), None)
    dirpath = paths.keyword(checkpoint, "dirpath") if checkpoint is not None else None
    save_last = checkpoint is not None and _truthy(checkpoint, "save_last")
    if dirpath is not None:
        job["checkpoint_files"] = [f"{dirpath}/last*.ckpt" if save_last else f"{dirpath}/*.ckpt"]
    else:
        trainer = next((call for call in calls if _name(call) == "Trainer"), None)
        root = (paths.keyword(trainer, "default_root_dir") if trainer else None) or "."
        job["checkpoint_files"] = [f"{root}/lightning_logs/version_*/checkpoints/*.ckpt"]
    if not save_last:
        notes.append(
            'ModelCheckpoint(dirpath="checkpoints", save_last=True) keeps a last.ckpt to '
            "resume from"
        )
    if not any(_name(call) == "fit" and _has(call, "ckpt_path") for call in calls):
        notes.append('fit(…, ckpt_path="last") once a checkpoint exists continues from it')
    return Proposal(LIGHTNING, job, tuple(notes))


def _transformers(job: dict[str, object], calls: list[ast.Call], paths: _Paths) -> Proposal:
    notes = []
    arguments = next((call for call in calls if _name(call).endswith("TrainingArguments")), None)
    output = (paths.keyword(arguments, "output_dir") if arguments is not None else None) or "."
    # Every process writes its own rng_state_<i>.pth beside the main process's model.
    job["checkpoint_files"] = [f"{output}/checkpoint-*/*"]
    if not any(_name(call) == "train" and _has(call, "resume_from_checkpoint") for call in calls):
        notes.append(
            "trainer.train(resume_from_checkpoint=True) once a checkpoint-* exists continues "
            "from the newest"
        )
    return Proposal(TRANSFORMERS, job, tuple(notes))


def _accelerate(job: dict[str, object], calls: list[ast.Call], paths: _Paths) -> Proposal:
    notes = []
    saved = next((call for call in calls if _name(call) == "save_state"), None)
    directory = paths.argument(saved, 0, "output_dir") if saved is not None else None
    if directory is not None:
        job["checkpoint_files"] = [f"{directory}/*"]
    else:
        notes.append('accelerator.save_state("checkpoint") saves what a resume loads')
    if not any(_name(call) == "load_state" for call in calls):
        notes.append(
            'accelerator.load_state("checkpoint") when it exists continues from it (ddptui '
            "carries the step count on)"
        )
    return Proposal(ACCELERATE, job, tuple(notes))


def _imports(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield node.module.split(".")[0]


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    yield from (node for node in ast.walk(tree) if isinstance(node, ast.Call))


def _name(call: ast.Call) -> str:
    """The called name: ``f`` of ``f(…)``, ``m`` of ``x.y.m(…)``."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return ""


def _has(call: ast.Call, keyword: str) -> bool:
    return any(item.arg == keyword for item in call.keywords)


def _truthy(call: ast.Call, keyword: str) -> bool:
    for item in call.keywords:
        if item.arg == keyword:
            value = item.value
            return not (isinstance(value, ast.Constant) and not value.value)
    return False


class _Paths:
    """The paths a script spells out: a string, ``Path("…")``, ``str(…)`` of one, or a name
    assigned one (``state = Path("out/state")``, then ``save_state(str(state))``)."""

    def __init__(self, tree: ast.AST) -> None:
        self.names: dict[str, ast.expr] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.names[target.id] = node.value

    def keyword(self, call: ast.Call, keyword: str) -> str | None:
        for item in call.keywords:
            if item.arg == keyword:
                return self.path(item.value)
        return None

    def argument(self, call: ast.Call, position: int, keyword: str) -> str | None:
        if len(call.args) > position:
            return self.path(call.args[position])
        return self.keyword(call, keyword)

    def path(self, node: ast.expr, depth: int = 0) -> str | None:
        if depth > 4:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
            return node.value.rstrip("/")
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.path(self.names[node.id], depth + 1)
        if isinstance(node, ast.Call) and _name(node) in ("Path", "str") and len(node.args) == 1:
            return self.path(node.args[0], depth + 1)
        return None
