"""Training jobs run by real local training processes, for the demos (`make demo`).

Each job gets an /opt/ml tree (localaws/opt_ml.py) and SageMaker's training toolkit started on it, which
starts torchrun and train.py on CPU with the job's hyperparameters, as `make local-train` and
tests/training/test_toolkit_launch.py do. S3 is a local folder: `s3://B/K` is `<root>/s3/B/K`. The job's
checkpoint dir is the folder standing for CheckpointConfig.S3Uri (SageMaker syncs /opt/ml/checkpoints
with it), the train and val channels read the local dataset folder, and on success the model dir is
uploaded as SageMaker does by OutputDataConfig.CompressionType (training_jobs.model_uri). The job's
/opt/ml/output/tensorboard (TensorBoardOutputConfig's default LocalPath) is copied to the folder standing
for TensorBoardOutputConfig.S3OutputPath once its process ended, whatever the outcome (SageMaker uploads
it during and after the job: "Prepare a training job to collect TensorBoard output data").

DescribeTrainingJob reports the process's real state: InProgress while it runs (SecondaryStatus
Uploading while its model is archived and its log put into CloudWatch Logs, local_logs.py), then
Completed, or Failed with the toolkit's failure file as the reason. StopTrainingJob sends SIGTERM to its
process group (train.py saves a checkpoint and exits), then the job is Stopped. `capacity_failures=N`
makes the first N jobs fail like a lost capacity block: once the job has written a checkpoint, its
processes get SIGTERM and the job ends Failed with SageMaker's `CapacityError:` reason.
`hang_failures=N` makes the first N jobs hang instead: their hyperparameters get `hang_hyperparameters`
(train.py's `--inject-hang-at-step` and the watchdog's bound) and train.py's watchdog ends the workers.
torchrun restarts them inside the job as often as the request's Environment PET_MAX_RESTARTS allows (the
toolkit starts torchrun with the container's environment), and the restarted workers resume from the
checkpoint; with no restart left, the failure file (`trainstack-fault:infrastructure:hang ...`) becomes the
FailureReason, as on SageMaker.

A team's own code (trainstack.team_code: the request's `sagemaker_submit_directory` hyperparameter, an S3 URI
of a tar.gz) runs as container/train and the toolkit run it: the job's code dir stays empty, the image's
scripts are importable through PYTHONPATH, and the toolkit extracts the bundle into the code dir and launches
its `sagemaker_program` (sagemaker-training files.download_and_extract, entry_point.run). The one step stood
in for is the toolkit's own S3 download (files.s3_download, boto3 with the job's role): the bundle is read
from the local S3 (boto3 in the emulator) and the toolkit is handed the downloaded file, which the same
function extracts. `provisioning_failures=N` makes the first N jobs fail with SageMaker's `CapacityError:`
while Starting, before any process (a script without checkpoints never reaches the other capacity loss).

The request's Environment reaches the processes, as SageMaker sets it in the container ("The environment
variables to set in the Docker container", CreateTrainingJob in botocore's sagemaker model), with the job's
name in TRAINING_JOB_NAME, which SageMaker sets too (sagemaker-training's params.TRAINING_JOB_ENV). A
SageMaker managed MLflow tracking server there (MLFLOW_TRACKING_URI an `mlflow-tracking-server` ARN, which the
`sagemaker-mlflow` plugin resolves to the server on AWS) stands as a local MLflow file store, one folder per
server under <root>/mlflow (`mlflow_store`): the demo reads every attempt's metrics from it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from localaws import opt_ml
from localaws.demo import local_logs
from localaws.emulator.clock import ScaledClock
from localaws.opt_ml import TRAINING_SCRIPTS
from localaws.sagemaker.scripted import CAPACITY_ERROR, CAPACITY_FAILURE, STARTING, ScriptedRun
from localaws.sagemaker.training_jobs import FakeSageMaker, Phase, TrainingJob, model_uri
from training_scripts.metrics import parse_metrics
from training_scripts.mlflow_log import JOB_NAME_ENV, MLFLOW_TRACKING_URI_ENV
from trainstack.profiles import MLFLOW_TRACKING_SERVER_ARN_PATTERN
from trainstack.team_code import BUNDLE_NAME, SUBMIT_DIRECTORY_HYPERPARAMETER

# CPU stands in for the instance's GPUs: two processes per host (the toolkit starts one otherwise).
PROCESSES_PER_HOST = "2"
DATASET_CHANNELS = ("train", "val")
# MLflow 3 serves its file store, for local use, only with this switch (mlflow/store/tracking/file_store.py).
ALLOW_FILE_STORE = {"MLFLOW_ALLOW_FILE_STORE": "true"}


# How often a job to lose its capacity looks for its first checkpoint. The tiny model's steps take about
# 50 ms, so a slower look lets the job train on, even to its end, before the loss reaches it.
CAPACITY_LOSS_POLL_SECONDS = 0.02


@dataclass
class LocalRun:
    base: Path  # the job's /opt/ml
    checkpoint_dir: Path
    process: subprocess.Popen
    log_path: Path
    simulate_capacity_failure: bool
    clock_time: Callable[[], float] = time.time  # now on the emulator's clock (LocalTraining.clock_time)
    capacity_failed: bool = False
    ended: datetime | None = None

    def phase(self, job: TrainingJob) -> Phase:
        # Read once: the supervisor thread sets it meanwhile, and an answer Completed without its
        # TrainingEndTime would be a status read before its fields.
        ended = self.ended
        times = {"TrainingStartTime": job.created} | ({"TrainingEndTime": ended.timestamp()} if ended else {})
        fields = times | {
            key: job.request[key]
            for key in ("HyperParameters", "AlgorithmSpecification", "RoleArn", "OutputDataConfig")
            if key in job.request
        }
        if "TensorBoardOutputConfig" in job.request:
            fields["TensorBoardOutputConfig"] = job.request["TensorBoardOutputConfig"]
        if final := self.final_metrics():
            fields["FinalMetricDataList"] = final
        code = self.process.poll()
        if code is None:
            secondary = "Stopping" if job.stop_requested else "Training"
            return Phase("InProgress", secondary, fields=fields, instances_selected=True)
        if ended is None:  # SageMaker reports the end once the model and the logs are delivered
            return Phase("InProgress", "Uploading", fields=fields, instances_selected=True)
        status, reason = self.outcome(job, code)
        if status == "Completed":
            fields["FinalMetricDataList"] = final_metrics(job.request, self.log_path)
        return Phase(status, status, reason, fields=fields, instances_selected=True)

    def final_metrics(self) -> list[dict[str, Any]]:
        """DescribeTrainingJob's FinalMetricDataList ("the names, values, and dates and times that the
        training algorithm emitted to Amazon CloudWatch", botocore's sagemaker model): assumed the last value
        of each MetricDefinition found in the job's log, for a failed job too; Timestamp: when it was read."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        now = self.clock_time()
        return [
            {"MetricName": name, "Value": values[-1], "Timestamp": now}
            for name, values in parse_metrics(text).items()
            if values
        ]

    def outcome(self, job: TrainingJob, code: int) -> tuple[str, str | None]:
        """How the ended process ends the job: (status, FailureReason)."""
        if self.capacity_failed:
            return "Failed", CAPACITY_ERROR
        if job.stop_requested:
            return "Stopped", None
        if code == 0 and (self.base / "output" / "success").exists():
            return "Completed", None
        failure = self.base / "output" / "failure"
        reason = failure.read_text().strip()[-1000:] if failure.exists() else f"the process exited {code}"
        return "Failed", f"AlgorithmError: {reason}"

    def stop(self, job: TrainingJob) -> None:
        _signal_group(self.process, signal.SIGTERM)


@dataclass
class LocalTraining:
    """The training jobs of one demo, under `root` (S3 in root/s3, jobs in root/jobs)."""

    root: Path
    dataset_dir: Path
    capacity_failures: int = 0
    hang_failures: int = 0
    hang_hyperparameters: dict[str, str] = field(default_factory=dict)
    provisioning_failures: int = 0
    provisioning_failed: int = 0
    logs: Any = None  # a CloudWatch Logs client: each job's log goes there as it ends
    runs: list[LocalRun] = field(default_factory=list)
    # The emulator's clock (serving()): a job's times and its log lines' stamps are read on it, as the Step
    # Functions histories are, since on AWS every service stamps the same time. None: real time.
    clock: ScaledClock | None = None

    def clock_time(self, real_seconds: float | None = None) -> float:
        """A real moment (epoch seconds; now by default) on the emulator's clock."""
        real_seconds = time.time() if real_seconds is None else real_seconds
        return self.clock.at_real(real_seconds) if self.clock else real_seconds

    def local_path(self, s3_uri: str) -> Path:
        return self.root / "s3" / s3_uri.removeprefix("s3://")

    def start(self, job: TrainingJob) -> LocalRun | ScriptedRun:
        if self.provisioning_failed < self.provisioning_failures:
            self.provisioning_failed += 1
            return ScriptedRun([STARTING, CAPACITY_FAILURE])
        request = job.request
        team_code = self.team_code(job)
        # A job without CheckpointConfig (an evaluation) gets a folder of its own that nothing syncs. A
        # profile whose checkpoint_store is s3 or s3-express names the store's URI in checkpoint_dir instead,
        # which train.py reads and writes itself: its local folder stands in for it (assumed equivalent for
        # the demo; the stores themselves are tested against a local S3 endpoint, tests/training/).
        store = request.get("HyperParameters", {}).get("checkpoint_dir", "")
        checkpoints = request.get("CheckpointConfig", {}).get("S3Uri") or (
            store if store.startswith("s3://") else None
        )
        checkpoint_dir = (
            self.local_path(checkpoints) if checkpoints else self.root / "jobs" / job.name / "ckpt"
        )
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        base = self.root / "jobs" / job.name / "ml"
        channel_data = self.channel_data(request)
        opt_ml.lay_out(
            base,
            hyperparameters={
                **request.get("HyperParameters", {}),
                "sagemaker_mpi_num_of_processes_per_host": PROCESSES_PER_HOST,
                **(
                    {"checkpoint_dir": str(checkpoint_dir)} if checkpoints else {}
                ),  # CheckpointConfig.LocalPath
                **(self.hang_hyperparameters if len(self.runs) < self.hang_failures else {}),
                **team_code,
            },
            resources=opt_ml.resource_config(*opt_ml.first_choice(request)),
            channels={name: opt_ml.FILE_CHANNEL for name in channel_data},
            channel_data=channel_data,
            image_code=not team_code,
        )
        log_path = base / "output" / "job.log"
        run = LocalRun(
            base,
            checkpoint_dir,
            _start_toolkit(base, log_path, self.container_environment(job), image_code=not team_code),
            log_path,
            simulate_capacity_failure=len(self.runs) < self.capacity_failures,
            clock_time=self.clock_time,
        )
        self.runs.append(run)
        threading.Thread(target=self._supervise, args=(job, run), daemon=True).start()
        return run

    def team_code(self, job: TrainingJob) -> dict[str, str]:
        """For a request naming a team's code, its `sagemaker_submit_directory` downloaded to the job's folder
        (the toolkit's files.s3_download), as the hyperparameter the toolkit extracts from; else nothing."""
        submitted = job.request.get("HyperParameters", {}).get(SUBMIT_DIRECTORY_HYPERPARAMETER)
        if submitted is None:
            return {}
        import boto3  # as serving() does: boto3 only where a job needs it

        bucket, _, key = json.loads(submitted).removeprefix("s3://").partition("/")
        bundle = self.root / "jobs" / job.name / BUNDLE_NAME
        bundle.parent.mkdir(parents=True, exist_ok=True)
        bundle.write_bytes(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
        return {SUBMIT_DIRECTORY_HYPERPARAMETER: json.dumps(str(bundle))}

    def mlflow_store(self, tracking_server_arn: str) -> Path:
        """The local MLflow file store that stands for a tracking server (module docstring)."""
        return self.root / "mlflow" / tracking_server_arn.rsplit("/", 1)[1]

    def container_environment(self, job: TrainingJob) -> dict[str, str]:
        """The request's Environment and the job's name, a tracking server's ARN replaced by its local
        store's URI."""
        environment = {**job.request.get("Environment", {}), JOB_NAME_ENV: job.name}
        uri = environment.get(MLFLOW_TRACKING_URI_ENV, "")
        if re.match(MLFLOW_TRACKING_SERVER_ARN_PATTERN, uri):
            environment |= {MLFLOW_TRACKING_URI_ENV: self.mlflow_store(uri).as_uri(), **ALLOW_FILE_STORE}
        return environment

    def channel_data(self, request: dict[str, Any]) -> dict[str, Path]:
        """The folder of each channel: the dataset's train and val (FSx or S3, the local dataset folder),
        and any other S3 channel's prefix in local S3 (an evaluation's model and evaluation set)."""
        data = {
            name: self.dataset_dir / name for name in DATASET_CHANNELS if (self.dataset_dir / name).is_dir()
        }
        for channel in request.get("InputDataConfig", []):
            source = channel["DataSource"].get("S3DataSource")
            if channel["ChannelName"] not in DATASET_CHANNELS and source:
                data[channel["ChannelName"]] = self.local_path(source["S3Uri"])
        return data

    def shutdown(self) -> None:
        """Stop whatever still runs (the demo was interrupted)."""
        for run in self.runs:
            if run.process.poll() is None:
                _signal_group(run.process, signal.SIGKILL)

    def _supervise(self, job: TrainingJob, run: LocalRun) -> None:
        """Ends the job: simulated capacity loss after its first new checkpoint, model upload on success."""
        if run.simulate_capacity_failure:
            before = set(run.checkpoint_dir.glob("step_*/COMPLETE"))
            while run.process.poll() is None and not (
                set(run.checkpoint_dir.glob("step_*/COMPLETE")) - before
            ):
                threading.Event().wait(CAPACITY_LOSS_POLL_SECONDS)
            if run.process.poll() is None:
                run.capacity_failed = True
                _signal_group(run.process, signal.SIGTERM)
        code = run.process.wait()
        try:
            self._upload_tensorboard(job, run)
            if run.outcome(job, code)[0] == "Completed":
                self._upload_model(job, run)
            if self.logs is not None:
                local_logs.publish(
                    self.logs,
                    job.name,
                    datetime.fromtimestamp(job.created, UTC),
                    run.log_path,
                    self.clock_time,
                )
        finally:
            run.ended = datetime.fromtimestamp(self.clock_time(), UTC)

    def _upload_model(self, job: TrainingJob, run: LocalRun) -> None:
        model = self.local_path(model_uri(job.request))
        if model.name != "model.tar.gz":
            shutil.copytree(run.base / "model", model)
            return
        model.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(model, "w:gz") as archive:
            for item in sorted((run.base / "model").iterdir()):
                archive.add(item, arcname=item.name)

    def _upload_tensorboard(self, job: TrainingJob, run: LocalRun) -> None:
        board, events = job.request.get("TensorBoardOutputConfig"), run.base / "output" / "tensorboard"
        if board and events.is_dir():
            shutil.copytree(events, self.local_path(board["S3OutputPath"]), dirs_exist_ok=True)


def final_metrics(request: dict[str, Any], log_path: Path) -> list[dict[str, Any]]:
    """DescribeTrainingJob's FinalMetricDataList: for each of the request's MetricDefinitions that matched
    the job's log, its last value (SageMaker's API reference calls them the final values; taking the
    last match is assumed)."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    found = []
    for definition in request.get("AlgorithmSpecification", {}).get("MetricDefinitions", []):
        values = re.findall(definition["Regex"], text)
        if values:
            found.append({"MetricName": definition["Name"], "Value": float(values[-1])})
    return found


def _start_toolkit(
    base: Path, log_path: Path, container_environment: dict[str, str], *, image_code: bool = True
) -> subprocess.Popen:
    # A team's code: the image's scripts (the runtime library) stay importable, as container/train keeps them.
    python_path = (
        {}
        if image_code
        else {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(TRAINING_SCRIPTS), os.environ.get("PYTHONPATH")]))
        }
    )
    environment = {
        **os.environ,
        **container_environment,
        "SAGEMAKER_BASE_DIR": str(base),
        "SM_STUDIO_LOCAL_MODE": "true",  # else the toolkit waits to resolve host algo-1
        "SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main",
        "MLFLOW_DISABLE_TELEMETRY": "true",  # as the image's ENV sets it (container/Dockerfile)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "OMP_NUM_THREADS": "1",
        # torchrun's --master-port from its environment (the toolkit passes none: 29500): on SageMaker each
        # job has hosts of its own; here every job shares one, and a job still ending (a lost capacity's
        # workers) or another test's would hold 29500.
        "PET_MASTER_PORT": str(_free_port()),
        **python_path,
    }
    with log_path.open("w") as log:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "train")],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop and capacity loss signal all of it
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


@contextmanager
def serving(
    training: LocalTraining, monkeypatch, clock: ScaledClock | None = None
) -> Iterator[FakeSageMaker]:
    """A FakeSageMaker running its jobs as `training`'s processes, behind moto (inside mock_aws), its jobs'
    logs put into moto's CloudWatch Logs; whatever still runs is stopped on the way out. `clock`: the
    emulator's, on which the jobs' times and log lines are stamped (else real time)."""
    import boto3

    from localaws.sagemaker.routes import install_fake_sagemaker

    training.clock = clock
    sagemaker = FakeSageMaker(behaviour=training, now=training.clock_time)
    training.logs = boto3.client("logs")
    install_fake_sagemaker(sagemaker, monkeypatch)
    try:
        yield sagemaker
    finally:
        training.shutdown()
