"""Real CPU training runs (torchrun, 2 processes, gloo) on a small learnable dataset."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = REPO_ROOT / "training_scripts"
TRAIN_PY = SCRIPTS / "train.py"
# train.py imports its siblings as top-level modules, as it does in /opt/ml/code.
sys.path.insert(0, str(SCRIPTS))

# One configuration for every run that is compared with the reference run. DDP: the image's torch 2.5.1
# runs FSDP2 only on CUDA (FSDP2 runs are marked fsdp2 and run on the newer torch).
MAX_STEPS = 40
CHECKPOINT_INTERVAL = 10
TRAIN_FLAGS = [
    "--parallelism",
    "ddp",
    "--export-dtype",  # exact comparisons; the default (bfloat16) export is tested by the toolkit launch
    "float32",
    "--model-preset",
    "tiny",
    "--seq-len",
    "32",
    "--micro-batch-size",
    "2",
    "--grad-accum",
    "2",
    "--max-steps",
    str(MAX_STEPS),
    "--learning-rate",
    "3e-3",
    "--lr-reference-batch-size",
    "8",
    "--warmup-steps",
    "5",
    "--log-interval",
    "5",
    "--val-interval",
    "20",
    "--val-batches",
    "2",
    "--checkpoint-interval",
    str(CHECKPOINT_INTERVAL),
    "--keep-checkpoints",
    "2",
    "--seed",
    "7",
]


def write_learnable_shards(directory: Path, tokens: int, seed: int) -> None:
    """Two shards of a noisy repeating pattern: a tiny model learns it within a few dozen steps."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pattern = np.tile(np.arange(3, 40, dtype=np.uint16), tokens // 37 + 1)[:tokens]
    noise = rng.random(tokens) < 0.05
    pattern[noise] = rng.integers(0, 256, noise.sum())
    half = tokens // 2
    pattern[:half].astype("<u2").tofile(directory / "shard_00000.bin")
    pattern[half:].astype("<u2").tofile(directory / "shard_00001.bin")


@dataclass
class Run:
    returncode: int
    output: str
    model_dir: Path
    checkpoint_dir: Path


def torchrun_command(*flags: str, nproc: int = 2, script: Path = TRAIN_PY) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(script),
        *flags,
    ]


def run_dirs(dataset: Path, out: Path) -> list[str]:
    return [
        "--train-dir",
        str(dataset / "train"),
        "--val-dir",
        str(dataset / "val"),
        "--model-dir",
        str(out / "model"),
        "--checkpoint-dir",
        str(out / "checkpoints"),
    ]


def train(
    dataset: Path,
    out: Path,
    *extra: str,
    flags: list[str] = TRAIN_FLAGS,
    nproc: int = 2,
    env: dict | None = None,
) -> Run:
    """Train to completion (or failure); output is stdout and stderr of every rank; `env` adds variables."""
    result = subprocess.run(
        torchrun_command(*flags, *run_dirs(dataset, out), *extra, nproc=nproc),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    return Run(result.returncode, result.stdout + result.stderr, out / "model", out / "checkpoints")


class Background:
    """A training run in the background, to signal or kill while it trains."""

    def __init__(
        self,
        dataset: Path | None,
        out: Path,
        *extra: str,
        flags: list[str] = TRAIN_FLAGS,
        command: list[str] | None = None,
        env: dict | None = None,
    ):
        """train.py on `dataset`, or `command` (another script) with `env` added to the environment."""
        out.mkdir(parents=True, exist_ok=True)
        self.log_path = out / "log.txt"
        self.model_dir, self.checkpoint_dir = out / "model", out / "checkpoints"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            command or torchrun_command(*flags, *run_dirs(dataset, out), *extra),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    def wait_for(self, condition, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process.poll() is None, f"run ended before {what}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{self.output()}"
            time.sleep(0.05)

    def kill_all(self) -> None:
        """SIGKILL torchrun and its workers (they run in sessions of their own), like a lost instance."""
        root = psutil.Process(self.process.pid)
        for process in [*root.children(recursive=True), root]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()

    def finish(self, timeout: float = 120) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def output(self) -> str:
        return self.log_path.read_text()


def load_weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(model_dir / "model.safetensors")


def max_weight_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[name] - b[name]).abs().max().item() for name in a)
