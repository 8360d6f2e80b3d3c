"""Run the synthesized state machine definitions in moto's Step Functions interpreter.

moto's SageMaker reports every job Completed at once, lacks StopTrainingJob and validates nothing.
This harness, for tests only, replaces moto's training-job handlers with FakeSageMaker: jobs follow a
per-scenario script of statuses and FailureReasons, scripted errors are raised on create, any call can
be throttled a given number of times (ThrottlingException, "Rate exceeded"), SageMaker's server-side
checks are applied (botocore's model for types/required/ranges, the job-name pattern and length), and
StopTrainingJob, Search (by tag, Equals and Exists) and ListTags exist. `refuse_start_executions` makes
Step Functions refuse StartExecution of a state machine (ExecutionLimitExceeded) a given number of times.

The interpreter itself runs as localaws.emulator makes it run: JSONata through jsonata-python, AWS's
error names (`SageMaker.<Code>Exception` for codes SageMaker's model declares, SageMakerException for
the rest) and a virtual clock, so that no test waits on the wall clock for a Wait or a Retry.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.session
from botocore.validate import ParamValidator
from moto import mock_aws
from moto.core.responses import ActionResult, EmptyResult
from moto.sagemaker.responses import SageMakerResponse
from moto.stepfunctions.responses import StepFunctionResponse

from localaws.emulator import VirtualClock, local_stepfunctions, service_error

REGION = "us-east-1"
ACCOUNT = "123456789012"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/states-test"
JOB_NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
CAPACITY_ERROR = (
    "CapacityError: Unable to provision requested ML compute capacity. "
    "Please retry using a different ML instance type."
)

_SAGEMAKER_MODEL = botocore.session.get_session().get_service_model("sagemaker")


def FakeSageMakerError(code: str, message: str) -> Exception:  # noqa: N802 (reads like the exception it makes)
    return service_error(code, message)


THROTTLED = ("ThrottlingException", "Rate exceeded")


@dataclass(frozen=True)
class Phase:
    """One DescribeTrainingJob answer; the last phase of a script repeats."""

    status: str
    secondary: str
    failure_reason: str | None = None
    # More DescribeTrainingJob fields (times as epoch seconds): TrainingStartTime, transitions, ...
    fields: dict[str, Any] = field(default_factory=dict)


STARTING = Phase("InProgress", "Starting")
TRAINING = Phase("InProgress", "Training")
COMPLETED = Phase("Completed", "Completed")
CAPACITY_FAILURE = Phase("Failed", "Failed", CAPACITY_ERROR)
# Managed spot: capacity never came within MaxWaitTimeInSeconds.
SPOT_WAIT_EXCEEDED = Phase("Stopped", "MaxWaitTimeExceeded")


def failed(reason: str) -> Phase:
    return Phase("Failed", "Failed", reason)


@dataclass
class FakeJob:
    request: dict[str, Any]
    phases: list[Phase]
    describes: int = 0
    stopped: bool = False

    @property
    def name(self) -> str:
        return self.request["TrainingJobName"]

    def current(self) -> Phase:
        if self.stopped:
            return Phase("Stopped", "Stopped")
        return self.phases[min(self.describes, len(self.phases) - 1)]


@dataclass
class FakeSageMaker:
    """Scripted SageMaker: job i follows job_scripts[i] (the last script repeats)."""

    job_scripts: list[list[Phase]] = field(default_factory=lambda: [[STARTING, TRAINING, COMPLETED]])
    # Errors raised by successive CreateTrainingJob calls before any job is made: (code, message).
    create_errors: list[tuple[str, str]] = field(default_factory=list)
    # A deterministic rejection: every CreateTrainingJob call fails so (code, message).
    reject_creates: tuple[str, str] | None = None
    jobs: dict[str, FakeJob] = field(default_factory=dict)
    create_calls: int = 0
    # What Describe/Stop of an unknown job raise (SageMaker answers ValidationException; its model lists
    # ResourceNotFound).
    missing_job_error: tuple[str, str] = ("ValidationException", "Requested resource not found.")
    # Jobs created before job_scripts was last set: scripts apply from the next job on.
    script_offset: int = 0
    stop_requests: list[str] = field(default_factory=list)
    # Calls answered ThrottlingException before they pass, by action ("DescribeTrainingJob": 3).
    throttles: dict[str, int] = field(default_factory=dict)
    throttled: dict[str, int] = field(default_factory=dict)
    # Describe calls after which throttling starts (a throttled status call mid-run).
    throttle_describes_after: int = 0
    # When set, DescribeTrainingJob blocks until it is set again (`held` tells a call is waiting).
    release: threading.Event | None = None
    held: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _throttle(self, action: str) -> None:
        """Raise ThrottlingException while `action` has throttled answers left (call under the lock)."""
        if action == "DescribeTrainingJob" and sum(job.describes for job in self.jobs.values()) < (
            self.throttle_describes_after
        ):
            return
        if self.throttles.get(action, 0) > 0:
            self.throttles[action] -= 1
            self.throttled[action] = self.throttled.get(action, 0) + 1
            raise FakeSageMakerError(*THROTTLED)

    def script(self, job_scripts: list[list[Phase]]) -> None:
        """Script the jobs created from now on."""
        with self.lock:
            self.job_scripts = job_scripts
            self.script_offset = len(self.jobs)

    @property
    def created(self) -> list[dict[str, Any]]:
        return [job.request for job in self.jobs.values()]

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.create_calls += 1
            self._throttle("CreateTrainingJob")
            validate_create_request(request)
            if self.reject_creates:
                raise FakeSageMakerError(*self.reject_creates)
            if self.create_errors:
                raise FakeSageMakerError(*self.create_errors.pop(0))
            name = request["TrainingJobName"]
            if name in self.jobs:
                raise FakeSageMakerError("ResourceInUse", f"Training job names must be unique: {name}")
            index = len(self.jobs) - self.script_offset
            script = self.job_scripts[min(index, len(self.job_scripts) - 1)]
            self.jobs[name] = FakeJob(request=request, phases=list(script))
            return {"TrainingJobArn": _job_arn(name)}

    def describe(self, name: str) -> dict[str, Any]:
        validate_job_name(name)
        if self.release is not None and not self.release.is_set():
            self.held.set()
            self.release.wait()
        with self.lock:
            self._throttle("DescribeTrainingJob")
            job = self._job(name)
            phase = job.current()
            job.describes += 1
            request = job.request
            resource_config = dict(request["ResourceConfig"])
            preferences = resource_config.get("InstancePreferences")
            if preferences and phase.status == "Completed":
                resource_config["SelectedInstanceType"] = preferences[0]["InstanceType"]
                resource_config["SelectedInstanceCount"] = preferences[0].get(
                    "InstanceCount", resource_config.get("InstanceCount")
                )
            response = {
                "TrainingJobName": job.name,
                "TrainingJobArn": _job_arn(job.name),
                "ModelArtifacts": {
                    # CompressionType NONE: the model dir's files under output/model/ (see
                    # localaws/demo/local_sagemaker.py for the source; the trailing slash is assumed).
                    "S3ModelArtifacts": (
                        f"{request['OutputDataConfig']['S3OutputPath']}{job.name}/output/model/"
                    )
                },
                "TrainingJobStatus": phase.status,
                "SecondaryStatus": phase.secondary,
                "ResourceConfig": resource_config,
                "StoppingCondition": request["StoppingCondition"],
                "CheckpointConfig": request.get("CheckpointConfig", {}),
                "CreationTime": datetime.now(UTC).timestamp(),
            }
            if phase.failure_reason:
                response["FailureReason"] = phase.failure_reason
            return response | phase.fields

    def stop(self, name: str) -> None:
        with self.lock:
            self._throttle("StopTrainingJob")
            job = self._job(name)
            if job.current().status != "InProgress":
                raise FakeSageMakerError("ValidationException", f"The job {name} is not in progress.")
            job.stopped = True
            self.stop_requests.append(name)

    def search(self, request: dict[str, Any]) -> dict[str, Any]:
        filters = request.get("SearchExpression", {}).get("Filters", [])
        with self.lock:
            self._throttle("Search")
            results = []
            for job in self.jobs.values():
                tags = {tag["Key"]: tag["Value"] for tag in job.request.get("Tags", [])}
                facts = {
                    **{f"Tags.{key}": value for key, value in tags.items()},
                    "TrainingJobStatus": job.current().status,
                }
                if all(_matches(facts, item) for item in filters):
                    results.append(
                        {
                            "TrainingJob": {
                                "TrainingJobName": job.name,
                                "TrainingJobStatus": job.current().status,
                                "Tags": job.request.get("Tags", []),
                            }
                        }
                    )
            return {"Results": results}

    def list_tags(self, arn: str) -> dict[str, Any]:
        with self.lock:
            self._throttle("ListTags")
            name = next((job.name for job in self.jobs.values() if _job_arn(job.name) == arn), "")
            return {"Tags": self._job(name).request.get("Tags", [])}

    def _job(self, name: str) -> FakeJob:
        # SageMaker writes ARNs in lower case; a job is found by its name in any case (assumed, as the
        # name in an ARN must find the job: docs/emulator.md).
        found = self.jobs.get(name) or next(
            (job for key, job in self.jobs.items() if key.lower() == name.lower()), None
        )
        if found is None:
            raise FakeSageMakerError(*self.missing_job_error)
        return found


def _matches(facts: dict[str, str], search_filter: dict[str, str]) -> bool:
    if search_filter["Operator"] == "Exists":
        return search_filter["Name"] in facts
    assert search_filter["Operator"] == "Equals", search_filter
    return facts.get(search_filter["Name"]) == search_filter["Value"]


def _job_arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name.lower()}"


def validate_job_name(name: Any) -> None:
    if not isinstance(name, str) or len(name) > 63 or not JOB_NAME_PATTERN.fullmatch(name):
        raise FakeSageMakerError(
            "ValidationException",
            f"1 validation error detected: Value '{name}' at 'trainingJobName' failed to satisfy constraint: "
            "Member must satisfy regular expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} "
            "and length <= 63",
        )


def validate_create_request(request: dict[str, Any]) -> None:
    """SageMaker's server-side validation, as far as these tests need it (AWS's message format)."""
    validate_job_name(request.get("TrainingJobName", ""))
    report = ParamValidator().validate(
        request, _SAGEMAKER_MODEL.operation_model("CreateTrainingJob").input_shape
    )
    if report.has_errors():
        raise FakeSageMakerError(
            "ValidationException", f"1 validation error detected: {report.generate_report()}"
        )
    for key, value in request.get("HyperParameters", {}).items():
        if len(key) > 256 or len(value) > 2500:
            raise FakeSageMakerError(
                "ValidationException",
                "1 validation error detected: Value at 'hyperParameters' failed to satisfy constraint: "
                "Map keys must have length <= 256 and map values length <= 2500",
            )
    counts = [request["ResourceConfig"].get("InstanceCount")] + [
        preference.get("InstanceCount")
        for preference in request["ResourceConfig"].get("InstancePreferences", [])
    ]
    for count in counts:
        if count is not None and count < 1:
            raise FakeSageMakerError(
                "ValidationException",
                f"1 validation error detected: Value '{count}' at 'resourceConfig.instanceCount' failed to "
                "satisfy constraint: Member must have value greater than or equal to 1",
            )


# ---------------------------------------------------------------- moto patches


@contextmanager
def pipeline_environment(fake: FakeSageMaker, monkeypatch) -> Iterator[VirtualClock]:
    """mock_aws with the interpreter enabled, FakeSageMaker installed, on a virtual clock."""

    def body(response: SageMakerResponse) -> dict[str, Any]:
        return json.loads(response.body or "{}")

    def create_training_job(self) -> ActionResult:
        return ActionResult(fake.create(body(self)))

    def describe_training_job(self) -> ActionResult:
        return ActionResult(fake.describe(body(self)["TrainingJobName"]))

    def stop_training_job(self) -> EmptyResult:
        fake.stop(body(self)["TrainingJobName"])
        return EmptyResult()

    def search(self) -> ActionResult:
        return ActionResult(fake.search(body(self)))

    def list_tags(self) -> ActionResult:
        return ActionResult(fake.list_tags(body(self)["ResourceArn"]))

    for name, handler in (
        ("create_training_job", create_training_job),
        ("describe_training_job", describe_training_job),
        ("stop_training_job", stop_training_job),
        ("search", search),
        ("list_tags", list_tags),
    ):
        monkeypatch.setattr(SageMakerResponse, name, handler, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        with local_stepfunctions(VirtualClock()) as clock:
            yield clock


# ---------------------------------------------------------------- Step Functions refusing StartExecution

# StartExecution's error code (botocore's stepfunctions model) with the model's description of it as the
# message: AWS's exact message text is not known here.
EXECUTION_LIMIT_EXCEEDED = (
    "ExecutionLimitExceeded",
    "The maximum number of running executions has been reached. Running executions must end or be "
    "stopped before a new execution can be started.",
)


@dataclass
class StartRefusals:
    """StartExecution of one state machine answered `error` while `left` > 0 (then it passes)."""

    state_machine_arn: str
    left: int
    error: tuple[str, str] = EXECUTION_LIMIT_EXCEEDED
    refused: int = 0


def refuse_start_executions(monkeypatch, state_machine_arn: str, times: int) -> StartRefusals:
    """Make Step Functions refuse the next `times` StartExecution calls for a state machine (for the
    pipeline's attempt child: the account has too many open executions)."""
    refusals = StartRefusals(state_machine_arn, times)
    start_execution = StepFunctionResponse.start_execution

    def refusing_start_execution(self) -> ActionResult:
        if self._get_param("stateMachineArn") == refusals.state_machine_arn and refusals.left > 0:
            refusals.left -= 1
            refusals.refused += 1
            raise service_error(*refusals.error)
        return start_execution(self)

    monkeypatch.setattr(StepFunctionResponse, "start_execution", refusing_start_execution)
    return refusals


# ---------------------------------------------------------------- executions


@dataclass
class Outcome:
    status: str
    output: dict[str, Any] | None
    error: str | None
    cause: str | None
    history: list[dict[str, Any]]
    execution_arn: str

    def events(self, event_type: str) -> list[dict[str, Any]]:
        return [event for event in self.history if event["type"] == event_type]

    def log_messages(self) -> list[str]:
        """The execution's history as Step Functions logs it at level ALL with execution data: one JSON
        event per history event, `{id, type, details, previous_event_id, event_timestamp, execution_arn}`
        (AWS's "Using CloudWatch Logs to log execution history in Step Functions"; the mapping is
        LocalStack's EventManager._create_history_log, which moto copies but never calls: its executions
        start without a logging session)."""
        return [
            json.dumps(
                {
                    "id": str(event["id"]),
                    "type": event["type"],
                    "details": next((v for k, v in event.items() if k.endswith("EventDetails")), {}),
                    "previous_event_id": str(event["previousEventId"]),
                    "event_timestamp": str(int(event["timestamp"].timestamp() * 1000)),
                    "execution_arn": self.execution_arn,
                },
                default=str,
            )
            for event in self.history
        ]

    def state_inputs(self, state_name: str) -> list[dict[str, Any]]:
        """The input of every visit to a state, in order."""
        return [
            json.loads(event["stateEnteredEventDetails"]["input"])
            for event in self.history
            if event["type"].endswith("StateEntered")
            and event["stateEnteredEventDetails"]["name"] == state_name
        ]


def create_state_machine(definition: str, name: str = "trainstack-pipeline") -> str:
    client = boto3.client("stepfunctions", region_name=REGION)
    return client.create_state_machine(name=name, definition=definition, roleArn=ROLE_ARN)["stateMachineArn"]


def start(state_machine_arn: str, execution_input: Any, name: str = "exec-1") -> str:
    client = boto3.client("stepfunctions", region_name=REGION)
    return client.start_execution(
        stateMachineArn=state_machine_arn, name=name, input=json.dumps(execution_input)
    )["executionArn"]


# Guards against a hung execution only: executions run on the virtual clock, nothing waits for time.
HANG_GUARD_SECONDS = 600


def wait_for(execution_arn: str, timeout: float = HANG_GUARD_SECONDS) -> Outcome:
    client = boto3.client("stepfunctions", region_name=REGION)
    deadline = time.monotonic() + timeout
    while True:
        described = client.describe_execution(executionArn=execution_arn)
        if described["status"] != "RUNNING":
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{execution_arn} still RUNNING after {timeout} s")
        time.sleep(0.02)
    history: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"executionArn": execution_arn, "maxResults": 1000}
    while True:
        page = client.get_execution_history(**kwargs)
        history.extend(page["events"])
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    return Outcome(
        status=described["status"],
        output=json.loads(described["output"]) if described.get("output") else None,
        error=described.get("error"),
        cause=described.get("cause"),
        history=history,
        execution_arn=execution_arn,
    )


def wait_until(condition, timeout: float = HANG_GUARD_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


def run(state_machine_arn: str, execution_input: Any, name: str = "exec-1") -> Outcome:
    return wait_for(start(state_machine_arn, execution_input, name))


def executions(state_machine_arn: str) -> list[Outcome]:
    """Every finished execution of a state machine (e.g. the attempts of the pipeline), oldest first."""
    client = boto3.client("stepfunctions", region_name=REGION)
    listed = client.list_executions(stateMachineArn=state_machine_arn)["executions"]
    return [wait_for(item["executionArn"]) for item in sorted(listed, key=lambda item: item["startDate"])]


def status_change_event(execution_arn: str, status: str) -> dict[str, Any]:
    """The EventBridge event the cleanup rule forwards to the cleanup machine."""
    return {
        "version": "0",
        "source": "aws.states",
        "detail-type": "Step Functions Execution Status Change",
        "account": ACCOUNT,
        "region": REGION,
        "resources": [execution_arn],
        "detail": {
            "executionArn": execution_arn,
            "stateMachineArn": execution_arn.replace(":execution:", ":stateMachine:").rsplit(":", 1)[0],
            "name": execution_arn.rsplit(":", 1)[1],
            "status": status,
        },
    }
