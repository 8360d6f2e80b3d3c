"""Test-harness glue for running the synthesized state machine definitions in moto's Step Functions
interpreter against the scripted SageMaker (localaws.sagemaker): a session with both installed on a
virtual clock, Step Functions refusing StartExecution, and executions run and read back.

The interpreter itself runs as localaws.emulator makes it run: JSONata through jsonata 2.0.6 (AWS's
engine), AWS's error names (`SageMaker.<Code>Exception` for codes SageMaker's model declares,
SageMakerException for the rest) and a virtual clock, so that no test waits on the wall clock for a Wait
or a Retry.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from moto import mock_aws
from moto.core.responses import ActionResult
from moto.stepfunctions.responses import StepFunctionResponse

from localaws import clients
from localaws.emulator import VirtualClock, local_stepfunctions, service_error
from localaws.sagemaker import ACCOUNT, FakeSageMaker, install_fake_sagemaker
from localaws.sagemaker.calls import HANG_GUARD_SECONDS

REGION = "us-east-1"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/states-test"


@contextmanager
def pipeline_environment(fake: FakeSageMaker, monkeypatch) -> Iterator[VirtualClock]:
    """mock_aws with the interpreter enabled, `fake` installed, on a virtual clock."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
    install_fake_sagemaker(fake, monkeypatch)
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
        arn = self._get_param("stateMachineArn")
        # The machine itself or a version of it (`<ARN>:<version>`: parents start their children so).
        targeted = arn == refusals.state_machine_arn or arn.startswith(refusals.state_machine_arn + ":")
        if targeted and refusals.left > 0:
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
    """Create the machine and publish its version 1, which the parents' definitions name (a first deploy:
    stacks/pipeline/pinned_start.py)."""
    client = clients.client("stepfunctions", REGION)
    return client.create_state_machine(name=name, definition=definition, roleArn=ROLE_ARN, publish=True)[
        "stateMachineArn"
    ]


def start(state_machine_arn: str, execution_input: Any, name: str = "exec-1") -> str:
    client = clients.client("stepfunctions", REGION)
    return client.start_execution(
        stateMachineArn=state_machine_arn, name=name, input=json.dumps(execution_input)
    )["executionArn"]


def wait_for(execution_arn: str, timeout: float = HANG_GUARD_SECONDS) -> Outcome:
    client = clients.client("stepfunctions", REGION)
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
    client = clients.client("stepfunctions", REGION)
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
