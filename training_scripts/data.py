"""Token shards (`*.bin`, little-endian uint16) and the order in which ranks read them.

The samples of an optimizer step are a pure function of (seed, global batch, the
step and where the run started in the data), so a run resumed from a checkpoint at
step N reads exactly what it would have read, whatever the number of ranks.
"""

from pathlib import Path

import numpy as np
import torch

SCAN_CHUNK_TOKENS = 1 << 26  # bounds the memory a token-id scan touches at once


class UserError(Exception):
    """A problem the user can fix (a flag, a channel): reported as one sentence, non-zero exit."""


class TokenDataset:
    """Non-overlapping samples of `seq_len + 1` tokens (inputs plus shifted targets) cut from every shard."""

    def __init__(self, directory: str, seq_len: int, channel: str):
        path = Path(directory)
        if not path.is_dir():
            raise UserError(
                f"The {channel} channel directory {path} does not exist "
                f"(set SM_CHANNEL_{channel.upper()} or --{channel}-dir)."
            )
        files = sorted(path.glob("*.bin"))
        if not files:
            raise UserError(f"The {channel} channel directory {path} holds no *.bin token shards.")
        self.seq_len, self.channel, self.files = seq_len, channel, files
        self.shards = [_open_shard(file, channel) for file in files]
        # A sample may not cross a shard boundary: shard k holds (tokens - 1) // seq_len samples.
        counts = [max(len(shard) - 1, 0) // seq_len for shard in self.shards]
        self.first_sample = np.cumsum([0] + counts)
        if len(self) == 0:
            raise UserError(
                f"The {channel} channel holds fewer than --seq-len + 1 = {seq_len + 1} tokens per shard."
            )

    def __len__(self) -> int:
        return int(self.first_sample[-1])

    def largest_token_ids(self, rank: int, world_size: int) -> np.ndarray:
        """The largest token id of each shard this rank scans (every world_size-th); -1 for the others."""
        largest = np.full(len(self.shards), -1, dtype=np.int64)
        for index in range(rank, len(self.shards), world_size):
            shard = self.shards[index]
            largest[index] = max(
                int(shard[start : start + SCAN_CHUNK_TOKENS].max())
                for start in range(0, len(shard), SCAN_CHUNK_TOKENS)
            )
        return largest

    def check_vocabulary(self, largest: np.ndarray, vocab_size: int) -> None:
        """`largest`: every shard's largest token id (all ranks' scans combined)."""
        for file, token in zip(self.files, largest, strict=True):
            if token >= vocab_size:
                raise UserError(
                    f"The {self.channel} shard {file} holds token id {token}, not below the model's "
                    f"vocabulary size {vocab_size} (set --vocab-size)."
                )

    def batch(self, indices: np.ndarray) -> torch.Tensor:
        """int64 tensor [len(indices), seq_len + 1]."""
        rows = np.empty((len(indices), self.seq_len + 1), dtype=np.int64)
        for row, index in enumerate(indices):
            shard = int(np.searchsorted(self.first_sample, index, side="right")) - 1
            start = (int(index) - int(self.first_sample[shard])) * self.seq_len
            rows[row] = self.shards[shard][start : start + self.seq_len + 1]
        return torch.from_numpy(rows)


def _open_shard(file: Path, channel: str) -> np.ndarray:
    try:
        size = file.stat().st_size
        if size and size % 2 == 0:
            return np.memmap(file, dtype="<u2", mode="r")
    except OSError as error:
        raise UserError(f"The {channel} shard {file} cannot be read ({error.strerror}).") from None
    raise UserError(
        f"The {channel} shard {file} holds {size} bytes: a shard must hold whole uint16 token ids "
        "(an even, non-zero number of bytes)."
    )


class SampleOrder:
    """Which samples each data-parallel rank reads at each optimizer step.

    Every epoch is one seeded permutation of all samples, read in global batches
    from a position (the last partial batch of an epoch is dropped); each rank
    takes its contiguous slice of the batch, split into `grad_accum` micro-batches.
    A run starts at step `start_step` at `start_position` (epoch, offset into that
    epoch's permutation): (0, (0, 0)) for a new run, the checkpoint's for a resumed one.
    """

    def __init__(
        self,
        num_samples: int,
        seed: int,
        dp_rank: int,
        dp_size: int,
        micro_batch_size: int,
        grad_accum: int,
        start_step: int = 0,
        start_position: tuple[int, int] = (0, 0),
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
        self.start_step, self.start_position = start_step, start_position
        self._epoch, self._permutation = -1, np.empty(0, dtype=np.int64)

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, offset in its permutation) of the first sample that step `step` reads."""
        epoch, offset = self.start_position
        steps = step - self.start_step
        left_in_first_epoch = (self.num_samples - offset) // self.global_batch
        if steps < left_in_first_epoch:
            return epoch, offset + steps * self.global_batch
        epochs, step_in_epoch = divmod(steps - left_in_first_epoch, self.steps_per_epoch)
        return epoch + 1 + epochs, step_in_epoch * self.global_batch

    def permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._epoch = epoch
            self._permutation = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
        return self._permutation

    def global_samples(self, step: int) -> np.ndarray:
        epoch, offset = self.position(step)
        return self.permutation(epoch)[offset : offset + self.global_batch]

    def micro_batches(self, step: int) -> list[np.ndarray]:
        """Sample indices of this rank's micro-batches for optimizer step `step` (0-based)."""
        per_rank = self.micro_batch_size * self.grad_accum
        mine = self.global_samples(step)[self.dp_rank * per_rank :][:per_rank]
        return np.split(mine, self.grad_accum)


def validation_batches(
    num_samples: int, dp_rank: int, dp_size: int, micro_batch_size: int, max_batches: int
) -> tuple[list[np.ndarray], int]:
    """This rank's micro-batches of the validation set, and how many leading samples of each are real.

    The set is the first max_batches x micro_batch_size samples (fewer if val is smaller), whatever the
    number of ranks, so the loss over it does not depend on them; each rank takes a contiguous part,
    and every rank runs the same number of forward passes (sharded models need all of them): a rank
    with fewer samples pads its last batches with repeats that do not count.
    """
    total = min(num_samples, max_batches * micro_batch_size)
    per_rank = -(-total // dp_size)
    mine = np.arange(dp_rank * per_rank, min((dp_rank + 1) * per_rank, total))
    batches = -(-per_rank // micro_batch_size)
    padded = np.concatenate([mine, np.zeros(batches * micro_batch_size - len(mine), dtype=np.int64)])
    return np.split(padded, batches), len(mine)
