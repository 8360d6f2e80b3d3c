"""Rank 0's training scalars as TensorBoard event files, where SageMaker collects them.

SageMaker uploads what a job writes under TensorBoardOutputConfig.LocalPath (default
/opt/ml/output/tensorboard) to its S3OutputPath while the job runs ("Prepare a training job to
collect TensorBoard output data", SageMaker developer guide). The writer is PyTorch's own
(`torch.utils.tensorboard.SummaryWriter`), which needs the `tensorboard` package: the image installs
it (container/requirements.txt); where it is missing, training goes on without event files and says
so once.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("train")

# Tag of each scalar (TensorBoard groups tags by the part before the slash).
TRAIN_LOSS = "train/loss"
VALIDATION_LOSS = "validation/loss"
LEARNING_RATE = "train/learning_rate"
GRAD_NORM = "train/grad_norm"
TOKENS_PER_SECOND = "train/tokens_per_second"
MFU_PERCENT = "train/mfu_percent"


class Scalars:
    """Scalars by global step; does nothing without a directory (other ranks, no --tensorboard-dir).
    `mirror` (mlflow_log.MlflowLog) gets the same scalars."""

    def __init__(self, directory: str | None, mirror: Any = None):
        self._writer = None
        self._mirror = mirror
        if directory is None:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # torch's module raises this when the tensorboard package is absent
            log.warning("No TensorBoard event files: %s (pip install tensorboard).", error)
            return
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=directory)
        log.info("TensorBoard event files go to %s.", directory)

    def add(self, step: int, values: dict[str, float | None]) -> None:
        """Write each known value at `step` and flush: a job stopped or reclaimed keeps what it logged."""
        if self._mirror is not None:
            self._mirror.add(step, values)
        if self._writer is None:
            return
        for tag, value in values.items():
            if value is not None:
                self._writer.add_scalar(tag, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
        if self._writer is not None:
            self._writer.close()
