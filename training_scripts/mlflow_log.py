"""Rank 0's parameters and training scalars in MLflow, beside the TensorBoard event files.

The job finds its tracking server in MLflow's own variables, which the pipeline sets from the profile's
`mlflow_tracking_server_arn` (trainstack.job_request): MLFLOW_TRACKING_URI (a SageMaker managed MLflow
tracking-server ARN, which the `sagemaker-mlflow` plugin resolves and signs for) and
MLFLOW_EXPERIMENT_NAME (the profile). The run is named after the training job (TRAINING_JOB_NAME, which
SageMaker sets in the container and sagemaker-training's environment.py reads), so each attempt of a run
is its own MLflow run. CreateTrainingJob's MlflowConfig is not used: AWS documents it for serverless
model customization jobs only (docs/training.md, "MLflow").

A run whose round reports a fault (faults.report, whose listeners the runtime library points at
`MlflowLog.fail`: an error, the watchdog's trip, a refused restart) ends FAILED at once on rank 0, with
the job's failure line as its `trainstack.failure` tag (MLflow runs have no field for why they ended):
the last round of a job whose in-job restarts ran out has no round after it. A round killed before
rank 0 could say so (torchrun stops every worker when one fails) is ended by the next round: rank 0
reads the run's id from the record the killed round left ($SM_OUTPUT_DIR/restarts/round-<N>.mlflow-run)
and marks it FAILED with the line that ended it. The calls are the ones a run already makes (LogBatch for
the tag, UpdateRun for the status): the job role's grant stays as it is.

The client is optional (container/requirements.txt installs `mlflow-skinny` and `sagemaker-mlflow`):
where it is missing, or the variable is unset, training goes on without MLflow and says so once. A
local run may point MLFLOW_TRACKING_URI at a directory (MLflow's file store), as the tests do.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("train")

MLFLOW_TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
MLFLOW_EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
JOB_NAME_ENV = "TRAINING_JOB_NAME"
RUN_RECORD = "mlflow-run"  # a round's record (in_job_restart.round_record) holding its MLflow run's id
FAILURE_TAG = "trainstack.failure"
TAG_VALUE_LIMIT = 5000  # characters of a tag value MLflow's stores accept (the lowest, older servers')


class MlflowLog:
    """One MLflow run of this job; does nothing on other ranks or without a tracking URI."""

    def __init__(self, is_main: bool, parameters: Mapping[str, Any], run_record: Path | None = None):
        """`run_record`: where this round leaves its run's id, for the round after it."""
        self._mlflow = None
        self._run_id: str | None = None
        self._run_record = run_record
        uri = os.environ.get(MLFLOW_TRACKING_URI_ENV)
        if not is_main or not uri:
            return
        try:
            import mlflow
        except ImportError as error:
            log.warning(
                "No MLflow run: %s is set but the client is missing (%s; pip install mlflow-skinny "
                "sagemaker-mlflow).",
                MLFLOW_TRACKING_URI_ENV,
                error,
            )
            return
        experiment = os.environ.get(MLFLOW_EXPERIMENT_ENV, "trainstack")
        self._mlflow = mlflow
        if self._guarded(lambda: self._start(uri, experiment, parameters)):
            self._run_id = mlflow.active_run().info.run_id
            log.info("MLflow run %s in experiment %s.", self._run_id, experiment)

    def _start(self, uri: str, experiment: str, parameters: Mapping[str, Any]) -> None:
        self._mlflow.set_tracking_uri(uri)
        self._mlflow.set_experiment(experiment)
        run = self._mlflow.start_run(run_name=os.environ.get(JOB_NAME_ENV))
        if self._run_record is not None:
            self._run_record.parent.mkdir(parents=True, exist_ok=True)
            self._run_record.write_text(run.info.run_id)
        # MLflow keeps parameter values as text of at most 6,000 characters.
        self._mlflow.log_params({name: str(value)[:6000] for name, value in parameters.items()})

    def _guarded(self, call: Callable[[], Any]) -> bool:
        """Run an MLflow call; a failure (server unreachable, access denied) ends this job's MLflow
        logging with one warning, never its training: the metrics are a side channel."""
        try:
            call()
        except Exception as error:  # MLflow's, HTTP and credential errors alike
            log.warning("MLflow logging stopped: %s", error)
            self._mlflow = None
            return False
        return True

    def add(self, step: int, values: Mapping[str, float | None]) -> None:
        """The known values at `step` (the TensorBoard tags as metric names)."""
        if self._mlflow is None:
            return
        known = {tag: float(value) for tag, value in values.items() if value is not None}
        if known:
            self._guarded(lambda: self._mlflow.log_metrics(known, step=step))

    def close(self) -> None:
        if self._mlflow is not None:
            self._guarded(self._mlflow.end_run)
            self._mlflow = None

    def fail(self, fault: str) -> None:
        """End the run FAILED with `fault`, the job's failure line (a faults.REPORT_LISTENERS listener; a
        no-op once the run has ended). Any thread may call it (the watchdog's does): the client call names
        the run, where MLflow's fluent API keeps the active run per thread."""
        if self._mlflow is not None:
            end_failed_run(os.environ[MLFLOW_TRACKING_URI_ENV], self._run_id, fault, "this round")
            # In the thread that started the run, MLflow would end it FINISHED at exit (its atexit hook):
            # leave it FAILED. Another thread has no active run: a no-op there.
            self._guarded(lambda: self._mlflow.end_run(status="FAILED"))
            self._mlflow = None


def end_interrupted_run(run_record: Path | None, fault: str) -> None:
    """In a restarted round, on rank 0: the run of the round before (its id in `run_record`) ends FAILED
    with `fault`, the line that ended it (module docstring). Nothing without a record or a client; a
    failing call is one warning, never the training's end."""
    uri = os.environ.get(MLFLOW_TRACKING_URI_ENV)
    if run_record is None or not uri or not run_record.exists():
        return
    end_failed_run(uri, run_record.read_text().strip(), fault, "the interrupted round")


def end_failed_run(uri: str, run_id: str, fault: str, whose: str) -> None:
    """Tag run `run_id` with `fault` and end it FAILED; a failing call is one warning."""
    try:
        from mlflow.entities import RunTag
        from mlflow.tracking import MlflowClient
    except ImportError:
        return  # MlflowLog says so once
    try:
        client = MlflowClient(uri)
        client.log_batch(run_id, tags=[RunTag(FAILURE_TAG, fault[:TAG_VALUE_LIMIT])])
        client.set_terminated(run_id, status="FAILED")
    except Exception as error:  # MLflow's, HTTP and credential errors alike
        log.warning("The MLflow run %s of %s stays RUNNING: %s", run_id, whose, error)
        return
    log.info("MLflow run %s of %s ended FAILED: %s", run_id, whose, fault)
