"""Session fixtures: the dataset and the uninterrupted reference run."""

from __future__ import annotations

import fcntl
import json
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
def reference_run(dataset, tmp_path_factory, worker_id) -> Run:
    """The uninterrupted run that resumed runs must reproduce (DDP, synchronous checkpoints). Under xdist
    the first worker to need it trains it, in the suite run's own temporary folder, and the others wait
    for it and read it (a 2-process training each; the tests only read its files). The dataset every
    worker writes is the same (seeded)."""
    if worker_id == "master":
        return _trained_reference(dataset, tmp_path_factory.mktemp("reference"))
    shared = tmp_path_factory.getbasetemp().parent / "reference"  # this run's, every worker's
    with open(shared.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = shared / "run.json"
        if record.exists():
            kept = json.loads(record.read_text())
            return Run(
                kept["returncode"], kept["output"], Path(kept["model_dir"]), Path(kept["checkpoint_dir"])
            )
        run = _trained_reference(dataset, shared)
        record.write_text(
            json.dumps(
                {
                    "returncode": run.returncode,
                    "output": run.output,
                    "model_dir": str(run.model_dir),
                    "checkpoint_dir": str(run.checkpoint_dir),
                }
            )
        )
        return run


def _trained_reference(dataset: Path, out: Path) -> Run:
    run = train(dataset, out)
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
