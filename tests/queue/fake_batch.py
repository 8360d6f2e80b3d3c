"""Scripted AWS Batch for SageMaker Training service jobs (moto has none of these APIs). Tests only.

What it models, from the Batch user guide (service jobs, service-job-status, service-job-retries,
sm_job_stuck_in_runnable_capacity) and botocore's `batch` model:
- requests are validated against botocore's model (types, required members, enums) plus the server-side
  rules the model's documentation states (schedulingPriority 0-9999, shareIdentifier required with a
  fair-share policy and refused without one, job names of letters, digits, hyphens, underscores <= 128);
- a job is RUNNABLE until the service environment has room for its instances, then SCHEDULED (its training
  job was created in SageMaker), STARTING, RUNNING, SUCCEEDED or FAILED, following the training job's
  status as in "Mapping AWS Batch service job status to SageMaker AI status";
- order: first in, first out; with a fair-share policy the share with the lowest usage
  (instances in use x weightFactor) goes first and, within a share, the higher schedulingPriority;
  a job at the head that does not fit blocks the jobs behind it;
- a training job that fails with `CapacityError...` sends the service job back to RUNNABLE with statusReason
  `CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - ...`, without using a retryStrategy attempt; Batch starts a
  new training job with the same payload on a later pass (a later call). The time spent SCHEDULED
  accumulates; once it reaches the queue's capacity time limit the job is terminated (FAILED, statusReason
  `Terminated by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY`);
- TerminateServiceJob fails a waiting job at once and stops the training job of a started one.

Not from any AWS source (choices of this emulator): the names of re-submitted training jobs
(`<name>-b<n>`), the exact text of statusReason for SageMaker failures, how InstancePreferences are
counted against the capacity limit (the largest count), and that Batch re-starts a job right after a
capacity failure. Jobs advance when they are described (each DescribeServiceJob describes its training
job once), the way FakeSageMaker jobs advance per DescribeTrainingJob.
"""

from __future__ import annotations

import fnmatch
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
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
_JOB_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_ACTIVE = ("SCHEDULED", "STARTING", "RUNNING")
# SageMaker SecondaryStatus -> Batch status while the training job is InProgress.
_IN_PROGRESS = {
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
    # Back to RUNNABLE after a capacity error in this call: Batch starts it again on a later pass.
    held: bool = False
    scheduled_at: float | None = None
    capacity_wait: float = 0.0
    retries_left: int = 0
    started_at: int | None = None
    stopped_at: int | None = None
    terminated: bool = False

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


@dataclass
class FakeBatch:
    """One SAGEMAKER_TRAINING job queue on one service environment of `max_instances` instances."""

    sagemaker: SageMakerLike
    max_instances: int
    queue_name: str = "trainstack-training"
    # share identifier -> weightFactor; empty: no scheduling policy (FIFO queue).
    weight_factors: dict[str, float] = field(default_factory=dict)
    capacity_wait_seconds: float = 24 * 3600
    now: Callable[[], float] = time.time
    jobs: dict[str, ServiceJob] = field(default_factory=dict)
    # (job name, status) each time a job's status changed, in order.
    transitions: list[tuple[str, str]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def queue_arn(self) -> str:
        return f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/{self.queue_name}"

    # ------------------------------------------------------------ API

    def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("SubmitServiceJob", request))
            _validate("SubmitServiceJob", request)
            if request["jobQueue"] not in (self.queue_name, self.queue_arn):
                raise FakeBatchError(f"jobQueue {request['jobQueue']} does not exist")
            if not _JOB_NAME.fullmatch(request["jobName"]):
                raise FakeBatchError(
                    "jobName must be 1-128 letters, numbers, hyphens (-) and underscores (_)"
                )
            priority = request.get("schedulingPriority")
            if priority is not None and not 0 <= priority <= 9999:
                raise FakeBatchError("schedulingPriority must be between 0 and 9999")
            if self.weight_factors and "shareIdentifier" not in request:
                raise FakeBatchError("shareIdentifier is required for a job queue with a fair-share policy")
            if not self.weight_factors and "shareIdentifier" in request:
                raise FakeBatchError(
                    "shareIdentifier is not allowed for a job queue without a fair-share policy"
                )
            try:
                payload = json.loads(request["serviceRequestPayload"])
            except ValueError:
                raise FakeBatchError("serviceRequestPayload is not valid JSON") from None
            job = ServiceJob(
                job_id=str(uuid.uuid4()),
                request=request,
                payload=payload,
                instances=_instances(payload),
                sequence=len(self.jobs),
                created_at=self._millis(),
                retries_left=request.get("retryStrategy", {}).get("attempts", 1) - 1,
            )
            self.jobs[job.job_id] = job
            self.transitions.append((job.name, job.status))
            self._schedule()
            return {"jobArn": job.arn, "jobName": job.name, "jobId": job.job_id}

    def describe(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("DescribeServiceJob", request))
            _validate("DescribeServiceJob", request)
            job = self._job(request["jobId"])
            for other in self.jobs.values():
                other.held = False
            self._advance(job)
            self._schedule()
            return self._description(job)

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("ListServiceJobs", request))
            _validate("ListServiceJobs", request)
            # The model's documentation: one filter at a time; JOB_NAME is case-insensitive, a trailing "*"
            # matches a prefix, and with it jobStatus is ignored; newest first.
            names = [
                value.lower()
                for item in request.get("filters", [])
                if item.get("name") == "JOB_NAME"
                for value in item.get("values", [])
            ]
            status = None if names else request.get("jobStatus")
            jobs = [
                job
                for job in reversed(self.jobs.values())
                if status in (None, job.status)
                and (not names or any(_name_matches(job.name, n) for n in names))
            ]
            return {"jobSummaryList": [self._summary(job) for job in jobs]}

    def queue_snapshot(self, request: dict[str, Any]) -> dict[str, Any]:
        """GetJobQueueSnapshot: the front of the queue, in the order Batch will start the jobs."""
        with self.lock:
            self.calls.append(("GetJobQueueSnapshot", request))
            _validate("GetJobQueueSnapshot", request)
            jobs = [
                {"jobArn": self.jobs[job_id].arn, "earliestTimeAtPosition": self._millis()}
                for job_id in self.snapshot()
            ]
            return {"frontOfQueue": {"jobs": jobs[:100], "lastUpdatedAt": self._millis()}}

    def terminate(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("TerminateServiceJob", request))
            _validate("TerminateServiceJob", request)
            job = self._job(request["jobId"])
            if job.status in ("SUCCEEDED", "FAILED"):
                return {}
            if job.status in _ACTIVE and job.training_job:
                self.sagemaker.stop(job.training_job)
            self._finish(job, "FAILED", request["reason"])
            job.terminated = True
            self._schedule()
            return {}

    def snapshot(self) -> list[str]:
        """Job ids of the RUNNABLE jobs in the order Batch would start them (GetJobQueueSnapshot)."""
        with self.lock:
            waiting = [job for job in self.jobs.values() if job.status == "RUNNABLE"]
            order: list[str] = []
            usage = self._usage()
            while waiting:
                head = self._next(waiting, usage)
                order.append(head.job_id)
                waiting.remove(head)
                if head.share is not None:
                    usage[head.share] = usage.get(head.share, 0) + head.instances
            return order

    # ------------------------------------------------------------ scheduler

    def in_use(self) -> int:
        return sum(job.instances for job in self.jobs.values() if job.status in _ACTIVE)

    def _usage(self) -> dict[str, float]:
        usage: dict[str, float] = {}
        for job in self.jobs.values():
            if job.status in _ACTIVE and job.share is not None:
                usage[job.share] = usage.get(job.share, 0) + job.instances
        return usage

    def _next(self, waiting: list[ServiceJob], usage: dict[str, float]) -> ServiceJob:
        if not self.weight_factors:
            return min(waiting, key=lambda job: job.sequence)

        def share_rank(share: str) -> tuple[float, int]:
            weighted = usage.get(share, 0) * self.weight_factors.get(share, 1.0)
            first = min(job.sequence for job in waiting if job.share == share)
            return (weighted, first)

        share = min({job.share for job in waiting}, key=share_rank)
        return min(
            (job for job in waiting if job.share == share), key=lambda job: (-job.priority, job.sequence)
        )

    def _schedule(self) -> None:
        while True:
            waiting = [job for job in self.jobs.values() if job.status == "RUNNABLE"]
            for job in waiting:
                if job.capacity_wait >= self.capacity_wait_seconds:
                    self._finish(job, "FAILED", CAPACITY_TERMINATED)
                    job.terminated = True
            waiting = [job for job in waiting if job.status == "RUNNABLE"]
            if not waiting:
                return
            head = self._next(waiting, self._usage())
            if head.held or head.instances > self.max_instances - self.in_use():
                return
            self._start(head)

    def _start(self, job: ServiceJob) -> None:
        request = dict(job.payload)
        if job.attempts:
            request["TrainingJobName"] = f"{job.payload['TrainingJobName']}-b{len(job.attempts)}"
        try:
            created = self.sagemaker.create(request)
        except ServiceException as error:
            self._finish(job, "FAILED", f"Received status from SageMaker: {error.code}: {error.message}")
            return
        job.training_job = request["TrainingJobName"]
        self._set_status(job, "SCHEDULED")
        job.scheduled_at = self.now()
        job.started_at = job.started_at or self._millis()
        job.attempts.append(
            {
                "serviceResourceId": {"name": "TrainingJobArn", "value": created["TrainingJobArn"]},
                "startedAt": self._millis(),
            }
        )

    def _advance(self, job: ServiceJob) -> None:
        if job.status not in _ACTIVE or job.training_job is None:
            return
        training = self.sagemaker.describe(job.training_job)
        status = training["TrainingJobStatus"]
        if status == "InProgress":
            self._set_status(job, _IN_PROGRESS.get(training["SecondaryStatus"], "RUNNING"))
            return
        if status == "Completed":
            self._finish(job, "SUCCEEDED", "Received status from SageMaker: Completed")
            return
        reason = training.get("FailureReason", "")
        attempt = job.attempts[-1]
        attempt["stoppedAt"] = self._millis()
        if status == "Failed" and reason.startswith("CapacityError"):
            attempt["statusReason"] = CAPACITY_WAITING
            job.capacity_wait += self.now() - (job.scheduled_at or self.now())
            self._set_status(job, "RUNNABLE")
            job.status_reason, job.training_job = CAPACITY_WAITING, None
            job.held = True
            return
        status_reason = f"Received status from SageMaker: {reason or status}"
        attempt["statusReason"] = status_reason
        if job.retries_left and self._retry_allowed(job, status_reason):
            job.retries_left -= 1
            self._set_status(job, "RUNNABLE")
            job.status_reason, job.training_job = status_reason, None
            job.held = True
            return
        self._finish(job, "FAILED", status_reason)

    def _set_status(self, job: ServiceJob, status: str) -> None:
        if job.status != status:
            job.status = status
            self.transitions.append((job.name, status))

    def _retry_allowed(self, job: ServiceJob, reason: str) -> bool:
        rules = job.request.get("retryStrategy", {}).get("evaluateOnExit", [])
        for rule in rules:
            if fnmatch.fnmatchcase(reason, rule.get("onStatusReason", "*")):
                return rule["action"] == "RETRY"
        return not rules

    def _finish(self, job: ServiceJob, status: str, reason: str) -> None:
        self._set_status(job, status)
        job.status_reason = reason
        job.stopped_at = self._millis()
        job.training_job = None if status != "SUCCEEDED" else job.training_job

    # ------------------------------------------------------------ answers

    def _description(self, job: ServiceJob) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "jobId": job.job_id,
            "jobArn": job.arn,
            "jobName": job.name,
            "jobQueue": self.queue_arn,
            "serviceJobType": job.request["serviceJobType"],
            "serviceRequestPayload": job.request["serviceRequestPayload"],
            "status": job.status,
            "createdAt": job.created_at,
            "startedAt": job.started_at or 0,
            "attempts": [dict(attempt) for attempt in job.attempts],
            "isTerminated": job.terminated,
            "capacityUsage": [{"capacityUnit": "NUM_INSTANCES", "quantity": float(job.instances)}],
        }
        for key in ("schedulingPriority", "shareIdentifier", "retryStrategy", "timeoutConfig", "tags"):
            if key in job.request:
                answer[key] = job.request[key]
        if job.attempts:
            answer["latestAttempt"] = {"serviceResourceId": job.attempts[-1]["serviceResourceId"]}
        if job.status_reason:
            answer["statusReason"] = job.status_reason
        if job.stopped_at and job.status in ("SUCCEEDED", "FAILED"):
            answer["stoppedAt"] = job.stopped_at
        _validate_output("DescribeServiceJob", answer)
        return answer

    def _summary(self, job: ServiceJob) -> dict[str, Any]:
        summary = {
            "jobId": job.job_id,
            "jobArn": job.arn,
            "jobName": job.name,
            "serviceJobType": job.request["serviceJobType"],
            "status": job.status,
            "createdAt": job.created_at,
            "isTerminated": job.terminated,
        }
        if job.share is not None:
            summary["shareIdentifier"] = job.share
        if job.status_reason:
            summary["statusReason"] = job.status_reason
        if job.attempts:
            summary["latestAttempt"] = {"serviceResourceId": job.attempts[-1]["serviceResourceId"]}
        return summary

    def _job(self, job_id: str) -> ServiceJob:
        if job_id not in self.jobs:
            raise FakeBatchError(f"Job {job_id} not found")
        return self.jobs[job_id]

    def _millis(self) -> int:
        return int(self.now() * 1000)


def _name_matches(name: str, wanted: str) -> bool:
    name = name.lower()
    return name.startswith(wanted[:-1]) if wanted.endswith("*") else name == wanted


def _instances(payload: dict[str, Any]) -> int:
    resource_config = payload.get("ResourceConfig", {})
    default = resource_config.get("InstanceCount", 1)
    counts = [
        preference.get("InstanceCount", default)
        for preference in resource_config.get("InstancePreferences", [])
    ]
    return max(counts or [default])


def _validate(operation: str, request: dict[str, Any]) -> None:
    report = ParamValidator().validate(request, BATCH_MODEL.operation_model(operation).input_shape)
    if report.has_errors():
        raise FakeBatchError(f"1 validation error detected: {report.generate_report()}")


def _validate_output(operation: str, answer: dict[str, Any]) -> None:
    """The emulator's own answers must fit the model too (required members, enums, types)."""
    report = ParamValidator().validate(answer, BATCH_MODEL.operation_model(operation).output_shape)
    if report.has_errors():
        raise AssertionError(f"FakeBatch answered outside botocore's model: {report.generate_report()}")
