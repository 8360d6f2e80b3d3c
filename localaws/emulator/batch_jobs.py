"""FakeBatch's service jobs, their answers and the checks it applies against botocore's `batch` model
(fake_batch.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

import botocore.session
from botocore.validate import ParamValidator
from moto.core.exceptions import ServiceException

BATCH_MODEL = botocore.session.get_session().get_service_model("batch")
REGION = "us-east-1"
ACCOUNT = "123456789012"
CAPACITY_REASON = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
CAPACITY_WAITING = f"{CAPACITY_REASON} - Unable to provision requested compute resources"
CAPACITY_TERMINATED = f"Terminated by JobStateTimeLimit action due to reason: {CAPACITY_REASON}"
JOB_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
TRAINING_JOB_NAMES = ("awsbatch", "truncated", "payload")
# When a terminated service job whose training job runs shows FAILED (FakeBatch.terminations; assumed,
# Batch's guide says only that the training job is stopped): at once, or once the training job stopped.
TERMINATIONS = ("at_once", "after_stop")
# ListServiceJobs' maxResults: "between 1 and 100"; without it, "up to 100 results" (botocore's model).
MAX_PAGE = 100
SAGEMAKER_NAME_LENGTH = 63
ACTIVE = ("SCHEDULED", "STARTING", "RUNNING")
# SageMaker SecondaryStatus -> Batch status while the training job is InProgress.
BATCH_STATUS_OF_SECONDARY = {
    "Starting": "SCHEDULED",
    "Pending": "SCHEDULED",
    "LaunchingMLInstances": "SCHEDULED",
    "PreparingTrainingStack": "SCHEDULED",
    "Downloading": "STARTING",
    "DownloadingTrainingImage": "STARTING",
    "Training": "RUNNING",
    "Uploading": "RUNNING",
    "Restarting": "RUNNING",
    "Interrupted": "RUNNING",
}


class SageMakerLike(Protocol):
    def create(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def describe(self, name: str) -> dict[str, Any]: ...
    def stop(self, name: str) -> None: ...


class FakeBatchError(ServiceException):
    """ClientException and ServerException are the errors botocore's batch model declares."""

    def __init__(self, message: str, code: str = "ClientException") -> None:
        super().__init__(code, message)


@dataclass
class ServiceJob:
    job_id: str
    request: dict[str, Any]
    payload: dict[str, Any]
    instances: int
    sequence: int
    created_at: int
    status: str = "RUNNABLE"
    status_reason: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    training_job: str | None = None
    # Names of the training jobs Batch started for this job, in order.
    training_jobs: list[str] = field(default_factory=list)
    # Back to RUNNABLE after a capacity error in this call: Batch starts it again on a later pass.
    held: bool = False
    scheduled_at: float | None = None
    capacity_wait: float = 0.0
    retries_left: int = 0
    started_at: int | None = None
    stopped_at: int | None = None
    terminated: bool = False
    # TerminateServiceJob's reason while the training job stops (FakeBatch.terminations "after_stop").
    termination_reason: str | None = None

    @property
    def name(self) -> str:
        return self.request["jobName"]

    @property
    def priority(self) -> int:
        return self.request.get("schedulingPriority", 0)

    @property
    def share(self) -> str | None:
        return self.request.get("shareIdentifier")

    @property
    def arn(self) -> str:
        return f"arn:aws:batch:{REGION}:{ACCOUNT}:service-job/{self.job_id}"


def name_matches(name: str, wanted: str) -> bool:
    name = name.lower()
    return name.startswith(wanted[:-1]) if wanted.endswith("*") else name == wanted


def instances_of(payload: dict[str, Any]) -> int:
    resource_config = payload.get("ResourceConfig", {})
    default = resource_config.get("InstanceCount", 1)
    counts = [
        preference.get("InstanceCount", default)
        for preference in resource_config.get("InstancePreferences", [])
    ]
    return max(counts or [default])


def validate_request(operation: str, request: dict[str, Any]) -> None:
    report = ParamValidator().validate(request, BATCH_MODEL.operation_model(operation).input_shape)
    if report.has_errors():
        raise FakeBatchError(f"1 validation error detected: {report.generate_report()}")


def validate_answer(operation: str, answer: dict[str, Any]) -> None:
    """The emulator's own answers must fit the model too (required members, enums, types)."""
    report = ParamValidator().validate(answer, BATCH_MODEL.operation_model(operation).output_shape)
    if report.has_errors():
        raise AssertionError(f"FakeBatch answered outside botocore's model: {report.generate_report()}")


def description(job: ServiceJob, queue_arn: str) -> dict[str, Any]:
    """DescribeServiceJob's answer for `job`, checked against botocore's model."""
    answer: dict[str, Any] = {
        "jobId": job.job_id,
        "jobArn": job.arn,
        "jobName": job.name,
        "jobQueue": queue_arn,
        "serviceJobType": job.request["serviceJobType"],
        "serviceRequestPayload": job.request["serviceRequestPayload"],
        "status": job.status,
        "createdAt": job.created_at,
        "startedAt": job.started_at or 0,
        "attempts": [dict(attempt) for attempt in job.attempts],
        "isTerminated": job.terminated,
        "capacityUsage": [{"capacityUnit": "NUM_INSTANCES", "quantity": float(job.instances)}],
    }
    # As submitted: botocore's batch model returns each in DescribeServiceJobResponse (`tags` among them,
    # which the queue cleanup and sweeper read); ListServiceJobs' summaries carry none of them.
    for key in ("schedulingPriority", "shareIdentifier", "retryStrategy", "timeoutConfig", "tags"):
        if key in job.request:
            answer[key] = job.request[key]
    if job.attempts:
        answer["latestAttempt"] = {"serviceResourceId": job.attempts[-1]["serviceResourceId"]}
    if job.status_reason:
        answer["statusReason"] = job.status_reason
    if job.stopped_at and job.status in ("SUCCEEDED", "FAILED"):
        answer["stoppedAt"] = job.stopped_at
    validate_answer("DescribeServiceJob", answer)
    return answer


def summary(job: ServiceJob) -> dict[str, Any]:
    """`job` as ListServiceJobs' jobSummaryList lists it."""
    listed = {
        "jobId": job.job_id,
        "jobArn": job.arn,
        "jobName": job.name,
        "serviceJobType": job.request["serviceJobType"],
        "status": job.status,
        "createdAt": job.created_at,
        "isTerminated": job.terminated,
    }
    if job.share is not None:
        listed["shareIdentifier"] = job.share
    if job.status_reason:
        listed["statusReason"] = job.status_reason
    if job.attempts:
        listed["latestAttempt"] = {"serviceResourceId": job.attempts[-1]["serviceResourceId"]}
    return listed
