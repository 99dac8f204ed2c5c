"""What `ddptui init --job SCRIPT` proposes, read from the script's syntax tree, never run."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.config.proposals import ACCELERATE, LIGHTNING, TRANSFORMERS, propose

FRAMEWORKS = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"


@pytest.mark.parametrize(
    ("script", "framework", "checkpoints"),
    [
        ("lightning_regression.py", LIGHTNING, ["out/checkpoints/last*.ckpt"]),
        ("transformers_regression.py", TRANSFORMERS, ["out/checkpoint-*/*"]),
        ("accelerate_regression.py", ACCELERATE, ["out/state/*"]),
    ],
)
def test_a_resumable_framework_script_gets_its_checkpoints_and_no_resume_args(
    script: str, framework: str, checkpoints: list[str]
) -> None:
    proposal = propose((FRAMEWORKS / script).read_text(), f"project/{script}")
    assert proposal.framework == framework
    assert proposal.job == {
        "script": f"project/{script}",
        "args": [],
        "resume_args": [],
        "checkpoint_files": checkpoints,
    }
    assert proposal.notes == ()


LIGHTNING_BARE = """
import pytorch_lightning as pl
trainer = pl.Trainer(max_epochs=3, default_root_dir="runs/")
trainer.fit(model, loader)
"""
TRAINER_BARE = """
from transformers import Trainer, TrainingArguments
Trainer(model=m, args=TrainingArguments(output_dir=os.environ["OUT"])).train()
"""
ACCELERATE_BARE = """
from accelerate import Accelerator
accelerator = Accelerator()
"""


@pytest.mark.parametrize(
    ("source", "checkpoints", "said"),
    [
        (
            LIGHTNING_BARE,
            ["runs/lightning_logs/version_*/checkpoints/*.ckpt"],
            ["save_last=True", 'ckpt_path="last"'],
        ),
        (TRAINER_BARE, ["./checkpoint-*/*"], ["resume_from_checkpoint=True"]),
        (ACCELERATE_BARE, None, ["save_state(", "load_state("]),
    ],
)
def test_what_a_script_lacks_to_resume_is_said(
    source: str, checkpoints: list[str] | None, said: list[str]
) -> None:
    proposal = propose(source, "train.py")
    assert proposal.job.get("checkpoint_files") == checkpoints
    assert len(proposal.notes) == len(said)
    assert all(words in note for words, note in zip(said, proposal.notes, strict=True))


def test_a_plain_script_or_one_that_does_not_parse_gets_the_script_alone() -> None:
    plain = propose("import torch\nprint('hi')\n", "train.py")
    assert (plain.framework, plain.job, plain.notes) == (
        None,
        {"script": "train.py", "args": []},
        (),
    )
    broken = propose("def (:\n", "train.py")
    assert broken.framework is None and broken.job == {"script": "train.py", "args": []}
    assert "could not be read as Python" in broken.notes[0]
