"""Training data: a synthetic regression task and a character-level text task, sharded per rank.

Both data sets live in memory as tensors; a batch is a tensor of data set indices, so a step never
waits on a loader and the exact samples of any step can be named (``--log-samples``).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

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


class Shards:
    """This rank's batches of each epoch: DistributedSampler order, then fixed-size batches.

    The order depends only on (seed, epoch, rank, world size), so a resumed run can skip the
    batches it already consumed and see exactly the rest of the epoch.
    """

    def __init__(self, task: Task, *, rank: int, world_size: int, batch_size: int, seed: int):
        self.sampler: DistributedSampler[int] = DistributedSampler(
            task,  # type: ignore[arg-type]
            num_replicas=world_size,
            rank=rank,
            shuffle=True,
            seed=seed,
            drop_last=True,
        )
        self.batch_size = batch_size
        self.batches_per_epoch = len(self.sampler) // batch_size

    def epoch(self, epoch: int, skip: int = 0) -> list[torch.Tensor]:
        self.sampler.set_epoch(epoch)
        order = torch.tensor(list(self.sampler), dtype=torch.long)
        usable = order[: self.batches_per_epoch * self.batch_size]
        return list(usable.view(self.batches_per_epoch, self.batch_size)[skip:])
