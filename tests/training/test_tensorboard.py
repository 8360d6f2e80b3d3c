"""TensorBoard scalars from real CPU training runs, read back with TensorBoard's own reader."""

from __future__ import annotations

import logging
import re
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.training.harness import train
from training_scripts import tensorboard_scalars
from training_scripts.tensorboard_scalars import (
    GRAD_NORM,
    LEARNING_RATE,
    MFU_PERCENT,
    TOKENS_PER_SECOND,
    TRAIN_LOSS,
    VALIDATION_LOSS,
    Scalars,
)

# DDP: it trains on CPU on both stacks (FSDP2 needs CUDA in torch 2.5.1, the image's).
SHORT = ("--parallelism", "ddp", "--log-interval", "5", "--val-interval", "10", "--checkpoint-interval", "10")


def scalars(directory) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(directory))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def logged(output: str, name: str) -> list[tuple[int, float]]:
    """(step, value) of every rank-0 metric line that carries `name`."""
    return [
        (int(step), float(value))
        for step, value in re.findall(rf"step=(\d+)(?:/\d+)? .*?{name}=([-+0-9.e]+|nan|inf)", output)
    ]


def test_each_attempt_writes_every_scalar_by_global_step(dataset, tmp_path):
    """Two attempts of a run, each writing its own directory as each training job does (SageMaker uploads
    a job's LocalPath to its own prefix): the second resumes from the checkpoint of step 10."""
    board = tmp_path / "tensorboard"
    first = train(dataset, tmp_path, *SHORT, "--max-steps", "20", "--tensorboard-dir", str(board / "1"))
    assert first.returncode == 0, first.output
    second = train(dataset, tmp_path, *SHORT, "--max-steps", "30", "--tensorboard-dir", str(board / "2"))
    assert second.returncode == 0, second.output
    assert "(step 10)" in second.output  # the final step 20 wrote the model, not a checkpoint

    for run, steps, validated in ((first, [5, 10, 15, 20], [10, 20]), (second, [15, 20, 25, 30], [20, 30])):
        written = scalars(board / ("1" if run is first else "2"))
        assert set(written) == {TRAIN_LOSS, VALIDATION_LOSS, LEARNING_RATE, GRAD_NORM, TOKENS_PER_SECOND}
        assert MFU_PERCENT not in written  # no MFU on CPU
        for tag in (TRAIN_LOSS, LEARNING_RATE, GRAD_NORM, TOKENS_PER_SECOND):
            assert [step for step, _ in written[tag]] == steps, tag
        assert [step for step, _ in written[VALIDATION_LOSS]] == validated
        # The values are the ones the log lines (and SageMaker's metric definitions) report.
        for tag, name in (
            (TRAIN_LOSS, "train_loss"),
            (GRAD_NORM, "grad_norm"),
            (VALIDATION_LOSS, "val_loss"),
        ):
            assert [(step, round(value, 4)) for step, value in written[tag]] == logged(run.output, name), tag
        assert [(step, float(f"{value:.3e}")) for step, value in written[LEARNING_RATE]] == logged(
            run.output, "lr"
        )
        assert all(value > 0 for _, value in written[TOKENS_PER_SECOND])


def test_without_tensorboard_training_goes_on_with_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import raises ImportError
    with caplog.at_level(logging.INFO, logger="train"):
        writer = Scalars(str(tmp_path / "tensorboard"))
        writer.add(1, {TRAIN_LOSS: 1.0})
        writer.close()
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No TensorBoard event files" in warnings[0].getMessage()
    assert not (tmp_path / "tensorboard").exists()


def test_other_ranks_write_nothing_and_say_nothing(caplog):
    with caplog.at_level(logging.INFO, logger=tensorboard_scalars.log.name):
        Scalars(None).add(1, {TRAIN_LOSS: 1.0})
    assert caplog.records == []
