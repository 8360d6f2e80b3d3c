"""A run as the CLI sees it: the pipeline executions named after it and its training jobs.

A run's first execution is named exactly like the run (`<project>-...`); starting the same run again
after it ended (to resume from its checkpoints) names the next execution `<run>.2`, `<run>.3`, ...
Its training jobs are `<run>-<attempt>` (the pipeline's naming); in queue mode its service jobs are, and
AWS Batch names the training jobs it starts itself. Functions take boto3 clients, so
the CLI and the demo share them and tests run them against moto.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from trainstack.job_request import job_name
from trainstack.queue_settings import run_job_prefix

STATE_MACHINE_OUTPUT = "StateMachineArn"
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
EXECUTION_ARN_PATTERN = r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:execution:[^:]+:[^:]+$"
ENDED_BADLY = ("FAILED", "TIMED_OUT", "ABORTED")
JOB_ENDED = ("Completed", "Failed", "Stopped")
# AWS Batch service job states before Batch starts the training job (queue mode).
SERVICE_JOB_WAITING = ("SUBMITTED", "PENDING", "RUNNABLE")


class RunError(Exception):
    """The run or its pipeline cannot be found or acted on; str() is one sentence."""


@dataclass(frozen=True)
class Job:
    attempt: int
    description: dict[str, Any]  # DescribeTrainingJob

    @property
    def name(self) -> str:
        return self.description["TrainingJobName"]

    @property
    def status(self) -> str:
        return self.description["TrainingJobStatus"]

    @property
    def instances(self) -> str:
        """`2 x ml.p5.48xlarge`: the selected preference once SageMaker chose, else the requested type."""
        resources = self.description.get("ResourceConfig", {})
        kind = resources.get("SelectedInstanceType") or resources.get("InstanceType")
        count = resources.get("SelectedInstanceCount") or resources.get("InstanceCount")
        return f"{count} x {kind}" if kind else "-"


def tensorboard_hint(job: Job) -> str | None:
    """How to see the run's TensorBoard data: every attempt uploads to `<run prefix>/<job>/tensorboard/`
    (job_request.tensorboard_uri), so the run's prefix as logdir shows each attempt as a TensorBoard run."""
    uri = job.description.get("TensorBoardOutputConfig", {}).get("S3OutputPath")
    if not uri:
        return None
    # Strip `<job>/tensorboard/`: the pipeline's job name, also in queue mode where Batch names the job.
    run_prefix = uri.rstrip("/").rsplit("/", 2)[0] + "/"
    return (
        f"tensorboard --logdir {run_prefix} (every attempt of the run; needs `pip install tensorboard` and "
        "AWS credentials), or add the jobs to SageMaker AI's managed TensorBoard (SageMaker AI console, "
        "Applications and IDEs, TensorBoard)"
    )


@dataclass(frozen=True)
class QueuedJob:
    """Queue mode: a run's job waiting in the AWS Batch job queue for free instances."""

    attempt: int
    name: str
    position: int | None  # 1 = next to start; None when Batch's snapshot of the queue's front omits it

    @property
    def status(self) -> str:
        return f"queued, position {self.position}" if self.position else "queued"


def find_state_machine(cloudformation: Any, project: str, region: str) -> str:
    """The StateMachineArn output of the `<project>-pipeline` stack."""
    return stack_output(
        cloudformation, f"{project}-pipeline", STATE_MACHINE_OUTPUT, region, "--state-machine-arn"
    )


def stack_output(cloudformation: Any, stack: str, output: str, region: str, flag: str) -> str:
    """Output `output` of the deployed `stack`; a missing stack or output names `flag` (skips the lookup)."""
    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as error:
        if "does not exist" in str(error):
            raise RunError(
                f"stack {stack} does not exist in {region}; deploy it (cdk deploy {stack}) or pass {flag}"
            ) from None
        raise
    for given in stacks[0].get("Outputs", []):
        if given["OutputKey"] == output:
            return given["OutputValue"]
    raise RunError(f"stack {stack} has no {output} output; pass {flag}")


def is_execution_arn(text: str) -> bool:
    return re.match(EXECUTION_ARN_PATTERN, text) is not None


def execution_arn_for(state_machine_arn: str, name: str) -> str:
    """arn:...:stateMachine:M -> arn:...:execution:M:name (Step Functions' ARN scheme)."""
    prefix, machine = state_machine_arn.rsplit(":stateMachine:", 1)
    return f"{prefix}:execution:{machine}:{name}"


def executions_of(stepfunctions: Any, state_machine_arn: str, run_name: str) -> list[dict[str, Any]]:
    """ListExecutions items of a run's executions, newest first."""
    pattern = re.compile(rf"^{re.escape(run_name)}(\.\d+)?$")
    found = []
    for page in stepfunctions.get_paginator("list_executions").paginate(stateMachineArn=state_machine_arn):
        found.extend(item for item in page["executions"] if pattern.match(item["name"]))
    return sorted(found, key=lambda item: item["startDate"], reverse=True)


def next_execution_name(run_name: str, earlier: list[dict[str, Any]]) -> str:
    """`<run>.N` after the run's earlier executions; refuses while one of them is still running."""
    running = [item for item in earlier if item["status"] == "RUNNING"]
    if running:
        raise RunError(
            f"run {run_name} already exists and is running ({running[0]['executionArn']}); follow it with "
            f"`trainstack watch {run_name}`, stop it with `trainstack stop {run_name}`, or choose another "
            "--run-name"
        )
    numbers = [int(item["name"].rsplit(".", 1)[1]) if "." in item["name"] else 1 for item in earlier]
    return f"{run_name}.{max(numbers, default=1) + 1}"


def latest_execution(stepfunctions: Any, state_machine_arn: str, run: str) -> dict[str, Any]:
    """DescribeExecution of RUN: an execution ARN, or the newest execution of the run named so."""
    if is_execution_arn(run):
        return stepfunctions.describe_execution(executionArn=run)
    found = executions_of(stepfunctions, state_machine_arn, run)
    if not found:
        raise RunError(f"no run named {run} in {state_machine_arn}; `trainstack runs` lists the recent ones")
    return stepfunctions.describe_execution(executionArn=found[0]["executionArn"])


def run_input(execution: dict[str, Any]) -> dict[str, Any]:
    try:
        given = json.loads(execution.get("input") or "{}")
    except ValueError:
        return {}
    return given if isinstance(given, dict) else {}


def run_name_of(execution: dict[str, Any], project: str) -> str:
    """The input's runName, or the state machine's default `<project>-<execution name>`."""
    given = run_input(execution).get("runName")
    return given if isinstance(given, str) else f"{project}-{execution['name']}"


def current_job(sagemaker: Any, run_name: str) -> Job | None:
    """The newest training job `<run>-<attempt>`; None before the first."""
    pattern = re.compile(rf"^{re.escape(run_name)}-(\d+)$")
    summaries = sagemaker.list_training_jobs(
        NameContains=run_name, SortBy="CreationTime", SortOrder="Descending", MaxResults=100
    )["TrainingJobSummaries"]
    attempts = [
        (int(match.group(1)), summary["TrainingJobName"])
        for summary in summaries
        if (match := pattern.match(summary["TrainingJobName"]))
    ]
    if not attempts:
        return None
    attempt, name = max(attempts)
    return Job(attempt, sagemaker.describe_training_job(TrainingJobName=name))


def clock() -> datetime:
    """Now, for elapsed times (the local demo points it at its emulator's clock, which runs faster)."""
    return datetime.now(UTC)


def service_jobs_of(batch: Any, queue_name: str, run_name: str) -> list[tuple[int, dict[str, Any]]]:
    """Queue mode: the run's service jobs (`<queue key><run key>-<attempt>`, queue_settings.py) as (attempt,
    ListServiceJobs summary), newest first (ListServiceJobs sorts by createdAt when filtering by name), every
    page read. Case-insensitive: the run key is Step Functions' $hash, lower-case hex as far as AWS's
    examples show (ListServiceJobs' JOB_NAME filter ignores case too)."""
    prefix = run_job_prefix(queue_name, run_name)
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$", re.IGNORECASE)
    found = []
    pages = batch.get_paginator("list_service_jobs").paginate(
        jobQueue=queue_name, filters=[{"name": "JOB_NAME", "values": [f"{prefix}*"]}]
    )
    for page in pages:
        for summary in page["jobSummaryList"]:
            if match := pattern.match(summary["jobName"]):
                found.append((int(match.group(1)), summary))
    return found


def queued_job(
    batch: Any, queue_name: str, run_name: str, attempt: int, summary: dict[str, Any]
) -> QueuedJob:
    """The run's service job while it waits in the queue, under the training job name its request asks for
    (the service job's own name is a hash); its position comes from GetJobQueueSnapshot, which lists the
    queue's front in order."""
    front = batch.get_job_queue_snapshot(jobQueue=queue_name).get("frontOfQueue", {}).get("jobs", [])
    arns = [job["jobArn"] for job in front]
    position = arns.index(summary["jobArn"]) + 1 if summary.get("jobArn") in arns else None
    return QueuedJob(attempt, job_name(run_name, attempt), position)


def batch_started_job(sagemaker: Any, attempt: int, summary: dict[str, Any]) -> Job | None:
    """The training job Batch started last for a service job: the summary's latestAttempt.serviceResourceId
    holds its ARN."""
    arn = batch_job_arn(summary.get("latestAttempt", {}))
    return batch_job(sagemaker, attempt, arn) if arn else None


def batch_job_arn(tried: dict[str, Any]) -> str | None:
    """The ARN of the training job of one of Batch's attempts at a service job (a latestAttempt or an item
    of DescribeServiceJob's attempts: ServiceJobAttemptDetail.serviceResourceId, botocore's batch model)."""
    return tried.get("serviceResourceId", {}).get("value")


def batch_job(sagemaker: Any, attempt: int, arn: str) -> Job:
    """A training job Batch started, by its ARN: Batch names it itself (`AWSBatch<jobName>...`), the ARN's
    last part is the name."""
    return Job(attempt, sagemaker.describe_training_job(TrainingJobName=arn.rsplit("/", 1)[-1]))


def run_job(
    sagemaker: Any, batch: Any | None, queue_name: str | None, run_name: str
) -> Job | QueuedJob | None:
    """What the run is at: in queue mode (batch and queue_name given) its newest service job, waiting in the
    queue or as the training job Batch started; else its newest training job; else None."""
    if batch is None or not queue_name:
        return current_job(sagemaker, run_name)
    service_jobs = service_jobs_of(batch, queue_name, run_name)
    if not service_jobs:
        return current_job(sagemaker, run_name)
    attempt, summary = service_jobs[0]
    if summary.get("status") in SERVICE_JOB_WAITING:
        return queued_job(batch, queue_name, run_name, attempt, summary)
    return batch_started_job(sagemaker, attempt, summary) or current_job(sagemaker, run_name)


def elapsed(execution: dict[str, Any], now: datetime) -> str:
    """H:MM:SS from the execution's start to its stop, or to now while it runs."""
    end = execution.get("stopDate") or now
    return hms(max(0, int((end - execution["startDate"]).total_seconds())))


def hms(seconds: float) -> str:
    """H:MM:SS, to the nearest second."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def status_line(execution: dict[str, Any], job: Job | QueuedJob | None) -> str:
    if job is None:
        return f"{execution['status']} | no training job yet"
    if isinstance(job, QueuedJob):
        return f"{execution['status']} | attempt {job.attempt} | {job.name} | {job.status}"
    return (
        f"{execution['status']} | attempt {job.attempt} | {job.name} | "
        f"{job.status} / {job.description.get('SecondaryStatus', '-')}"
    )


def log_events(logs: Any, job_name: str, start_time_ms: int = 0) -> list[dict[str, Any]]:
    """The job's CloudWatch log events (every host's stream `<job>/algo-N-...`) from start_time_ms on."""
    events: list[dict[str, Any]] = []
    arguments = {"logGroupName": TRAINING_LOG_GROUP, "logStreamNamePrefix": f"{job_name}/"}
    if start_time_ms:
        arguments["startTime"] = start_time_ms
    try:
        for page in logs.get_paginator("filter_log_events").paginate(**arguments):
            events.extend(page["events"])
    except ClientError as error:
        if error.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
    return sorted(events, key=lambda event: (event["timestamp"], event.get("eventId", "")))


# The pipeline's state that decides after each attempt, and the variables its fault retries and quota
# waits append to (stacks/pipeline/training_state_machine.py, fault_retries.py, quota_waits.py).
CLASSIFY_STATE = "ClassifyAttempt"
RETRIED_FAULTS = "retriedFaults"
QUOTA_WAITS = "quotaWaits"


def retried_faults(stepfunctions: Any, execution: dict[str, Any]) -> list[dict[str, Any]]:
    """The fault retries of a run so far, [{attempt, job, class, kind, reason}]."""
    return _classified(stepfunctions, execution, RETRIED_FAULTS)


def quota_waits(stepfunctions: Any, execution: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempts SageMaker refused for a busy quota so far, [{attempt, quota, instanceType, limit,
    utilization, delta}]."""
    return _classified(stepfunctions, execution, QUOTA_WAITS)


def _classified(stepfunctions: Any, execution: dict[str, Any], variable: str) -> list[dict[str, Any]]:
    """A list ClassifyAttempt keeps: the output's once the run succeeded, else the one it assigned last
    (the history, newest events first)."""
    output = json.loads(execution.get("output") or "{}")
    if variable in output:
        return output[variable]
    pages = stepfunctions.get_paginator("get_execution_history").paginate(
        executionArn=execution["executionArn"], reverseOrder=True
    )
    for page in pages:
        for event in page["events"]:
            details = event.get("stateExitedEventDetails", {})
            assigned = details.get("assignedVariables", {})
            if details.get("name") == CLASSIFY_STATE and variable in assigned:
                return json.loads(assigned[variable])
    return []
