"""Scripted AWS Batch for SageMaker Training service jobs (moto has none of these APIs), for tests and the
queue demo. docs/emulator.md lists each behaviour with its source; in short:

- requests and answers are validated against botocore's `batch` model (types, required members, enums),
  plus the server-side rules its documentation states (schedulingPriority 0-9999, shareIdentifier
  required with a fair-share policy, job names of letters, digits, hyphens, underscores <= 128);
- a job is RUNNABLE until the service environment has room, then SCHEDULED, STARTING, RUNNING, SUCCEEDED
  or FAILED, following its training job (Batch user guide, "Mapping AWS Batch service job status to
  SageMaker AI status"); FIFO, or fair share (lowest usage x weightFactor first, then the higher
  schedulingPriority); a head job that does not fit blocks the jobs behind it;
- a training job that fails with `CapacityError...` sends the service job back to RUNNABLE with
  statusReason `CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - ...`; only time spent SCHEDULED accumulates
  toward the queue's capacity time limit, after which the job is terminated (FAILED, `Terminated by
  JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY`) (Batch user guide,
  "Jobs stuck in RUNNABLE due to capacity");
- the training job's name (`training_job_names`): `AWSBatch<jobName><attemptId>` as Batch's guide shows
  it ("awsbatch", the default), the same cut to SageMaker's 63 characters ("truncated"), or the
  payload's TrainingJobName ("payload"); which one AWS uses past the guide's example is not documented,
  so the pipeline is tested under each; DescribeServiceJob names it in latestAttempt.serviceResourceId,
  and every training job started for the job, in order, in `attempts` (botocore's model:
  ServiceJobAttemptDetail {serviceResourceId, startedAt, stoppedAt, statusReason});
- ListServiceJobs pages its answer (maxResults, at most 100, nextToken), newest first;
- TerminateServiceJob fails a waiting job at once and stops the training job of a started one ("For
  SageMaker Training jobs, this will stop the training job in SageMaker AI as well": Batch user guide,
  "Terminate service jobs").

Assumed (no AWS source): the attempt id's form (32 hex digits), the statusReason text of SageMaker
failures, how InstancePreferences count against the capacity limit (the largest count), what a quota
refusal of the training job's create does to the service job (`quota_refusals`: FAILED, or RUNNABLE and
tried again; the pipeline is tested under both), when a terminated job whose training job runs shows
FAILED (`terminations`: at once, or once its training job has stopped; the pipeline's cost cap is
tested under both), that Batch re-starts a job on the pass after a capacity failure, and the payload
alternative's `-b<n>` names of re-submissions. Jobs advance when they are described (each
DescribeServiceJob describes its training job once), the way scripted SageMaker jobs advance per
DescribeTrainingJob (localaws/sagemaker/scripted.py).
"""

from __future__ import annotations

import fnmatch
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from moto.core.exceptions import ServiceException

from localaws.emulator.batch_jobs import (
    ACCOUNT,
    ACTIVE,
    BATCH_STATUS_OF_SECONDARY,
    CAPACITY_TERMINATED,
    CAPACITY_WAITING,
    JOB_NAME,
    MAX_PAGE,
    REGION,
    SAGEMAKER_NAME_LENGTH,
    FakeBatchError,
    SageMakerLike,
    ServiceJob,
    description,
    instances_of,
    name_matches,
    summary,
    validate_request,
)

SAGEMAKER_STATUS = "Received status from SageMaker:"
__all__ = ["CAPACITY_TERMINATED", "CAPACITY_WAITING", "FakeBatch", "FakeBatchError"]


@dataclass
class FakeBatch:
    """One SAGEMAKER_TRAINING job queue on one service environment of `max_instances` instances."""

    sagemaker: SageMakerLike
    max_instances: int
    queue_name: str = "trainstack-training"
    # share identifier -> weightFactor; empty: no scheduling policy (FIFO queue).
    weight_factors: dict[str, float] = field(default_factory=dict)
    capacity_wait_seconds: float = 24 * 3600
    training_job_names: str = "awsbatch"
    # Jobs per ListServiceJobs page: "up to 100" (botocore's model), so any smaller page is AWS's too.
    page_size: int = MAX_PAGE
    # A CreateTrainingJob refused for a quota (assumed, undocumented): the service job FAILS with the
    # refusal as statusReason ("fail"), or stays RUNNABLE with it and is tried again ("runnable").
    quota_refusals: str = "fail"
    # One of batch_jobs.TERMINATIONS (assumed, undocumented).
    terminations: str = "at_once"
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
            validate_request("SubmitServiceJob", request)
            if request["jobQueue"] not in (self.queue_name, self.queue_arn):
                raise FakeBatchError(f"jobQueue {request['jobQueue']} does not exist")
            if not JOB_NAME.fullmatch(request["jobName"]):
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
                instances=instances_of(payload),
                sequence=len(self.jobs),
                created_at=self._millis(),
                retries_left=request.get("retryStrategy", {}).get("attempts", 1) - 1,
            )
            self.jobs[job.job_id] = job
            self.transitions.append((job.name, job.status))
            self._schedule()
            return {"jobArn": job.arn, "jobName": job.name, "jobId": job.job_id}

    def training_jobs_of(self, name: str) -> list[str]:
        """The training jobs started for service job `name`, in order."""
        with self.lock:
            return [
                started for job in self.jobs.values() if job.name == name for started in job.training_jobs
            ]

    def describe(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("DescribeServiceJob", request))
            validate_request("DescribeServiceJob", request)
            job = self._job(request["jobId"])
            for other in self.jobs.values():
                other.held = False
            self._advance(job)
            self._schedule()
            return description(job, self.queue_arn)

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("ListServiceJobs", request))
            validate_request("ListServiceJobs", request)
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
                and (not names or any(name_matches(job.name, n) for n in names))
            ]
            # The token is a cursor (the last job returned; assumed): jobs that change status between pages
            # neither repeat nor hide others.
            if request.get("nextToken"):
                jobs = [job for job in jobs if job.sequence < int(request["nextToken"])]
            page = jobs[: min(request.get("maxResults", MAX_PAGE), self.page_size)]
            answer: dict[str, Any] = {"jobSummaryList": [summary(job) for job in page]}
            if len(page) < len(jobs):
                answer["nextToken"] = str(page[-1].sequence)
            return answer

    def queue_snapshot(self, request: dict[str, Any]) -> dict[str, Any]:
        """GetJobQueueSnapshot: the front of the queue, in the order Batch will start the jobs."""
        with self.lock:
            self.calls.append(("GetJobQueueSnapshot", request))
            validate_request("GetJobQueueSnapshot", request)
            jobs = [
                {"jobArn": self.jobs[job_id].arn, "earliestTimeAtPosition": self._millis()}
                for job_id in self.snapshot()
            ]
            return {"frontOfQueue": {"jobs": jobs[:100], "lastUpdatedAt": self._millis()}}

    def terminate(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("TerminateServiceJob", request))
            validate_request("TerminateServiceJob", request)
            job = self._job(request["jobId"])
            if job.status in ("SUCCEEDED", "FAILED"):
                return {}
            if job.status in ACTIVE and job.training_job:
                self.sagemaker.stop(job.training_job)
                if self.terminations == "after_stop":
                    job.terminated, job.termination_reason = True, request["reason"]
                    return {}
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
        return sum(job.instances for job in self.jobs.values() if job.status in ACTIVE)

    def _usage(self) -> dict[str, float]:
        usage: dict[str, float] = {}
        for job in self.jobs.values():
            if job.status in ACTIVE and job.share is not None:
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
        request = {**job.payload, "TrainingJobName": self._training_job_name(job)}
        try:
            created = self.sagemaker.create(request)
        except ServiceException as error:
            # The SageMaker Python SDK's retry rule quotes this form (aws_batch/constants.py:
            # "Received status from SageMaker:InternalServerError: We encountered an internal error...").
            reason = f"{SAGEMAKER_STATUS}{error.code}: {error.message}"
            if error.code == "ResourceLimitExceeded" and self.quota_refusals == "runnable":
                job.status_reason, job.held = reason, True  # tried again on a later pass
                return
            self._finish(job, "FAILED", reason)
            return
        job.training_job = request["TrainingJobName"]
        job.training_jobs.append(job.training_job)
        self._set_status(job, "SCHEDULED")
        job.scheduled_at = self.now()
        job.started_at = job.started_at or self._millis()
        job.attempts.append(
            {
                "serviceResourceId": {"name": "TrainingJobArn", "value": created["TrainingJobArn"]},
                "startedAt": self._millis(),
            }
        )

    def _training_job_name(self, job: ServiceJob) -> str:
        if self.training_job_names == "payload":
            name = job.payload["TrainingJobName"]
            return f"{name}-b{len(job.attempts)}" if job.attempts else name
        name = f"AWSBatch{job.name}{uuid.uuid4().hex}"
        return name[:SAGEMAKER_NAME_LENGTH] if self.training_job_names == "truncated" else name

    def _advance(self, job: ServiceJob) -> None:
        if job.status not in ACTIVE or job.training_job is None:
            return
        training = self.sagemaker.describe(job.training_job)
        status = training["TrainingJobStatus"]
        if status == "InProgress":
            self._set_status(job, BATCH_STATUS_OF_SECONDARY.get(training["SecondaryStatus"], "RUNNING"))
            return
        if status == "Completed":
            self._finish(job, "SUCCEEDED", f"{SAGEMAKER_STATUS}Completed")
            return
        if job.termination_reason:
            self._finish(job, "FAILED", job.termination_reason)
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
        status_reason = f"{SAGEMAKER_STATUS}{reason or status}"
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
        if job.training_job is not None:  # its attempt ends too (ServiceJobAttemptDetail.stoppedAt)
            job.attempts[-1].setdefault("stoppedAt", job.stopped_at)
        job.training_job = None if status != "SUCCEEDED" else job.training_job

    def _job(self, job_id: str) -> ServiceJob:
        if job_id not in self.jobs:
            raise FakeBatchError(f"Job {job_id} not found")
        return self.jobs[job_id]

    def _millis(self) -> int:
        return int(self.now() * 1000)
