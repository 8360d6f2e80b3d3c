"""The local Step Functions emulator: tiny JSONata state machines run in moto's interpreter."""

from __future__ import annotations

import hashlib
import json
import time
import uuid

import boto3
import pytest
from moto import mock_aws
from moto.sagemaker.responses import SageMakerResponse

from localaws.emulator import (
    ScaledClock,
    VirtualClock,
    aws_sdk_error_name,
    local_stepfunctions,
    modelled_error_codes,
    service_error,
)

REGION = "us-east-1"
ROLE_ARN = "arn:aws:iam::123456789012:role/states-test"


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture
def emulator():
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        with local_stepfunctions(VirtualClock()) as clock:
            yield clock


def jsonata_machine(states: dict, start_at: str | None = None, **top) -> dict:
    return {"QueryLanguage": "JSONata", "StartAt": start_at or next(iter(states)), "States": states, **top}


def run(definition: dict, execution_input: dict | None = None, timeout: float = 60) -> dict:
    """Run to the end; the described execution plus its history."""
    client = boto3.client("stepfunctions", region_name=REGION)
    arn = client.create_state_machine(
        name=f"m-{uuid.uuid4().hex[:8]}", definition=json.dumps(definition), roleArn=ROLE_ARN
    )["stateMachineArn"]
    execution_arn = client.start_execution(stateMachineArn=arn, input=json.dumps(execution_input or {}))[
        "executionArn"
    ]
    deadline = time.monotonic() + timeout
    while (described := client.describe_execution(executionArn=execution_arn))["status"] == "RUNNING":
        assert time.monotonic() < deadline, "execution still RUNNING"
        time.sleep(0.02)
    described["history"] = client.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
    return described


def output_of(expression: str, execution_input: dict | None = None, before: dict | None = None):
    """The value of the expression in a Pass state (after the states `before`, which lead to "Eval")."""
    states = {**(before or {}), "Eval": {"Type": "Pass", "Output": {"value": expression}, "End": True}}
    described = run(jsonata_machine(states, start_at=next(iter(states))), execution_input)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    return json.loads(described["output"])["value"]


# ---------------------------------------------------------------- Step Functions' JSONata functions


def test_partition_splits_into_chunks_with_a_shorter_last(emulator):
    assert output_of("{% $partition([1, 2, 3, 4, 5], 2) %}") == [[1, 2], [3, 4], [5]]


def test_range_includes_its_end_and_counts_down_with_a_negative_step(emulator):
    assert output_of("{% {'up': $range(0, 10, 2), 'down': $range(3, 1, -1)} %}") == {
        "up": [0, 2, 4, 6, 8, 10],
        "down": [3, 2, 1],
    }


def test_hash_is_the_hex_digest_of_the_named_algorithm(emulator):
    assert output_of("{% $hash('trainstack', 'SHA-256') %}") == hashlib.sha256(b"trainstack").hexdigest()
    assert output_of("{% $hash('trainstack', 'MD5') %}") == hashlib.md5(b"trainstack").hexdigest()


def test_hash_refuses_a_string_longer_than_ten_thousand_characters(emulator):
    assert (
        output_of("{% $hash($pad('', 10000, 'x'), 'SHA-256') %}") == hashlib.sha256(b"x" * 10000).hexdigest()
    )
    described = run(
        jsonata_machine(
            {"Eval": {"Type": "Pass", "Output": "{% $hash($pad('', 10001, 'x'), 'MD5') %}", "End": True}}
        )
    )
    assert (described["status"], described["error"]) == ("FAILED", "States.QueryEvaluationError")
    assert "at most 10000 characters" in described["cause"]


def test_random_is_a_fraction_and_repeats_for_a_seed(emulator):
    first, again, other, unseeded = output_of("{% [$random(7), $random(7), $random(8), $random()] %}")
    assert first == again != other
    assert all(0 <= value < 1 for value in (first, other, unseeded))


def test_uuid_is_a_version_4_uuid(emulator):
    assert uuid.UUID(output_of("{% $uuid() %}")).version == 4


def test_parse_reads_a_json_string_from_the_input(emulator):
    assert output_of("{% $parse($states.input.doc).a[1] %}", {"doc": '{"a": [1, "two"]}'}) == "two"


def test_a_failing_function_fails_the_state_with_states_query_evaluation_error(emulator):
    described = run(
        jsonata_machine({"Eval": {"Type": "Pass", "Output": "{% $hash('x', 'SHA-3') %}", "End": True}})
    )
    assert described["status"] == "FAILED"
    assert described["error"] == "States.QueryEvaluationError"
    assert "SHA-256" in described["cause"]


def test_string_variables_with_quotes_survive_assignment(emulator):
    definition = {"Keep": {"Type": "Pass", "Assign": {"text": "{% $states.input.text %}"}, "Next": "Eval"}}
    text = 'say "hi" \\ bye'
    assert output_of("{% $text & '!' %}", {"text": text}, before=definition) == text + "!"


def test_a_variable_between_two_divisions_is_bound(emulator):
    """AWS binds every variable; moto's extraction took `/ 1000 ... / 3600` for a regex literal and left
    `$seconds` unbound (the queued attempt's earlier training jobs were then counted forever)."""
    definition = {"Keep": {"Type": "Pass", "Assign": {"seconds": 7200}, "Next": "Eval"}}
    expression = "{% $millis() / 1000 > 0 ? $seconds / 3600 : 0 %}"
    assert output_of(expression, before=definition) == 2


# ---------------------------------------------------------------- the clock


def wait_then_measure(seconds: int) -> dict:
    return jsonata_machine(
        {
            "Before": {"Type": "Pass", "Assign": {"before": "{% $millis() %}"}, "Next": "Wait"},
            "Wait": {"Type": "Wait", "Seconds": seconds, "Next": "After"},
            "After": {
                "Type": "Pass",
                "Output": {
                    "elapsedMs": "{% $millis() - $before %}",
                    "sinceStartMs": "{% $millis() - $toMillis($states.context.Execution.StartTime) %}",
                    "now": "{% $now() %}",
                },
                "End": True,
            },
        }
    )


def test_a_two_day_wait_advances_millis_and_now_without_real_waiting(emulator):
    real_start = time.time()
    described = run(wait_then_measure(172800))
    real_seconds = time.time() - real_start
    output = json.loads(described["output"])
    two_days_ms = 172800 * 1000
    assert two_days_ms <= output["elapsedMs"] < two_days_ms + real_seconds * 1000 + 1000
    assert two_days_ms <= output["sinceStartMs"] < two_days_ms + real_seconds * 1000 + 1000
    assert output["now"].startswith(time.strftime("%Y-%m-%d", time.gmtime(real_start + 172800))[:7])
    assert emulator.waits == [172800]
    # History timestamps follow the clock too: the last event is two days after the first.
    history = described["history"]
    assert (history[-1]["timestamp"] - history[0]["timestamp"]).total_seconds() >= 172800


def test_retry_backoff_is_recorded_on_the_clock_not_slept(emulator, monkeypatch):
    always_throttled(monkeypatch)
    definition = jsonata_machine(
        {
            "Describe": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:sagemaker:describeTrainingJob",
                "Arguments": {"TrainingJobName": "job-1"},
                "Retry": [
                    {
                        "ErrorEquals": ["SageMaker.SageMakerException"],
                        "IntervalSeconds": 600,
                        "BackoffRate": 2,
                        "MaxAttempts": 3,
                    }
                ],
                "End": True,
            }
        }
    )
    real_start = time.time()
    described = run(definition)
    assert described["status"] == "FAILED"
    assert emulator.retry_sleeps == [600, 1200, 2400]
    assert time.time() - real_start < 600


def test_execution_timeout_is_measured_on_the_clock(emulator):
    definition = jsonata_machine(
        {
            "Wait": {"Type": "Wait", "Seconds": 7200, "Next": "TooLate"},
            "TooLate": {"Type": "Pass", "End": True},
        },
        TimeoutSeconds=3600,
    )
    described = run(definition)
    assert described["status"] == "TIMED_OUT"
    entered = [
        e["stateEnteredEventDetails"]["name"]
        for e in described["history"]
        if e["type"].endswith("StateEntered")
    ]
    assert entered == ["Wait"]


def test_scaled_clock_sleeps_waits_shortened_and_reports_their_full_length():
    clock = ScaledClock(speedup=1000)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}), local_stepfunctions(clock):
        real_start = time.monotonic()
        output = json.loads(run(wait_then_measure(1000))["output"])
        real_seconds = time.monotonic() - real_start
    assert output["elapsedMs"] >= 1000 * 1000
    assert real_seconds >= 1.0


# ---------------------------------------------------------------- aws-sdk error names


def always_throttled(monkeypatch, code: str = "ThrottlingException", message: str = "Rate exceeded"):
    def describe_training_job(self):
        raise service_error(code, message)

    monkeypatch.setattr(SageMakerResponse, "describe_training_job", describe_training_job)


def error_of_describe(monkeypatch, code: str, message: str) -> tuple[str, str]:
    always_throttled(monkeypatch, code, message)
    described = run(
        jsonata_machine(
            {
                "Describe": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::aws-sdk:sagemaker:describeTrainingJob",
                    "Arguments": {"TrainingJobName": "job-1"},
                    "End": True,
                }
            }
        )
    )
    assert described["status"] == "FAILED"
    return described["error"], described["cause"]


def test_an_error_code_in_sagemakers_model_is_named_after_it(emulator, monkeypatch):
    assert "ResourceLimitExceeded" in modelled_error_codes("sagemaker")
    error, cause = error_of_describe(monkeypatch, "ResourceLimitExceeded", "quota of ml.p5.48xlarge is 0")
    assert error == "SageMaker.ResourceLimitExceededException"
    assert cause.startswith(
        "quota of ml.p5.48xlarge is 0 (Service: SageMaker, Status Code: 400, Request ID: "
    )


@pytest.mark.parametrize(
    ("code", "message"),
    [("ThrottlingException", "Rate exceeded"), ("ValidationException", "Requested resource not found.")],
)
def test_an_error_code_outside_sagemakers_model_is_the_service_exception(
    emulator, monkeypatch, code, message
):
    assert code not in modelled_error_codes("sagemaker")
    error, cause = error_of_describe(monkeypatch, code, message)
    assert error == "SageMaker.SageMakerException"
    assert cause.startswith(f"{message} (Service: SageMaker, Status Code: 400, Request ID: ")


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ("ResourceLimitExceeded", "SageMaker.ResourceLimitExceededException"),
        ("ResourceInUse", "SageMaker.ResourceInUseException"),
        ("ResourceNotFound", "SageMaker.ResourceNotFoundException"),
        ("ConflictException", "SageMaker.ConflictException"),
        ("ThrottlingException", "SageMaker.SageMakerException"),
        ("ValidationException", "SageMaker.SageMakerException"),
        ("InternalFailure", "SageMaker.SageMakerException"),
    ],
)
def test_sagemaker_error_names_follow_the_api_model(code, name):
    assert aws_sdk_error_name("SageMaker", "sagemaker", code) == name


def test_a_camel_case_api_takes_pascal_case_arguments_and_answers_in_pascal_case(emulator):
    """Step Functions' own API (camelCase in its model) through aws-sdk:sfn, as AWS writes it."""
    described = run(
        jsonata_machine(
            {
                "Describe": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::aws-sdk:sfn:describeExecution",
                    "Arguments": {"ExecutionArn": "{% $states.context.Execution.Id %}"},
                    "Output": {"status": "{% $states.result.Status %}"},
                    "End": True,
                }
            }
        )
    )
    assert json.loads(described["output"]) == {"status": "RUNNING"}


def test_errors_of_a_camel_case_api_follow_its_model(emulator):
    missing = "arn:aws:states:us-east-1:123456789012:execution:nothing:here"
    described = run(
        jsonata_machine(
            {
                "Describe": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::aws-sdk:sfn:describeExecution",
                    "Arguments": {"ExecutionArn": missing},
                    "End": True,
                }
            }
        )
    )
    assert described["error"] == "Sfn.ExecutionDoesNotExistException"
