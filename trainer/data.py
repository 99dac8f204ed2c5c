"""Training data: a synthetic regression task and a character-level text task, sharded per rank.

Both data sets live in memory as tensors; a batch is a tensor of data set indices, so a step never
waits on a loader and the exact samples of any step can be named (``--log-samples``).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F

from .dist import TrainerError


class Task(Protocol):
    nbytes: int

    def __len__(self) -> int: ...

    def to(self, device: torch.device) -> None:
        """Keep the data set on ``device``; batches then come from indices on it."""
        ...

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor: ...


class SyntheticRegression:
    """Targets from a fixed random two-layer tanh "teacher" network; inputs are N(0, 1).

    Everything derives from the seed, so every rank builds the same data set without
    communicating, and a student MLP can drive the loss down by orders of magnitude.
    """

    in_dim = 16
    out_dim = 4
    teacher_width = 32

    def __init__(self, samples: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, self.in_dim, generator=g)
        # A smooth teacher (pre-activations of scale ≈ 0.5) keeps the task easy to fit: the loss
        # falls well over 10× within a hundred steps, which is what the tests demand.
        w1 = torch.randn(self.in_dim, self.teacher_width, generator=g) / (
            2 * math.sqrt(self.in_dim)
        )
        w2 = torch.randn(self.teacher_width, self.out_dim, generator=g)
        self.y = torch.tanh(self.x @ w1) @ w2 * (3 / math.sqrt(self.teacher_width))
        self.nbytes = self.x.nbytes + self.y.nbytes

    def to(self, device: torch.device) -> None:
        self.x, self.y = self.x.to(device), self.y.to(device)

    def __len__(self) -> int:
        return self.x.shape[0]

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[indices], self.y[indices]

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(output.float(), target)


class CharText:
    """Non-overlapping windows of ``block_size + 1`` characters; the vocabulary is the text's."""

    def __init__(self, text: str, block_size: int) -> None:
        self.vocab = sorted(set(text))
        lookup = {ch: i for i, ch in enumerate(self.vocab)}
        self.tokens = torch.tensor([lookup[ch] for ch in text], dtype=torch.long)
        self.block_size = block_size
        self._offsets = torch.arange(block_size + 1)
        self.nbytes = self.tokens.nbytes
        if len(self) == 0:
            raise TrainerError(
                f"the text has {len(text)} characters: too short for --block-size {block_size}"
            )

    def to(self, device: torch.device) -> None:
        self.tokens, self._offsets = self.tokens.to(device), self._offsets.to(device)

    def __len__(self) -> int:
        return (self.tokens.numel() - 1) // self.block_size

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        windows = self.tokens[indices[:, None] * self.block_size + self._offsets]
        return windows[:, :-1], windows[:, 1:]

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.float().flatten(0, 1), target.flatten())


def epoch_order(size: int, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's permutation of the data set: a function of (seed, epoch) alone."""
    # Distinct (seed, epoch) pairs seed distinct generators, where seed + epoch would repeat
    # seed 0's second epoch as seed 1's first.
    generator = torch.Generator().manual_seed((seed % 2**32) * 2**32 + epoch % 2**32)
    return torch.randperm(size, generator=generator)


class Shards:
    """This rank's micro-batches of each epoch, cut from one global order.

    The epoch's order is cut to whole global steps of ``world_size × batch_size × grad_accum``
    samples; rank r takes the r-th of ``world_size`` contiguous slices of each step, in
    ``grad_accum`` micro-batches. The order does not depend on the world size, so any shape with
    the same global batch sees the same samples at each step, and a run resumed at another world
    size goes on with exactly the rest of the epoch.
    """

    def __init__(
        self,
        task: Task,
        *,
        rank: int,
        world_size: int,
        batch_size: int,
        grad_accum: int = 1,
        seed: int,
    ) -> None:
        self.size, self.seed = len(task), seed
        self.rank, self.world_size = rank, world_size
        self.batch_size, self.grad_accum = batch_size, grad_accum
        self.global_batch = world_size * batch_size * grad_accum
        self.steps_per_epoch = self.size // self.global_batch

    def epoch(self, epoch: int, start: int = 0) -> list[torch.Tensor]:
        """Micro-batches of the epoch's steps from sample ``start`` of the global order on."""
        steps = self.steps_per_epoch
        usable = epoch_order(self.size, self.seed, epoch)[: steps * self.global_batch]
        mine = usable.view(steps, self.world_size, self.grad_accum, self.batch_size)[
            start // self.global_batch :, self.rank
        ]
        return list(mine.reshape(-1, self.batch_size))
