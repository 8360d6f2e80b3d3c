"""One model of SageMaker training jobs behind moto (routes.py): what SageMaker's API answers, whatever
runs the jobs. A behaviour runs them: scripted phases (scripted.py, for the tests) or real local
training processes (local_processes.py, for the demos).

Sources (docs/emulator.md, "SageMaker training jobs"): CreateTrainingJob validated as validation.py
says; ResourceInUse for a used name; DescribeTrainingJob's status, SecondaryStatus and FailureReason
from the behaviour (SageMaker API reference, DescribeTrainingJob); StopTrainingJob of a job not
InProgress is a ValidationException; Search by tag (Equals, Exists), ListTrainingJobs (NameContains,
newest first), ListTags and AddTags (SageMaker API reference). Assumed, and named so there: ARNs in
lower case with a job found by its name in any case; an unknown job answers ValidationException
"Requested resource not found." (`missing_job_error`; botocore's model declares ResourceNotFound).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from localaws.emulator import service_error
from localaws.sagemaker.calls import CallControl, RegistryControl
from localaws.sagemaker.validation import validate_create_request, validate_job_name

ACCOUNT = "123456789012"


@dataclass(frozen=True)
class Phase:
    """One DescribeTrainingJob answer of a job's life."""

    status: str
    secondary: str
    failure_reason: str | None = None
    # More DescribeTrainingJob fields (times as epoch seconds): TrainingStartTime, transitions, ...
    fields: dict[str, Any] = field(default_factory=dict)
    # Whether SageMaker has chosen among the InstancePreferences (SelectedInstanceType/Count); by default
    # once the job completed.
    instances_selected: bool | None = None
    # Whether the job runs on its instances, billed, from this phase on: the fake then reports
    # TrainingStartTime (when it first saw such a phase), and TrainingEndTime and BillableTimeInSeconds
    # once the job has ended ("You are billed for the time interval between this time and the value of
    # TrainingEndTime": DescribeTrainingJob, botocore's sagemaker model). BillableTimeInSeconds on a job
    # that ran on demand equals that interval (assumed; the product reads either).
    bills: bool = False

    @property
    def selected(self) -> bool:
        return self.status == "Completed" if self.instances_selected is None else self.instances_selected


STOPPED = Phase("Stopped", "Stopped")


class JobRun(Protocol):
    """What runs one job."""

    def phase(self, job: TrainingJob) -> Phase: ...

    def stop(self, job: TrainingJob) -> None: ...


class Behaviour(Protocol):
    def start(self, job: TrainingJob) -> JobRun: ...


@dataclass
class TrainingJob:
    request: dict[str, Any]
    created: float  # epoch seconds on the fake's clock
    run: JobRun | None = None
    describes: int = 0
    stop_requested: bool = False
    tags: list[dict[str, str]] = field(default_factory=list)
    billed_from: float | None = None  # TrainingStartTime
    billed_until: float | None = None  # TrainingEndTime

    @property
    def name(self) -> str:
        return self.request["TrainingJobName"]

    def current(self) -> Phase:
        return self.run.phase(self)


def job_arn(name: str) -> str:
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    return f"arn:aws:sagemaker:{region}:{ACCOUNT}:training-job/{name.lower()}"


def model_uri(request: dict[str, Any]) -> str:
    """S3ModelArtifacts by OutputDataConfig.CompressionType: NONE uploads the model dir's files under
    `<S3OutputPath><job>/output/model/` (AWS's examples: aws/sagemaker-python-sdk v3-examples
    model_builder_deployment_notebook.ipynb; the trailing slash is assumed), GZIP (the default)
    `<S3OutputPath><job>/output/model.tar.gz`."""
    output = f"{request['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{request['TrainingJobName']}/output"
    if request["OutputDataConfig"].get("CompressionType", "GZIP") == "NONE":
        return f"{output}/model/"
    return f"{output}/model.tar.gz"


@dataclass
class FakeSageMaker:
    behaviour: Behaviour
    # Errors raised by successive CreateTrainingJob calls before any job is made: (code, message).
    create_errors: list[tuple[str, str]] = field(default_factory=list)
    # A deterministic rejection: every CreateTrainingJob call fails so (code, message).
    reject_creates: tuple[str, str] | None = None
    missing_job_error: tuple[str, str] = ("ValidationException", "Requested resource not found.")
    # Clock seconds between a create call and the job appearing to Describe, Stop, ListTags and Search.
    create_latency: float = 0.0
    now: Callable[[], float] = time.time
    control: CallControl = field(default_factory=CallControl)
    registry: RegistryControl = field(default_factory=RegistryControl)
    # DescribeTrainingJob calls (over all jobs) answered before `control.throttles` applies to them.
    throttle_describes_after: int = 0
    jobs: dict[str, TrainingJob] = field(default_factory=dict)
    create_calls: int = 0
    stop_requests: list[str] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def created(self) -> list[dict[str, Any]]:
        return [job.request for job in self.jobs.values()]

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        self.control.enter("CreateTrainingJob", request.get("TrainingJobName", ""))
        with self.lock:
            self.create_calls += 1
            self.control.throttle("CreateTrainingJob")
            validate_create_request(request)
            if self.reject_creates:
                raise service_error(*self.reject_creates)
            if self.create_errors:
                raise service_error(*self.create_errors.pop(0))
            name = request["TrainingJobName"]
            if name in self.jobs:
                raise service_error("ResourceInUse", f"Training job names must be unique: {name}")
            job = TrainingJob(request, created=self.now(), tags=list(request.get("Tags", [])))
            job.run = self.behaviour.start(job)
            self.jobs[name] = job
            return {"TrainingJobArn": job_arn(name)}

    def describe(self, name: str) -> dict[str, Any]:
        validate_job_name(name)
        self.control.enter("DescribeTrainingJob", name)
        with self.lock:
            if sum(job.describes for job in self.jobs.values()) >= self.throttle_describes_after:
                self.control.throttle("DescribeTrainingJob")
            job = self._job(name)
            phase = job.current()
            job.describes += 1
            billing = _billing_times(job, phase, self.now())
        request = job.request
        resources = dict(request["ResourceConfig"])
        preferences = resources.get("InstancePreferences")
        # The first preference: the only one with capacity here. A job that bills runs on chosen instances.
        if preferences and (phase.selected or job.billed_from is not None):
            resources["SelectedInstanceType"] = preferences[0]["InstanceType"]
            resources["SelectedInstanceCount"] = preferences[0].get(
                "InstanceCount", resources.get("InstanceCount", 1)
            )
        answer = {
            "TrainingJobName": job.name,
            "TrainingJobArn": job_arn(job.name),
            "ModelArtifacts": {"S3ModelArtifacts": model_uri(request)},
            "TrainingJobStatus": phase.status,
            "SecondaryStatus": phase.secondary,
            "ResourceConfig": resources,
            "StoppingCondition": request["StoppingCondition"],
            "CheckpointConfig": request.get("CheckpointConfig", {}),
            "CreationTime": job.created,
        }
        # The role the request passed (CreateTrainingJob requires one; DescribeTrainingJobResponse.RoleArn
        # in botocore's sagemaker model): a team's run reader knows its own jobs by it.
        if "RoleArn" in request:
            answer["RoleArn"] = request["RoleArn"]
        if phase.failure_reason:
            answer["FailureReason"] = phase.failure_reason
        return answer | billing | phase.fields

    def stop(self, name: str) -> None:
        with self.lock:
            self.control.throttle("StopTrainingJob")
            job = self._job(name)
            if job.current().status != "InProgress":
                raise service_error("ValidationException", f"The job {name} is not in progress.")
            job.stop_requested = True
            self.stop_requests.append(name)
        job.run.stop(job)

    def list_training_jobs(self, request: dict[str, Any]) -> dict[str, Any]:
        name_contains = request.get("NameContains", "")
        self.control.enter("ListTrainingJobs", name_contains)
        with self.lock:
            jobs = [job for job in self._visible() if name_contains in job.name]
        summaries = [
            {
                "TrainingJobName": job.name,
                "TrainingJobArn": job_arn(job.name),
                "CreationTime": job.created,
                "TrainingJobStatus": job.current().status,
            }
            for job in sorted(jobs, key=lambda job: job.created, reverse=True)
        ]
        return {"TrainingJobSummaries": summaries[: request.get("MaxResults", 100)]}

    def search(self, request: dict[str, Any]) -> dict[str, Any]:
        filters = request.get("SearchExpression", {}).get("Filters", [])
        with self.lock:
            self.control.throttle("Search")
            results = []
            for job in self._visible():
                status = job.current().status
                facts = {f"Tags.{tag['Key']}": tag["Value"] for tag in job.tags} | {
                    "TrainingJobStatus": status
                }
                if all(_matches(facts, item) for item in filters):
                    found = {"TrainingJobName": job.name, "TrainingJobStatus": status, "Tags": job.tags}
                    results.append({"TrainingJob": found})
            return {"Results": results}

    def list_tags(self, arn: str) -> dict[str, Any]:
        with self.lock:
            self.control.throttle("ListTags")
            return {"Tags": self._job(_name_in(arn)).tags}

    def add_tags(self, arn: str, tags: list[dict[str, str]]) -> dict[str, Any]:
        with self.lock:
            self._job(_name_in(arn)).tags.extend(tags)
        return {"Tags": tags}

    def visible(self, name: str) -> bool:
        job = self.jobs.get(name)
        return job is not None and self.now() >= job.created + self.create_latency

    def _visible(self) -> list[TrainingJob]:
        return [job for job in self.jobs.values() if self.visible(job.name)]

    def _job(self, name: str) -> TrainingJob:
        # SageMaker writes ARNs in lower case; a job is found by its name in any case (assumed, as the
        # name in an ARN must find the job: docs/emulator.md).
        found = next((job for job in self._visible() if job.name.lower() == name.lower()), None)
        if found is None:
            raise service_error(*self.missing_job_error)
        return found


def _billing_times(job: TrainingJob, phase: Phase, now: float) -> dict[str, Any]:
    """The billing fields of this answer (see Phase.bills), recording when billing began and ended."""
    if phase.bills and job.billed_from is None:
        job.billed_from = now
    if job.billed_from is None:
        return {}
    if phase.status != "InProgress" and job.billed_until is None:
        job.billed_until = now
    if job.billed_until is None:
        return {"TrainingStartTime": job.billed_from}
    return {
        "TrainingStartTime": job.billed_from,
        "TrainingEndTime": job.billed_until,
        "BillableTimeInSeconds": round(job.billed_until - job.billed_from),
    }


def _name_in(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


def _matches(facts: dict[str, str], search_filter: dict[str, str]) -> bool:
    if search_filter["Operator"] == "Exists":
        return search_filter["Name"] in facts
    assert search_filter["Operator"] == "Equals", search_filter
    return facts.get(search_filter["Name"]) == search_filter["Value"]
