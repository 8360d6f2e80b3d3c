"""train.py's MLflow run (training_scripts/mlflow_log.py): the scalars TensorBoard gets, in an MLflow
store named by MLFLOW_TRACKING_URI (here a local file store, as the demo uses), and one warning where the
client is missing."""

from __future__ import annotations

import logging
import sys

from training_scripts.mlflow_log import MlflowLog
from training_scripts.tensorboard_scalars import TRAIN_LOSS, VALIDATION_LOSS, Scalars


def test_the_scalars_and_parameters_land_in_an_mlflow_run_named_after_the_job(tmp_path, monkeypatch):
    import mlflow  # in the image (container/requirements.txt), so in .venv-image: never skipped

    store = tmp_path / "mlruns"
    # MLflow 3 keeps its file store, for local use, behind this switch (mlflow/store/tracking/file_store.py).
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "llama-1b-smddp")
    monkeypatch.setenv("TRAINING_JOB_NAME", "trainstack-nightly-1")
    scalars = Scalars(None, MlflowLog(True, {"max_steps": 20, "seq_len": 1024}))
    scalars.add(10, {TRAIN_LOSS: 2.5, VALIDATION_LOSS: None})
    scalars.add(20, {TRAIN_LOSS: 2.0, VALIDATION_LOSS: 2.2})
    scalars.close()
    client = mlflow.tracking.MlflowClient(store.as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("llama-1b-smddp").experiment_id])
    assert run.info.run_name == "trainstack-nightly-1" and run.info.status == "FINISHED"
    assert run.data.params == {"max_steps": "20", "seq_len": "1024"}
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, TRAIN_LOSS)] == [
        (10, 2.5),
        (20, 2.0),
    ]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, VALIDATION_LOSS)] == [
        (20, 2.2)
    ]


def test_without_the_client_training_goes_on_with_one_warning(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import raises ImportError
    monkeypatch.setenv(
        "MLFLOW_TRACKING_URI", "arn:aws:sagemaker:us-east-1:111111111111:mlflow-tracking-server/t"
    )
    with caplog.at_level(logging.INFO, logger="train"):
        scalars = Scalars(None, MlflowLog(True, {"max_steps": 20}))
        scalars.add(1, {TRAIN_LOSS: 1.0})
        scalars.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "train" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No MLflow run: MLFLOW_TRACKING_URI is set" in warnings[0]


def test_an_unreachable_tracking_server_ends_the_logging_not_the_training(monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port: nothing answers
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with caplog.at_level(logging.INFO, logger="train"):
        scalars = Scalars(None, MlflowLog(True, {"max_steps": 20}))
        scalars.add(1, {TRAIN_LOSS: 1.0})
        scalars.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "train" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("MLflow logging stopped: ")


def test_other_ranks_and_jobs_without_a_tracking_server_stay_silent(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with caplog.at_level(logging.INFO, logger="train"):
        MlflowLog(True, {}).add(1, {TRAIN_LOSS: 1.0})
        monkeypatch.setenv(
            "MLFLOW_TRACKING_URI", "arn:aws:sagemaker:us-east-1:111111111111:mlflow-tracking-server/t"
        )
        MlflowLog(False, {}).add(1, {TRAIN_LOSS: 1.0})
    assert caplog.records == []
