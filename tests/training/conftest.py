"""Session fixtures: the dataset and the uninterrupted reference run."""

from __future__ import annotations

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
    """The uninterrupted run that resumed runs must reproduce (FSDP2, synchronous checkpoints)."""
    run = train(dataset, tmp_path_factory.mktemp("reference"))
    assert run.returncode == 0, run.output
    return run
