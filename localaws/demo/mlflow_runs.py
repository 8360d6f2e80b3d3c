"""What the demo's jobs logged to MLflow: the runs of the profile's experiment in the local store that
stands for its tracking server (localaws.sagemaker.local_processes), one line each, read back with MLflow's
client."""

from __future__ import annotations

import os
from pathlib import Path

from localaws.sagemaker.local_processes import ALLOW_FILE_STORE
from training_scripts.mlflow_log import FAILURE_TAG
from training_scripts.tensorboard_scalars import TRAIN_LOSS, VALIDATION_LOSS


def run_lines(store: Path, experiment: str) -> list[str]:
    """One line per MLflow run of `experiment` in `store`, oldest first: the job it is named after, its
    status, the steps it logged a train loss at and the last one, its last validation loss, and for a round
    ended by an in-job restart the fault token of the line that ended it."""
    os.environ.update(ALLOW_FILE_STORE)  # read at each call to the file store
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store.as_uri())
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return [f"no MLflow experiment {experiment} in {store}"]
    lines = []
    for run in client.search_runs([found.experiment_id], order_by=["attribute.start_time ASC"]):
        history = sorted(client.get_metric_history(run.info.run_id, TRAIN_LOSS), key=lambda m: m.step)
        line = f"{run.info.run_name}: {run.info.status}, {TRAIN_LOSS} at steps "
        line += ", ".join(str(metric.step) for metric in history) or "none"
        if history:
            line += f" (the last {history[-1].value:.4f})"
        if VALIDATION_LOSS in run.data.metrics:
            line += f", {VALIDATION_LOSS} {run.data.metrics[VALIDATION_LOSS]:.4f}"
        if FAILURE_TAG in run.data.tags:
            line += f"; ended by {run.data.tags[FAILURE_TAG].split(' ', 1)[0]}"
        lines.append(line)
    return lines
