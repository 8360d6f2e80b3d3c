"""What a run report shows, read with boto3: the pipeline execution's history and its attempts' child
executions (Step Functions GetExecutionHistory), each attempt's training job (DescribeTrainingJob), and
the job's training log lines (CloudWatch Logs, `/aws/sagemaker/TrainingJobs`). In queue mode an attempt
is a service job (AWS Batch DescribeServiceJob): the training job is the one Batch started last, and the
service job's attempts tell how long it waited in the queue and which training jobs Batch started before
(it re-submits a job by itself after a capacity error, each time a new training job that bills): each of
those is described too, so that the run's billed cost is the sum over every training job, as the pipeline's
cost cap counts it (stacks/pipeline/attempt/batch_training_jobs.py).

The metrics come from the log lines rather than from the CloudWatch metrics SageMaker derives from them
(GetMetricData): those carry a timestamp only, the lines carry the step, which is what lines attempts up
(a resumed attempt repeats the steps after its checkpoint). Both use the same regexes
(training_scripts.metrics.METRIC_DEFINITIONS).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from training_scripts.metrics import METRIC_DEFINITIONS, SLOW_HOST_LINE
from trainstack import runs
from trainstack.checkpoint_requests import CHECKPOINT_LOCAL_PATH
from trainstack.faults import CAPACITY, SPOT_CAPACITY_SECONDARY_STATUS, classify, describe
from trainstack.prices import TrainingPrices
from trainstack.report.progress import STEP, Progress, read_progress
from trainstack.runs import (
    SERVICE_JOB_WAITING,
    batch_job,
    batch_job_arn,
    batch_started_job,
    log_events,
    run_name_of,
    service_jobs_of,
)

# State names of the synthesized pipeline (stacks/pipeline/training_state_machine.py).
ATTEMPT_STATE = "RunAttempt"
BACKOFF_STATE = "WaitBeforeRetry"
CREATE_ACTION = (
    "createTrainingJob"  # the Task's resource arn:aws:states:::aws-sdk:sagemaker:createTrainingJob
)
THROTTLE_STATE = "WaitAfterThrottle"  # stacks/pipeline/attempt/training_attempt.py
_RESUMED = re.compile(r"Resumed from (\S+) \(step (\d+)\)")


@dataclass(frozen=True)
class Span:
    """A stretch of the run's time axis: a back-off, or a job's phase (SecondaryStatusTransitions)."""

    label: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class SlowHost:
    """A rank train.py flagged as a slow host (training_scripts/rank_health.py)."""

    rank: int
    host: str
    ratio: float  # its share of each step over the median of the other ranks'
    intervals: int
    step: int

    def describe(self) -> str:
        return (
            f"rank {self.rank} on {self.host}, {self.ratio:.2f}x the other ranks' median step share in "
            f"{self.intervals} log intervals up to step {self.step}"
        )


@dataclass
class Attempt:
    number: int
    job_name: str  # queue mode: the service job's name until Batch started a training job for it
    started: datetime  # RunAttempt entered: the attempt execution starts and creates the job
    ended: datetime | None  # RunAttempt exited; None while it runs
    child_arn: str | None = None  # the attempt execution (TaskSubmitted on AWS, TaskSucceeded's output)
    job_created: datetime | None = None  # the CreateTrainingJob call returned
    job: dict[str, Any] = field(default_factory=dict)  # DescribeTrainingJob; empty if it never existed
    resumed_from: tuple[str, int] | None = None  # (checkpoint folder, step) the job's log names
    metrics: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # metric -> (step, value)
    phases: list[Span] = field(default_factory=list)
    service_job: dict[str, Any] = field(default_factory=dict)  # queue mode: DescribeServiceJob
    queue_waits: list[Span] = field(default_factory=list)  # queue mode: RUNNABLE until Batch started a job
    progress: Progress = field(default_factory=Progress)  # when its log says the training got where
    slow_hosts: list[SlowHost] = field(default_factory=list)  # flagged in its log
    quota: dict[str, Any] | None = None  # the quota SageMaker refused the create for (trainstack.quota)
    # Queue mode: the training jobs Batch started for the attempt before `job`, oldest first, each an
    # Attempt of its own (the attempt's number and times; its job, log and billed figures).
    earlier_jobs: list[Attempt] = field(default_factory=list)

    @property
    def training_jobs(self) -> list[Attempt]:
        """The attempt's training jobs as they ran: Batch's earlier ones (queue mode), then its own."""
        return [*self.earlier_jobs, self]

    @property
    def queue_wait_seconds(self) -> float | None:
        if not self.service_job:
            return None
        return sum((wait.end - wait.start).total_seconds() for wait in self.queue_waits)

    @property
    def status(self) -> str:
        return self.job.get("TrainingJobStatus", "not created")

    @property
    def classification(self) -> str | None:
        """Why the attempt's job failed, as the pipeline classified it (trainstack.faults); None unless it
        failed (SageMaker's capacity failures, and spot capacity that never came, are `capacity`)."""
        reason = self.job.get("FailureReason", "")
        if self.job.get("SecondaryStatus") == SPOT_CAPACITY_SECONDARY_STATUS:
            return "capacity"
        if self.status != "Failed":
            return None
        fault = classify(reason)
        return CAPACITY if fault.fault_class == CAPACITY else describe(fault)

    @property
    def instance_type(self) -> str | None:
        resources = self.job.get("ResourceConfig", {})
        return resources.get("SelectedInstanceType") or resources.get("InstanceType")

    @property
    def instance_count(self) -> int:
        resources = self.job.get("ResourceConfig", {})
        return resources.get("SelectedInstanceCount") or resources.get("InstanceCount") or 0

    @property
    def resumed_checkpoint(self) -> str | None:
        """The checkpoint folder the job resumed from, named in S3 where it lies under the job's
        CheckpointConfig.LocalPath (SageMaker syncs that folder with CheckpointConfig.S3Uri)."""
        if self.resumed_from is None:
            return None
        folder, config = self.resumed_from[0], self.job.get("CheckpointConfig", {})
        local = config.get("LocalPath", CHECKPOINT_LOCAL_PATH).rstrip("/") + "/"
        if config.get("S3Uri") and folder.startswith(local):
            return config["S3Uri"].rstrip("/") + "/" + folder.removeprefix(local)
        return folder

    @property
    def billed_seconds(self) -> float | None:
        """BillableTimeInSeconds (spot savings included) once SageMaker reports it, else training time."""
        if "BillableTimeInSeconds" in self.job:
            return float(self.job["BillableTimeInSeconds"])
        start, end = self.job.get("TrainingStartTime"), self.job.get("TrainingEndTime")
        return (end - start).total_seconds() if start and end else None

    def cost_usd(self, prices: TrainingPrices | None) -> float | None:
        """Instance-seconds at the on-demand list price (trainstack.prices); None where either is unknown."""
        hourly = prices and prices.hourly_usd(self.instance_type or "")
        seconds = self.billed_seconds
        if hourly is None or seconds is None:
            return None
        return hourly * self.instance_count * seconds / 3600


@dataclass
class RunReport:
    run_name: str
    execution: dict[str, Any]  # DescribeExecution of the pipeline execution
    attempts: list[Attempt]
    backoffs: list[Span]
    max_cost_usd: float | None = None  # the run's profile's cost cap (trainstack.cost_cap)
    prices: TrainingPrices | None = None  # the pipeline's region's (None: nothing is priced)

    @property
    def output(self) -> dict[str, Any]:
        return json.loads(self.execution.get("output") or "{}")

    @property
    def training_jobs(self) -> list[Attempt]:
        """Every training job of the run in the order they ran (in queue mode several per attempt)."""
        return [job for attempt in self.attempts for job in attempt.training_jobs]

    @property
    def cost_usd(self) -> float | None:
        """The billed cost of every training job, as the pipeline's cost cap counts it."""
        costs = [job.cost_usd(self.prices) for job in self.training_jobs if job.job]
        return sum(costs) if costs and None not in costs else None


def collect(
    stepfunctions: Any,
    sagemaker: Any,
    logs: Any,
    execution: dict[str, Any],
    project: str,
    batch: Any | None = None,
    queue_name: str | None = None,
) -> RunReport:
    """The report of one pipeline execution (DescribeExecution of it); in queue mode (batch and queue_name
    given) each attempt's service job tells which training job Batch started."""
    run_name = run_name_of(execution, project)
    events = history(stepfunctions, execution["executionArn"])
    attempts, backoffs = _timeline(events, run_name)
    # Newest last, so that each attempt number keeps its newest service job (a run started again reuses
    # the names).
    queued = service_jobs_of(batch, queue_name, run_name) if batch and queue_name else []
    service_jobs = dict(reversed(queued))
    for attempt in attempts:
        if attempt.number in service_jobs:
            _follow_service_job(batch, sagemaker, attempt, service_jobs[attempt.number]["jobId"])
        else:
            attempt.job = _describe(sagemaker, attempt.job_name)
        attempt.phases = attempt.queue_waits + [
            phase for job in attempt.training_jobs for phase in job_phases(job.job)
        ]
        if attempt.child_arn:
            child = history(stepfunctions, attempt.child_arn)
            attempt.job_created = _job_created(child)
            attempt.phases += _throttled_creates(child)
        for job in attempt.training_jobs:
            _read_log(job, log_events(logs, job.job_name) if job.job else [])
    return RunReport(run_name, execution, attempts, backoffs)


def history(stepfunctions: Any, execution_arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for page in stepfunctions.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
        events.extend(page["events"])
    return events


def _timeline(events: list[dict[str, Any]], run_name: str) -> tuple[list[Attempt], list[Span]]:
    """Attempts and back-offs from the pipeline's history: RunAttempt and WaitBeforeRetry entered/exited.
    The pipeline names attempt N's job `<runName>-N` (its RunAttempt input)."""
    attempts: list[Attempt] = []
    backoffs: list[Span] = []
    backoff_start = None
    for event in events:
        kind, stamp = event["type"], event["timestamp"]
        name = _state_name(event)
        if kind == "TaskStateEntered" and name == ATTEMPT_STATE:
            number = len(attempts) + 1
            attempts.append(Attempt(number, f"{run_name}-{number}", started=stamp, ended=None))
        elif kind == "TaskStateExited" and name == ATTEMPT_STATE:
            attempts[-1].ended = stamp
        elif kind in ("TaskSubmitted", "TaskSucceeded") and attempts:
            details = event.get(f"{kind[0].lower()}{kind[1:]}EventDetails", {})
            output = json.loads(details.get("output") or "{}")
            attempts[-1].child_arn = attempts[-1].child_arn or output.get("ExecutionArn")
            if "Output" in output:  # the attempt's outcome (startExecution.sync:2: JSON)
                outcome = output["Output"]
                attempts[-1].quota = (json.loads(outcome) if isinstance(outcome, str) else outcome).get(
                    "quota"
                )
        elif kind == "WaitStateEntered" and name == BACKOFF_STATE:
            backoff_start = stamp
        elif kind == "WaitStateExited" and name == BACKOFF_STATE and backoff_start:
            backoffs.append(Span(f"back-off before attempt {len(attempts) + 1}", backoff_start, stamp))
            backoff_start = None
    return attempts, backoffs


def _state_name(event: dict[str, Any]) -> str | None:
    return event.get("stateEnteredEventDetails", event.get("stateExitedEventDetails", {})).get("name")


def _job_created(events: list[dict[str, Any]]) -> datetime | None:
    """When the attempt's CreateTrainingJob call succeeded (a throttled call fails and is made again)."""
    return next(
        (
            event["timestamp"]
            for event in events
            if event["type"] == "TaskSucceeded"
            and event["taskSucceededEventDetails"].get("resource") == CREATE_ACTION
        ),
        None,
    )


def _throttled_creates(events: list[dict[str, Any]]) -> list[Span]:
    """The attempt's waits after a throttled CreateTrainingJob."""
    spans, start = [], None
    for event in events:
        name = _state_name(event)
        if name == THROTTLE_STATE and event["type"] == "WaitStateEntered":
            start = event["timestamp"]
        elif name == THROTTLE_STATE and event["type"] == "WaitStateExited" and start:
            spans.append(Span("CreateTrainingJob throttled", start, event["timestamp"]))
    return spans


def _describe(sagemaker: Any, job_name: str) -> dict[str, Any]:
    try:
        return sagemaker.describe_training_job(TrainingJobName=job_name)
    except sagemaker.exceptions.ClientError as error:
        if "not found" in str(error).lower():  # the attempt never created its job (quota, rejection)
            return {}
        raise


def _follow_service_job(batch: Any, sagemaker: Any, attempt: Attempt, job_id: str) -> None:
    attempt.service_job = batch.describe_service_job(jobId=job_id)
    attempt.queue_waits = queue_waits(attempt.service_job)
    if started := batch_started_job(sagemaker, attempt.number, attempt.service_job):
        attempt.job_name, attempt.job = started.name, started.description
    for arn in earlier_job_arns(attempt.service_job):
        job = batch_job(sagemaker, attempt.number, arn)
        attempt.earlier_jobs.append(
            Attempt(attempt.number, job.name, attempt.started, attempt.ended, job=job.description)
        )


def earlier_job_arns(service_job: dict[str, Any]) -> list[str]:
    """The ARNs of the training jobs Batch started for a service job before its latest, oldest first:
    DescribeServiceJob's attempts (ServiceJobAttemptDetail serviceResourceId and startedAt, botocore's
    batch model, which does not say in which order the list comes) less latestAttempt's."""
    latest = batch_job_arn(service_job.get("latestAttempt", {}))
    tried = sorted(service_job.get("attempts", []), key=lambda detail: detail.get("startedAt", 0))
    return [arn for arn in map(batch_job_arn, tried) if arn and arn != latest]


def queue_waits(service_job: dict[str, Any]) -> list[Span]:
    """The service job's waits for a place (RUNNABLE): from its creation, and from each attempt's stop (a
    capacity failure sends it back to the queue), until Batch started the next attempt's training job, or
    now while it still waits, or until a job that did not succeed ended (Batch ends a job waiting past the
    queue's capacity time limit). DescribeServiceJob's createdAt, stoppedAt and attempts[].startedAt and
    stoppedAt, in Unix milliseconds (botocore's batch model)."""
    waits, since, reason = [], service_job["createdAt"], "waiting in the queue"
    for tried in service_job.get("attempts", []):
        waits.append(Span(reason, _from_millis(since), _from_millis(tried["startedAt"])))
        if "stoppedAt" not in tried:
            return waits
        since = tried["stoppedAt"]
        reason = f"back in the queue: {tried.get('statusReason', 'attempt ended')}"
    if service_job["status"] in SERVICE_JOB_WAITING:
        end = int(runs.clock().timestamp() * 1000)
    elif service_job["status"] == "FAILED":
        end = service_job.get("stoppedAt", since)
    else:
        return waits
    if end > since:
        waits.append(Span(reason, _from_millis(since), _from_millis(end)))
    return waits


def _from_millis(millis: int) -> datetime:
    return datetime.fromtimestamp(millis / 1000, UTC)


def job_phases(job: dict[str, Any]) -> list[Span]:
    """SageMaker's SecondaryStatusTransitions (Starting: waiting for instances, Downloading, Training)."""
    return [
        Span(item["Status"], item["StartTime"], item["EndTime"])
        for item in job.get("SecondaryStatusTransitions", [])
        if item.get("EndTime")
    ]


def _read_log(attempt: Attempt, events: list[dict[str, Any]]) -> None:
    """The metric values by step, the checkpoint the job resumed from and its progress, from its log lines."""
    attempt.progress = read_progress(events)
    metrics: dict[str, list[tuple[int, float]]] = {item["Name"]: [] for item in METRIC_DEFINITIONS}
    for event in events:
        line = event["message"]
        if resumed := _RESUMED.search(line):
            attempt.resumed_from = (resumed.group(1), int(resumed.group(2)))
        if flagged := SLOW_HOST_LINE.search(line):
            rank, host, ratio, intervals, step = flagged.groups()
            attempt.slow_hosts.append(SlowHost(int(rank), host, float(ratio), int(intervals), int(step)))
        step = STEP.search(line)
        if step is None:
            continue
        for definition in METRIC_DEFINITIONS:
            if value := re.search(definition["Regex"], line):
                metrics[definition["Name"]].append((int(step.group(1)), float(value.group(1))))
    attempt.metrics = {name: values for name, values in metrics.items() if values}


def slow_host_lines(report: RunReport) -> list[str]:
    """One line per slow host the attempts' logs flagged (`trainstack status`; the report's table)."""
    return [
        f"slow host: attempt {attempt.number} ({attempt.job_name}): {slow.describe()}"
        for attempt in report.attempts
        for slow in attempt.slow_hosts
    ]
