"""Per-rank loss read from what scripts print, for scripts that write no step events."""

from __future__ import annotations

import math
import time

import pytest

from ddptui.run.following.logloss import MAX_LINE_CHARS, LoggedLoss, LossReader


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "{'loss': 0.4123, 'grad_norm': 1.25, 'learning_rate': 4.9e-05, 'epoch': 0.02}",
            LoggedLoss(None, 0.4123),
        ),
        (
            "{'loss': '0.001577', 'grad_norm': '0.00247', 'learning_rate': '4.9e-05'}",
            LoggedLoss(None, 0.001577),
        ),
        (
            "\r 10%|█         | 1/10 [00:00, loss=0.9]\r 20%|██        | 2/10 [00:01, loss=0.7]\r",
            LoggedLoss(None, 0.7),
        ),
        (
            "Epoch 0:  40%|████      | 4/10 [00:01<00:01,  3.9it/s, loss=0.123, v_num=0]",
            LoggedLoss(None, 0.123),
        ),
        ("Epoch 2: 100%|██| 50/50 [00:03, train_loss=1.5e-2]", LoggedLoss(None, 0.015)),
        # rich's live display (Lightning's bar) into a pipe: one state's metrics line, then the
        # cursor moved up and the next state's bar line.
        (
            "      \x1b[3mtrain_loss: 1.077\x1b[0m\r\x1b[2K\x1b[1A\x1b[2KEpoch 0/1  \x1b[35m╸"
            "\x1b[0m 5/32 \x1b[2m0:00:00 • 0:00:01\x1b[0m \x1b[3mv_num: 0.000     \x1b[0m",
            LoggedLoss(None, 1.077),
        ),
        ("\x1b[1;32mstep 4 loss=0.25\x1b[0m", LoggedLoss(4, 0.25)),
        ("[GPU0] Epoch 3 | Step 120 | loss: 2.345", LoggedLoss(120, 2.345)),
        ("iter 7, lr 0.001, loss 3.0", LoggedLoss(7, 3.0)),
        ("Loss = .5", LoggedLoss(None, 0.5)),
        ("val_loss=0.3", None),
        ("loss function ready, step 3", None),
        ("nothing to see", None),
    ],
)
def test_the_shapes_training_code_prints(line: str, expected: LoggedLoss | None) -> None:
    assert LossReader().read(line) == expected


def test_a_non_finite_loss_is_read_as_printed() -> None:
    logged = LossReader().read("step 9 loss nan")
    assert logged is not None and logged.step == 9 and math.isnan(logged.loss)


def test_the_users_pattern_comes_first() -> None:
    reader = LossReader(r"it=(?P<step>\d+) objective (?P<loss>[\d.]+)")
    assert reader.read("it=40 objective 0.25 loss=9") == LoggedLoss(40, 0.25)
    assert reader.read("loss=9") == LoggedLoss(None, 9.0)


def test_a_hosts_line_costs_time_in_proportion_to_its_cut_length() -> None:
    reader = LossReader()
    hostile = [
        *("loss" + " " * 10_000, "loss " * 5_000, "step " * 5_000 + "loss", "{'loss'" * 3000),
        *("loss\r" * 5_000, "\x1b[" + "0" * 10_000, "\x1b[" * 5_000 + "loss"),
    ]
    began = time.perf_counter()
    for line in hostile:
        reader.read(line)
    # The lines are cut to MAX_LINE_CHARS first; a quadratic pattern took seconds on these.
    assert time.perf_counter() - began < 0.5
    assert reader.read(" " * MAX_LINE_CHARS + "loss=1") is None
