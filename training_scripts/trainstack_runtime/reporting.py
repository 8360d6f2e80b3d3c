"""Where a team's numbers go: the job log lines the run report's goodput ledger and SageMaker's metric
definitions read, TensorBoard event files, the round's MLflow run, and the evaluation output.

The ledger reads three lines of rank 0 (trainstack/report/progress.py): `Training <model> on <N> ranks`
(set-up is done), `step=<N> ...` (step N is done) and the checkpoint lines checkpoint.py writes itself.
A value's line key is its TensorBoard tag with `/` as `_`, except the product's own metrics, which keep
the keys METRIC_DEFINITIONS match (train/loss: train_loss=, validation/loss: val_loss=, ...).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from metrics import EVALUATION_FILE, METRICS_KEY
from tensorboard_scalars import (
    GRAD_NORM,
    LEARNING_RATE,
    MFU_PERCENT,
    TOKENS_PER_SECOND,
    TRAIN_LOSS,
    VALIDATION_LOSS,
)
from trainstack_runtime.job import Job

log = logging.getLogger("train")

LINE_KEYS = {
    TRAIN_LOSS: "train_loss",
    VALIDATION_LOSS: "val_loss",
    GRAD_NORM: "grad_norm",
    LEARNING_RATE: "lr",
    TOKENS_PER_SECOND: "tokens_per_sec",
    MFU_PERCENT: "mfu_pct",
}


class Metrics:
    """Rank 0 logs and records; the other ranks' calls do nothing. Close it when training ends."""

    def __init__(self, job: Job, model: str, parameters: dict[str, Any] | None = None):
        """`model` names what trains in the log's start line; `parameters` go to the MLflow run (the
        team's hyperparameters by default)."""
        self.job = job
        self._sinks = job.scalars(job.hyperparameters if parameters is None else parameters)
        if job.is_main:
            # One word: the run report reads `Training <model> on <N> ranks` (trainstack/report/progress.py).
            log.info("Training %s on %d ranks.", "-".join(model.split()), job.world_size)

    def log(self, step: int, values: dict[str, float | None]) -> None:
        """Values after step `step` by TensorBoard tag (`train/loss`, `validation/accuracy`): one log line,
        TensorBoard scalars and MLflow metrics. None values are left out."""
        known = {tag: value for tag, value in values.items() if value is not None}
        if not self.job.is_main or not known:
            return
        pairs = " ".join(
            f"{LINE_KEYS.get(tag, tag.replace('/', '_'))}={value:.6g}" for tag, value in known.items()
        )
        log.info("step=%d %s", step, pairs)
        self._sinks.add(step, known)

    def close(self) -> None:
        self._sinks.close()


def write_evaluation(values: dict[str, float], directory: str | Path | None = None) -> Path:
    """The evaluation output: `evaluation.json` in `directory` (SM_MODEL_DIR by default: the evaluation
    job uploads it) as evaluate.py writes it, and one `eval_<name>=<value>` line that the evaluation job's
    metric definitions read. Call it on one rank."""
    out = Path(directory or os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    out.mkdir(parents=True, exist_ok=True)
    document = {
        METRICS_KEY: {name: {"value": float(value)} for name, value in values.items()},
        "code_version": os.environ.get("TRAINSTACK_CODE_VERSION", "unknown"),
    }
    path = out / EVALUATION_FILE
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(" ".join(f"eval_{name}={float(value):.6f}" for name, value in values.items()), flush=True)
    return path
