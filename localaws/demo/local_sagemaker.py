"""SageMaker training simulated by real local training processes, behind moto's SageMaker API.

CreateTrainingJob lays out an /opt/ml tree for the job (hyperparameters, input and resource config,
the code from training_scripts/, as the image's Dockerfile copies it) and starts SageMaker's training
toolkit on it, which starts torchrun and train.py on CPU with the job's hyperparameters, exactly as
`make local-train` and tests/training/test_toolkit_launch.py do. S3 is a local folder: `s3://B/K`
is `<root>/s3/B/K`. The job's checkpoint dir is the folder standing for CheckpointConfig.S3Uri
(SageMaker syncs /opt/ml/checkpoints with it), every input channel reads the local dataset folder,
and on success the model dir is uploaded as SageMaker does by OutputDataConfig.CompressionType: with NONE
its files as they are under `<S3OutputPath><job>/output/model/` (the layout of AWS's own examples,
aws/sagemaker-python-sdk v3-examples model_builder_deployment_notebook.ipynb: `<output>/<job>/output/model/
config.json`; S3ModelArtifacts naming that prefix with its trailing slash is assumed), otherwise (GZIP, the
default) as `<S3OutputPath><job>/output/model.tar.gz`. The job's /opt/ml/output/tensorboard
(TensorBoardOutputConfig's default LocalPath) is copied to the folder standing for
TensorBoardOutputConfig.S3OutputPath once its process ended, whatever the outcome (SageMaker uploads it
during and after the job: "Prepare a training job to collect TensorBoard output data").

DescribeTrainingJob reports that process's real state: InProgress while it runs (SecondaryStatus
Uploading while its model is archived and its log put into CloudWatch Logs, local_logs.py), then
Completed, or Failed with the toolkit's failure reason. StopTrainingJob sends SIGTERM to its process group
(train.py saves a checkpoint and exits), then the job is Stopped. `capacity_failures=N` makes the
first N jobs fail like a lost capacity block: once the job has written a checkpoint, its
processes get SIGTERM and the job ends Failed with a `CapacityError:` reason, as SageMaker words it.
`hang_failures=N` makes the first N jobs hang instead: their hyperparameters get `hang_hyperparameters`
(train.py's hang injection, `--inject-hang-at-step`, and the watchdog's bound), so that a rank stops in
the training loop, train.py's watchdog ends the job and its failure file (`trainstack-fault:
infrastructure:hang ...`) becomes the FailureReason, as on SageMaker.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

from localaws.demo import local_logs
from localaws.demo.synthesized import ACCOUNT

TRAINING_SCRIPTS = Path(__file__).resolve().parents[2] / "training_scripts"
CAPACITY_ERROR = (
    "CapacityError: Unable to provision requested ML compute capacity. "
    "Please retry using a different ML instance type."
)
# CPU stands in for the instance's GPUs: two processes per host (the toolkit starts one otherwise).
PROCESSES_PER_HOST = "2"


class LocalSageMakerError(Exception):
    """An error SageMaker's API answers with: (code, message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class LocalJob:
    request: dict[str, Any]
    base: Path  # the job's /opt/ml
    checkpoint_dir: Path
    process: subprocess.Popen
    created: datetime
    simulate_capacity_failure: bool
    log_path: Path
    stop_requested: bool = False
    capacity_failed: bool = False
    ended: datetime | None = None
    tags: list[dict[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.request["TrainingJobName"]

    def status(self) -> tuple[str, str, str | None]:
        """(TrainingJobStatus, SecondaryStatus, FailureReason) from the process."""
        code = self.process.poll()
        if code is None:
            return "InProgress", "Stopping" if self.stop_requested else "Training", None
        if self.ended is None:  # SageMaker reports the end once the model and the logs are delivered
            return "InProgress", "Uploading", None
        return self.outcome(code)

    def outcome(self, code: int) -> tuple[str, str, str | None]:
        """How the ended process ends the job."""
        if self.capacity_failed:
            return "Failed", "Failed", CAPACITY_ERROR
        if self.stop_requested:
            return "Stopped", "Stopped", None
        if code == 0 and (self.base / "output" / "success").exists():
            return "Completed", "Completed", None
        failure = self.base / "output" / "failure"
        reason = failure.read_text().strip()[-1000:] if failure.exists() else f"the process exited {code}"
        return "Failed", "Failed", f"AlgorithmError: {reason}"


class LocalSageMaker:
    """The training jobs of one demo, under `root` (S3 in root/s3, jobs in root/jobs)."""

    def __init__(
        self,
        root: Path,
        dataset_dir: Path,
        capacity_failures: int = 0,
        hang_failures: int = 0,
        hang_hyperparameters: dict[str, str] | None = None,
    ) -> None:
        self.root, self.dataset_dir = root, dataset_dir
        self.capacity_failures = capacity_failures
        self.hang_failures, self.hang_hyperparameters = hang_failures, hang_hyperparameters or {}
        self.jobs: dict[str, LocalJob] = {}
        self.logs = None  # a CloudWatch Logs client once serving(): each job's log goes there as it ends
        self._lock = threading.Lock()

    def local_path(self, s3_uri: str) -> Path:
        bucket_and_key = s3_uri.removeprefix("s3://")
        return self.root / "s3" / bucket_and_key

    # ------------------------------------------------------------------ API

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request["TrainingJobName"]
        with self._lock:
            if name in self.jobs:
                raise LocalSageMakerError("ResourceInUse", f"Training job names must be unique: {name}")
            checkpoint_dir = self.local_path(request["CheckpointConfig"]["S3Uri"])
            base = self.root / "jobs" / name / "ml"
            hangs = self.hang_hyperparameters if len(self.jobs) < self.hang_failures else {}
            self._lay_out(base, request, checkpoint_dir, hangs)
            log_path = base / "output" / "job.log"
            simulate = len(self.jobs) < self.capacity_failures
            job = LocalJob(
                request=request,
                base=base,
                checkpoint_dir=checkpoint_dir,
                process=self._start(base, log_path),
                created=datetime.now(UTC),
                simulate_capacity_failure=simulate,
                log_path=log_path,
                tags=list(request.get("Tags", [])),
            )
            self.jobs[name] = job
        threading.Thread(target=self._supervise, args=(job,), daemon=True).start()
        return {"TrainingJobArn": self.arn(name)}

    def describe(self, name: str) -> dict[str, Any]:
        job = self._job(name)
        status, secondary, reason = job.status()
        request = job.request
        resources = dict(request["ResourceConfig"])
        preferences = resources.get("InstancePreferences")
        if preferences:  # SageMaker launches on the first preference with capacity: here, the first
            resources["SelectedInstanceType"] = preferences[0]["InstanceType"]
            resources["SelectedInstanceCount"] = preferences[0].get("InstanceCount", 1)
        answer = {
            "TrainingJobName": job.name,
            "TrainingJobArn": self.arn(job.name),
            "TrainingJobStatus": status,
            "SecondaryStatus": secondary,
            "HyperParameters": request.get("HyperParameters", {}),
            "AlgorithmSpecification": request["AlgorithmSpecification"],
            "RoleArn": request["RoleArn"],
            "ResourceConfig": resources,
            "StoppingCondition": request["StoppingCondition"],
            "CheckpointConfig": request.get("CheckpointConfig", {}),
            "OutputDataConfig": request["OutputDataConfig"],
            "ModelArtifacts": {"S3ModelArtifacts": self._model_uri(request)},
            "CreationTime": job.created.timestamp(),
            "TrainingStartTime": job.created.timestamp(),
        }
        if "TensorBoardOutputConfig" in request:
            answer["TensorBoardOutputConfig"] = request["TensorBoardOutputConfig"]
        if job.ended:
            answer["TrainingEndTime"] = job.ended.timestamp()
        if reason:
            answer["FailureReason"] = reason
        return answer

    def stop(self, name: str) -> None:
        job = self._job(name)
        if job.status()[0] != "InProgress":
            raise LocalSageMakerError("ValidationException", f"The job {name} is not in progress.")
        job.stop_requested = True
        _signal_group(job.process, signal.SIGTERM)

    def list(self, name_contains: str = "") -> list[dict[str, Any]]:
        with self._lock:
            jobs = [job for job in self.jobs.values() if name_contains in job.name]
        return [
            {
                "TrainingJobName": job.name,
                "TrainingJobArn": self.arn(job.name),
                "CreationTime": job.created.timestamp(),
                "TrainingJobStatus": job.status()[0],
            }
            for job in sorted(jobs, key=lambda job: job.created, reverse=True)
        ]

    def search(self, request: dict[str, Any]) -> dict[str, Any]:
        filters = request.get("SearchExpression", {}).get("Filters", [])
        results = []
        for summary in self.list():
            job = self._job(summary["TrainingJobName"])
            facts = {f"Tags.{tag['Key']}": tag["Value"] for tag in job.tags}
            facts["TrainingJobStatus"] = summary["TrainingJobStatus"]
            if all(facts.get(item["Name"]) == item["Value"] for item in filters):
                results.append(
                    {"TrainingJob": {key: summary[key] for key in ("TrainingJobName", "TrainingJobStatus")}}
                )
        return {"Results": results}

    def add_tags(self, arn: str, tags: list[dict[str, str]]) -> None:
        name = next((job for job in self.jobs.values() if self.arn(job.name) == arn), None)
        if name is not None:
            name.tags.extend(tags)

    def arn(self, name: str) -> str:
        region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
        return f"arn:aws:sagemaker:{region}:{ACCOUNT}:training-job/{name.lower()}"

    def shutdown(self) -> None:
        """Stop whatever still runs (the demo was interrupted)."""
        for job in self.jobs.values():
            if job.process.poll() is None:
                _signal_group(job.process, signal.SIGKILL)

    # ------------------------------------------------------------------ jobs

    def _job(self, name: str) -> LocalJob:
        with self._lock:
            # ARNs are in lower case; a job is found by its name in any case (assumed: docs/emulator.md).
            found = self.jobs.get(name) or next(
                (job for key, job in self.jobs.items() if key.lower() == name.lower()), None
            )
            if found is None:
                raise LocalSageMakerError("ValidationException", "Requested resource not found.")
            return found

    def _model_uri(self, request: dict[str, Any]) -> str:
        output = request["OutputDataConfig"]["S3OutputPath"].rstrip("/")
        if _uncompressed(request):
            return f"{output}/{request['TrainingJobName']}/output/model/"
        return f"{output}/{request['TrainingJobName']}/output/model.tar.gz"

    def _lay_out(
        self, base: Path, request: dict[str, Any], checkpoint_dir: Path, injected: dict[str, str]
    ) -> None:
        """What SageMaker lays out before it starts the container (`injected`: a simulated fault's
        hyperparameters)."""
        config = base / "input" / "config"
        config.mkdir(parents=True)
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        hyperparameters = {
            **request.get("HyperParameters", {}),
            "sagemaker_mpi_num_of_processes_per_host": PROCESSES_PER_HOST,
            "checkpoint_dir": str(checkpoint_dir),  # CheckpointConfig.LocalPath, synced with S3Uri
            **injected,
        }
        (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
        (config / "resourceconfig.json").write_text(
            json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"})
        )
        channel = {
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        }
        channels = {}
        for name in ("train", "val"):  # the FSx or S3 channel of the dataset: the local dataset folder
            if (self.dataset_dir / name).is_dir():
                channels[name] = channel
                (base / "input" / "data").mkdir(parents=True, exist_ok=True)
                (base / "input" / "data" / name).symlink_to((self.dataset_dir / name).resolve())
        (config / "inputdataconfig.json").write_text(json.dumps(channels))
        shutil.copytree(TRAINING_SCRIPTS, base / "code", ignore=shutil.ignore_patterns("__pycache__"))
        (base / "output").mkdir()
        (base / "model").mkdir()

    def _start(self, base: Path, log_path: Path) -> subprocess.Popen:
        environment = {
            **os.environ,
            "SAGEMAKER_BASE_DIR": str(base),
            "SM_STUDIO_LOCAL_MODE": "true",  # else the toolkit waits to resolve host algo-1
            "SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "OMP_NUM_THREADS": "1",
        }
        with log_path.open("w") as log:
            return subprocess.Popen(
                [str(Path(sys.executable).parent / "train")],
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop and capacity loss signal all of it
            )

    def _supervise(self, job: LocalJob) -> None:
        """Ends the job: simulated capacity loss after its first new checkpoint, model upload on success."""
        if job.simulate_capacity_failure:
            before = set(job.checkpoint_dir.glob("step_*/COMPLETE"))
            while job.process.poll() is None and not (
                set(job.checkpoint_dir.glob("step_*/COMPLETE")) - before
            ):
                threading.Event().wait(0.5)
            if job.process.poll() is None:
                job.capacity_failed = True
                _signal_group(job.process, signal.SIGTERM)
        code = job.process.wait()
        try:
            self._upload_tensorboard(job)
            if job.outcome(code)[0] == "Completed":
                model = self.local_path(self._model_uri(job.request))
                if _uncompressed(job.request):
                    shutil.copytree(job.base / "model", model)
                else:
                    model.parent.mkdir(parents=True, exist_ok=True)
                    with tarfile.open(model, "w:gz") as archive:
                        for item in sorted((job.base / "model").iterdir()):
                            archive.add(item, arcname=item.name)
            if self.logs is not None:
                local_logs.publish(self.logs, job.name, job.created, job.log_path)
        finally:
            job.ended = datetime.now(UTC)

    def _upload_tensorboard(self, job: LocalJob) -> None:
        board, events = job.request.get("TensorBoardOutputConfig"), job.base / "output" / "tensorboard"
        if board and events.is_dir():
            shutil.copytree(events, self.local_path(board["S3OutputPath"]), dirs_exist_ok=True)


def _uncompressed(request: dict[str, Any]) -> bool:
    return request["OutputDataConfig"].get("CompressionType", "GZIP") == "NONE"


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


@contextmanager
def serving(sagemaker: LocalSageMaker) -> Iterator[LocalSageMaker]:
    """Route moto's SageMaker training-job API to `sagemaker` (inside mock_aws)."""
    import boto3
    from moto.core.responses import ActionResult, EmptyResult
    from moto.sagemaker.responses import SageMakerResponse

    from localaws.emulator import service_error

    def handler(action):
        def respond(response: SageMakerResponse):
            try:
                return action(json.loads(response.body or "{}"))
            except LocalSageMakerError as error:
                raise service_error(error.code, str(error)) from None

        return respond

    actions = {
        "create_training_job": lambda body: ActionResult(sagemaker.create(body)),
        "describe_training_job": lambda body: ActionResult(sagemaker.describe(body["TrainingJobName"])),
        "stop_training_job": lambda body: (sagemaker.stop(body["TrainingJobName"]), EmptyResult())[1],
        "list_training_jobs": lambda body: ActionResult(
            {
                "TrainingJobSummaries": sagemaker.list(body.get("NameContains", ""))[
                    : body.get("MaxResults", 100)
                ]
            }
        ),
        "search": lambda body: ActionResult(sagemaker.search(body)),
        "add_tags": lambda body: (
            sagemaker.add_tags(body["ResourceArn"], body["Tags"]),
            ActionResult({"Tags": body["Tags"]}),
        )[1],
    }
    sagemaker.logs = boto3.client("logs")
    with ExitStack() as patches:
        patches.enter_context(local_logs.stream_prefix_filter())
        for name, action in actions.items():
            patches.enter_context(mock.patch.object(SageMakerResponse, name, handler(action), create=True))
        try:
            yield sagemaker
        finally:
            sagemaker.shutdown()
