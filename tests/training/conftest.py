"""Session fixtures: the dataset and the uninterrupted reference run."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.training.harness import Run, train, write_learnable_shards


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_learnable_shards(root / "train", 8_000, seed=1)  # 31 steps per epoch: runs cross an epoch
    write_learnable_shards(root / "val", 4_000, seed=2)
    return root


@pytest.fixture(scope="session")
def reference_run(dataset, tmp_path_factory) -> Run:
    """The uninterrupted run that resumed runs must reproduce (DDP, synchronous checkpoints)."""
    run = train(dataset, tmp_path_factory.mktemp("reference"))
    assert run.returncode == 0, run.output
    return run


@pytest.fixture(autouse=True)
def restore_root_logging():
    """train.main() called in-process points the root logger at pytest's captured stdout, which closes
    after the test: put the previous handlers back so later tests in this process can still log."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
