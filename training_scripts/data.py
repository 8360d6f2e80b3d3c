"""Token shards (`*.bin`, little-endian uint16) and the order in which ranks read them.

The samples of an optimizer step are a pure function of (seed, step), so a run
resumed from a checkpoint at step N reads exactly what it would have read.
"""

from pathlib import Path

import numpy as np
import torch


class UserError(Exception):
    """A problem the user can fix (a flag, a channel): reported as one sentence, non-zero exit."""


class TokenDataset:
    """Non-overlapping samples of `seq_len + 1` tokens (inputs plus shifted targets) cut from every shard."""

    def __init__(self, directory: str, seq_len: int, vocab_size: int, channel: str):
        path = Path(directory)
        if not path.is_dir():
            raise UserError(
                f"The {channel} channel directory {path} does not exist "
                f"(set SM_CHANNEL_{channel.upper()} or --{channel}-dir)."
            )
        files = sorted(path.glob("*.bin"))
        if not files:
            raise UserError(f"The {channel} channel directory {path} holds no *.bin token shards.")
        self.seq_len, self.vocab_size, self.channel = seq_len, vocab_size, channel
        self.files = files
        self.shards = [np.memmap(f, dtype="<u2", mode="r") for f in files]
        # A sample may not cross a shard boundary: shard k holds (tokens - 1) // seq_len samples.
        counts = [max(len(shard) - 1, 0) // seq_len for shard in self.shards]
        self.first_sample = np.cumsum([0] + counts)
        if len(self) == 0:
            raise UserError(
                f"The {channel} channel holds fewer than --seq-len + 1 = {seq_len + 1} tokens per shard."
            )

    def __len__(self) -> int:
        return int(self.first_sample[-1])

    def batch(self, indices: np.ndarray) -> torch.Tensor:
        """int64 tensor [len(indices), seq_len + 1]."""
        rows = np.empty((len(indices), self.seq_len + 1), dtype=np.int64)
        for row, index in enumerate(indices):
            shard = int(np.searchsorted(self.first_sample, index, side="right")) - 1
            start = (int(index) - int(self.first_sample[shard])) * self.seq_len
            rows[row] = self.shards[shard][start : start + self.seq_len + 1]
        if rows.max() >= self.vocab_size:
            raise UserError(
                f"The {self.channel} channel holds token id {rows.max()}, not below the model's "
                f"vocabulary size {self.vocab_size} (set --vocab-size)."
            )
        return torch.from_numpy(rows)


class SampleOrder:
    """Which samples each data-parallel rank reads at each optimizer step.

    Every epoch is one seeded permutation of all samples, cut into global batches
    (the last partial batch is dropped); each rank takes its contiguous slice of
    the batch, split into `grad_accum` micro-batches.
    """

    def __init__(
        self, num_samples: int, seed: int, dp_rank: int, dp_size: int, micro_batch_size: int, grad_accum: int
    ):
        self.num_samples, self.seed = num_samples, seed
        self.dp_rank, self.micro_batch_size, self.grad_accum = dp_rank, micro_batch_size, grad_accum
        self.global_batch = micro_batch_size * grad_accum * dp_size
        self.steps_per_epoch = num_samples // self.global_batch
        if self.steps_per_epoch == 0:
            raise UserError(
                f"The train channel holds {num_samples} samples, fewer than one global batch of "
                f"{self.global_batch} (--micro-batch-size x --grad-accum x data-parallel ranks)."
            )
        self._epoch, self._permutation = -1, np.empty(0, dtype=np.int64)

    def permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._epoch = epoch
            self._permutation = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
        return self._permutation

    def micro_batches(self, step: int) -> list[np.ndarray]:
        """Sample indices of this rank's micro-batches for optimizer step `step` (0-based)."""
        epoch, step_in_epoch = divmod(step, self.steps_per_epoch)
        batch = self.permutation(epoch)[step_in_epoch * self.global_batch :][: self.global_batch]
        per_rank = self.micro_batch_size * self.grad_accum
        mine = batch[self.dp_rank * per_rank :][:per_rank]
        return np.split(mine, self.grad_accum)


def validation_batches(
    num_samples: int, dp_rank: int, dp_size: int, micro_batch_size: int, max_batches: int
) -> list[np.ndarray]:
    """The same leading validation samples at every evaluation, split disjointly across ranks."""
    per_step = micro_batch_size * dp_size
    steps = min(max_batches, num_samples // per_step)
    return [
        np.arange(
            step * per_step + dp_rank * micro_batch_size, step * per_step + (dp_rank + 1) * micro_batch_size
        )
        for step in range(steps)
    ]
