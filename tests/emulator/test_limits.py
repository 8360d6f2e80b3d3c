"""Step Functions' hard limits in the emulator (localaws/emulator/limits.py): the 25,000-event history and the
256 KiB payloads end executions, states and tasks as AWS ends them, child executions included."""

from __future__ import annotations

import json
import uuid

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from localaws.emulator import VirtualClock, limits, local_stepfunctions
from tests.emulator.test_emulator import REGION, ROLE_ARN, jsonata_machine, run

BUCKET = "limits"
LIMIT = limits.PAYLOAD_LIMIT_BYTES
# `{"v":"` + text + `"}`: a state output whose compact JSON is the text's length plus 8 bytes.
WRAPPER_BYTES = len('{"v":""}')


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture
def emulator(request):
    """The emulator with a bucket; indirect parameters are local_stepfunctions' options."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        with local_stepfunctions(VirtualClock(), **getattr(request, "param", {})):
            yield


def text_of(length: int, character: str = "x") -> str:
    """A JSONata expression for a string of `length` characters."""
    return f"{{% $pad('', {length}, '{character}') %}}"


def objects() -> list[str]:
    listed = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET)
    return [item["Key"] for item in listed.get("Contents", [])]


def start(definition: dict, execution_input: str) -> dict:
    client = boto3.client("stepfunctions", region_name=REGION)
    arn = client.create_state_machine(
        name=f"m-{uuid.uuid4().hex[:8]}", definition=json.dumps(definition), roleArn=ROLE_ARN
    )["stateMachineArn"]
    return client.start_execution(stateMachineArn=arn, input=execution_input)


def events_of(described: dict, event_type: str) -> list[dict]:
    return [event for event in described["history"] if event["type"] == event_type]


def entered(described: dict) -> list[str]:
    """The names of the states the execution entered, in order."""
    return [
        event["stateEnteredEventDetails"]["name"]
        for event in described["history"]
        if "stateEnteredEventDetails" in event
    ]


# ---------------------------------------------------------------- the 25,000-event history


def put_loop(catch_all: bool = True) -> dict:
    """S3 PutObject in a loop, one new key per turn, every error caught."""
    catch = [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}] if catch_all else []
    return jsonata_machine(
        {
            "Start": {"Type": "Pass", "Assign": {"turn": 0}, "Next": "Put"},
            "Put": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:s3:putObject",
                "Arguments": {"Bucket": BUCKET, "Key": "{% 'turn-' & $string($turn) %}", "Body": "x"},
                "Assign": {"turn": "{% $turn + 1 %}"},
                "Catch": catch,
                "Next": "Again",
            },
            "Again": {
                "Type": "Choice",
                "Choices": [{"Condition": "{% $turn < 100000 %}", "Next": "Put"}],
                "Default": "Done",
            },
            "Caught": {"Type": "Succeed"},
            "Done": {"Type": "Succeed"},
        }
    )


def test_the_emulators_history_limit_is_aws_s():
    assert limits.HISTORY_EVENT_LIMIT == 25_000
    assert (
        limits.history_limit_cause() == "The execution reached the maximum number of history events (25000)."
    )


# One turn of the loop records 7 events: the limit lands on each of them once.
@pytest.mark.parametrize("limit", range(40, 47))
def test_an_execution_at_the_history_limit_fails_uncaught_and_calls_nothing_more(
    emulator, monkeypatch, limit
):
    # 25,000 events take minutes here; the rule is the same at any limit.
    monkeypatch.setattr(limits, "HISTORY_EVENT_LIMIT", limit)
    described = run(put_loop())

    assert (described["status"], described["error"]) == ("FAILED", "States.Runtime")
    assert described["cause"] == f"The execution reached the maximum number of history events ({limit})."
    history = described["history"]
    assert [event["id"] for event in history] == list(range(1, limit + 1))
    assert history[-1]["type"] == "ExecutionFailed"
    assert "Caught" not in entered(described), "the limit is no error a Catch handles"
    # Every PutObject made is one that AWS had started; none after the limit.
    assert len(objects()) == len(events_of(described, "TaskStarted"))


def test_a_child_execution_has_a_history_limit_of_its_own(emulator, monkeypatch):
    monkeypatch.setattr(limits, "HISTORY_EVENT_LIMIT", 30)
    client = boto3.client("stepfunctions", region_name=REGION)
    child = client.create_state_machine(
        name="child", definition=json.dumps(put_loop(catch_all=False)), roleArn=ROLE_ARN
    )["stateMachineArn"]
    parent = jsonata_machine(
        {
            "Child": {
                "Type": "Task",
                "Resource": "arn:aws:states:::states:startExecution.sync:2",
                "Arguments": {"StateMachineArn": child, "Name": "child-run", "Input": {}},
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "ChildFailed"}],
                "End": True,
            },
            "ChildFailed": {"Type": "Pass", "End": True},
        }
    )

    assert run(parent)["status"] == "SUCCEEDED", "the parent's own history stays small"
    (execution,) = client.list_executions(stateMachineArn=child)["executions"]
    described = client.describe_execution(executionArn=execution["executionArn"])
    assert (described["status"], described["error"]) == ("FAILED", "States.Runtime")
    assert described["cause"].endswith("history events (30).")


# ---------------------------------------------------------------- the 256 KiB payloads


@pytest.mark.parametrize(
    ("length", "status"), [(LIMIT - WRAPPER_BYTES, "SUCCEEDED"), (LIMIT - WRAPPER_BYTES + 1, "FAILED")]
)
def test_a_state_output_may_be_262144_bytes_and_not_one_more(emulator, length, status):
    described = run(jsonata_machine({"Big": {"Type": "Pass", "Output": {"v": text_of(length)}, "End": True}}))
    assert described["status"] == status
    if status == "FAILED":
        assert described["error"] == "States.DataLimitExceeded"
        assert described["cause"] == (
            "The state/task 'Big' returned a result with a size exceeding "
            "the maximum number of bytes service limit."
        )


def test_payloads_are_measured_in_utf8_bytes(emulator):
    """100,000 two-byte characters are 200,008 bytes: within the limit (JSON's \\u escapes would not be)."""
    described = run(
        jsonata_machine({"Big": {"Type": "Pass", "Output": {"v": text_of(100_000, "é")}, "End": True}})
    )
    assert described["status"] == "SUCCEEDED"


def overflowing_inside(kind: str) -> dict:
    """A Map or Parallel whose inner Pass outputs more than the limit, with a Catch on States.ALL."""
    inner = {
        "StartAt": "Big",
        "States": {"Big": {"Type": "Pass", "Output": {"v": text_of(LIMIT)}, "End": True}},
    }
    body = {"Items": [1], "ItemProcessor": inner} if kind == "Map" else {"Branches": [inner]}
    return jsonata_machine(
        {
            "Outer": {
                "Type": kind,
                **body,
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        }
    )


@pytest.mark.parametrize("kind", ["Map", "Parallel"])
def test_an_oversized_state_output_ends_the_execution_past_any_catch(emulator, kind):
    described = run(overflowing_inside(kind))
    assert (described["status"], described["error"]) == ("FAILED", "States.DataLimitExceeded")
    assert "Caught" not in entered(described)


def list_all(catchers: list[str]) -> dict:
    """ListObjectsV2 over the bucket (its answer is over the limit), with catchers for the errors named."""
    return jsonata_machine(
        {
            "List": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:s3:listObjectsV2",
                "Arguments": {"Bucket": BUCKET},
                "Output": {"keys": "{% $count($states.result.Contents) %}"},
                "Catch": [{"ErrorEquals": [name], "Next": "Caught"} for name in catchers],
                "End": True,
            },
            "Caught": {"Type": "Pass", "Output": "{% $states.input %}", "End": True},
        }
    )


@pytest.fixture
def listing_over_the_limit(emulator):
    s3 = boto3.client("s3", region_name=REGION)
    for index in range(300):  # 300 keys of 1,000 bytes: about 400 KB of answer
        s3.put_object(Bucket=BUCKET, Key=f"{index:04d}".ljust(1000, "k"), Body=b"")


def test_an_oversized_task_result_fails_the_task_with_data_limit_exceeded(listing_over_the_limit):
    described = run(list_all(["States.DataLimitExceeded"]))
    assert described["status"] == "SUCCEEDED", "a catcher naming the error catches it"
    assert json.loads(described["output"]) == {
        "Error": "States.DataLimitExceeded",
        "Cause": "The state/task 'aws-sdk:s3' returned a result with a size exceeding "
        "the maximum number of bytes service limit.",
    }


def test_states_all_does_not_catch_an_oversized_task_result_as_documented(listing_over_the_limit):
    described = run(list_all(["States.ALL"]))
    assert (described["status"], described["error"]) == ("FAILED", "States.DataLimitExceeded")


@pytest.mark.parametrize("emulator", [{"data_limit_caught_by_states_all": True}], indirect=True)
def test_states_all_catches_an_oversized_task_result_as_recorded_when_asked(listing_over_the_limit):
    described = run(list_all(["States.ALL"]))
    assert described["status"] == "SUCCEEDED"
    assert json.loads(described["output"])["Error"] == "States.DataLimitExceeded"


def test_oversized_task_parameters_fail_the_task_before_the_call(emulator):
    described = run(
        jsonata_machine(
            {
                "Put": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::aws-sdk:s3:putObject",
                    "Arguments": {"Bucket": BUCKET, "Key": "big", "Body": text_of(LIMIT)},
                    "Catch": [{"ErrorEquals": ["States.DataLimitExceeded"], "Next": "Caught"}],
                    "End": True,
                },
                "Caught": {"Type": "Pass", "End": True},
            }
        )
    )
    assert described["status"] == "SUCCEEDED"
    (failed,) = events_of(described, "TaskFailed")
    assert failed["taskFailedEventDetails"]["error"] == "States.DataLimitExceeded"
    assert "provided parameters with a size exceeding" in failed["taskFailedEventDetails"]["cause"]
    assert not events_of(described, "TaskScheduled") and objects() == []


def test_start_execution_takes_an_input_of_262144_bytes_and_not_one_more(emulator):
    passing = jsonata_machine({"Done": {"Type": "Pass", "End": True}})
    at_the_limit = json.dumps({"v": "x" * (LIMIT - WRAPPER_BYTES)}, separators=(",", ":"))
    assert "executionArn" in start(passing, at_the_limit)
    with pytest.raises(ClientError) as refused:
        start(passing, at_the_limit.replace('"x', '"xx'))
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "262144" in refused.value.response["Error"]["Message"]


def test_a_child_input_over_the_limit_fails_the_parent_task_and_starts_no_child(emulator):
    client = boto3.client("stepfunctions", region_name=REGION)
    child = client.create_state_machine(
        name="child",
        definition=json.dumps(jsonata_machine({"Done": {"Type": "Pass", "End": True}})),
        roleArn=ROLE_ARN,
    )["stateMachineArn"]
    parent = jsonata_machine(
        {
            "Child": {
                "Type": "Task",
                "Resource": "arn:aws:states:::states:startExecution.sync:2",
                "Arguments": {"StateMachineArn": child, "Name": "child-run", "Input": {"v": text_of(LIMIT)}},
                "End": True,
            }
        }
    )
    described = run(parent)
    assert (described["status"], described["error"]) == ("FAILED", "States.DataLimitExceeded")
    assert client.list_executions(stateMachineArn=child)["executions"] == []


def test_a_child_execution_has_payload_limits_of_its_own(emulator):
    client = boto3.client("stepfunctions", region_name=REGION)
    big = jsonata_machine({"Big": {"Type": "Pass", "Output": {"v": text_of(LIMIT)}, "End": True}})
    child = client.create_state_machine(name="child", definition=json.dumps(big), roleArn=ROLE_ARN)[
        "stateMachineArn"
    ]
    parent = jsonata_machine(
        {
            "Child": {
                "Type": "Task",
                "Resource": "arn:aws:states:::states:startExecution.sync:2",
                "Arguments": {"StateMachineArn": child, "Name": "child-run", "Input": {}},
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "ChildFailed"}],
                "End": True,
            },
            "ChildFailed": {"Type": "Pass", "End": True},
        }
    )
    assert run(parent)["status"] == "SUCCEEDED"
    (execution,) = client.list_executions(stateMachineArn=child)["executions"]
    described = client.describe_execution(executionArn=execution["executionArn"])
    assert (described["status"], described["error"]) == ("FAILED", "States.DataLimitExceeded")
