"""The emulator's JSONata engine is AWS's (jsonata 2.0.6 in Node): where it parts from a port, the product's
expressions do what they mean on AWS, and the Python that mirrors them reads alike. Each test evaluates the
product's own expression on the engine the state machines run on."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws

from localaws.emulator import VirtualClock, local_stepfunctions
from localaws.emulator import jsonata_engine as engine
from localaws.emulator.jsonata_engine import JsonataError, jsonata_evaluator
from stacks.pipeline.cost_cap_states import money
from stacks.pipeline.pipeline_input_rules import check_input_expression, profile_table
from stacks.pipeline.registry.evaluation_request import evaluation_metrics
from stacks.pipeline.registry.version_request import approved_facts, baseline, lineage
from tests.domain.conftest import S3_RESOURCES
from trainstack.cost_cap import usd
from trainstack.execution_input import InvalidInputError, validate_execution_input
from trainstack.faults import classify, fault_expression
from trainstack.registry import LINEAGE_KEYS

evaluate = jsonata_evaluator(VirtualClock())


@pytest.fixture(scope="module")
def settings():
    from tests.conftest import default_config_data
    from trainstack.config_loading import parse_settings

    return parse_settings(default_config_data(), {}, source="test config")


def input_problem(settings, execution_input: dict) -> str | None:
    states = {"input": execution_input, "context": {"Execution": {"Name": "exec"}}}
    bindings = {"states": states, "profiles": profile_table(settings.profiles, S3_RESOURCES)}
    result = evaluate(check_input_expression(settings), bindings)
    return result and result["problem"]


# ------------------------------------------------------------------ the six places the engines part


@pytest.mark.parametrize(
    ("field", "value"),
    [("runName", "trainstack-nightly\n"), ("resumeFrom", "s3://trainstack-checkpoints/trainstack-a/\n")],
)
def test_a_value_ending_in_a_newline_is_refused_by_the_pipeline_and_the_cli_alike(settings, field, value):
    """JavaScript's `$` matches no final newline: CheckInput refuses the value on AWS, and so does the
    Python check `trainstack start` runs first (Python's `$` would have let it through)."""
    profile = settings.profiles[0].name
    problem = input_problem(settings, {"profile": profile, field: value})
    assert problem is not None and field in problem
    with pytest.raises(InvalidInputError) as refused:
        validate_execution_input({"profile": profile, field: value}, settings, "exec")
    assert refused.value.field == field


# The registration table's metric of a profile without its own (evaluation_request.registry_table).
LOSS = {"metric": "loss", "goal": "minimize", "tolerance": 0.0}


def describe_model_package(version: int, loss: str) -> dict:
    return {
        "ModelPackageArn": f"arn:aws:sagemaker:us-east-1:123456789012:model-package/g/{version}",
        "ModelPackageVersion": version,
        "CustomerMetadataProperties": {LINEAGE_KEYS["loss"]: loss},
    }


@pytest.mark.parametrize(("written", "read"), [("2.5", 2.5), ("-0.5", -0.5), ("+2.5", None), (".5", None)])
def test_a_loss_jsonatas_number_cannot_read_is_no_loss_not_a_failed_state(written, read):
    """$number("+2.5") is error D3030 on AWS: such a loss reads as none (the gate then leaves the version
    pending, saying so) instead of failing the registration."""
    facts = evaluate(
        approved_facts(), {"states": {"result": describe_model_package(3, written)}, "settings": LOSS}
    )
    assert facts["value"] == read


def test_the_baseline_among_equal_losses_is_the_earliest_approved_version():
    """JavaScript's sort is stable and `$approved` is newest first: untied, the newest would win."""
    facts = {"evaluationSet": "h", "maxEvalTokens": "100", "seqLen": "1024"}
    approved = [{"version": 7, "value": 2.0, **facts}, {"version": 4, "value": 2.0, **facts}]
    approved.append({"version": 2, "value": 2.5, **facts})
    bindings = {
        "approved": approved,
        "datasetManifest": {"hash": "h"},
        "settings": {"maxEvalTokens": "100", **LOSS},
        "run": {"request": {"HyperParameters": {}}},
    }
    assert evaluate(baseline(), bindings)["version"] == 4


def test_evaluation_numbers_are_compared_as_they_are_written_into_the_metadata():
    """$string writes 15 significant digits and no exponent below 1e21 (235385266837020000): the loss the
    gate compares is the one a later registration reads back."""
    assert evaluate("$string(2.3538526683702e17)") == "235385266837020000"
    metrics = [
        {"MetricName": "evaluation:loss", "Value": 2.3456780910491943},  # SageMaker's float32 noise
        {"MetricName": "evaluation:perplexity", "Value": 2.353852668370199e17},
        {"MetricName": "evaluation:tokens", "Value": 4096},
    ]
    measured = evaluate(evaluation_metrics(), {"outcome": {"job": {"metrics": metrics}}, "settings": LOSS})
    bindings = {
        "evaluation": measured,
        "run": {"request": {"HyperParameters": {}}, "trainingJobs": []},
        "settings": LOSS,
        "datasetManifest": {"hash": "h"},
        "trainingSetManifest": {"hash": "t"},
    }
    written = evaluate(lineage(), bindings)
    read_back = evaluate(
        approved_facts(),
        {"states": {"result": describe_model_package(1, written["evaluation.loss"])}, "settings": LOSS},
    )
    assert read_back["value"] == measured["loss"] == measured["metric"]
    assert float(written["evaluation.perplexity"]) == measured["perplexity"]


def test_a_carriage_return_inside_a_failure_reason_keeps_its_class():
    """JavaScript's `.` does not match `\\r` (a progress bar's), Python's does: the table's JSONata reads
    `.` as Python does, so the attempt machine and trainstack.faults agree."""
    reason = "AlgorithmError: NCCL error in: init.cc:12, 40%|####\r 80%|########\r invalid usage, NCCL 2.21"
    in_jsonata = evaluate(fault_expression(json.dumps(reason)))
    assert (in_jsonata["class"], in_jsonata["kind"]) == ("user", "nccl-usage")
    assert classify(reason).kind == "nccl-usage"


@pytest.mark.parametrize(
    ("amount", "text"), [(302.245, "$302.24"), (302.255, "$302.26"), (1234.5, "$1,234.50")]
)
def test_dollars_round_half_to_even_in_the_machines_and_the_cli_alike(amount, text):
    """$formatNumber rounds ties to even on the number's decimal form (2.34565 -> 2.3456); trainstack's usd()
    prints the cost-cap sentences the machines print."""
    assert evaluate('$formatNumber(2.34565, "0.0000")') == "2.3456"
    assert evaluate(money(str(amount))) == text == usd(amount)


# ------------------------------------------------------------------ the engine itself


def test_variables_are_bindings_not_text():
    """Strings with quotes, backslashes and newlines arrive intact (moto wrote them into the text)."""
    tricky = 'a "quoted" \\ back\nslash'
    assert evaluate("$v & '!'", {"v": tricky}) == tricky + "!"


def test_errors_carry_jsonatas_code_and_eval_is_refused():
    with pytest.raises(JsonataError) as failed:
        evaluate('$number("+2.5")')
    assert failed.value.code == "D3030"
    with pytest.raises(JsonataError, match=r"\$eval is not supported"):
        evaluate("$eval('1')")


def test_a_dead_engine_is_started_again():
    assert evaluate("1 + 1") == 2
    os.kill(engine._NODE._process.pid, signal.SIGKILL)
    engine._NODE._process.wait()
    assert evaluate("2 + 2") == 4


def test_now_and_millis_are_the_clocks():
    """One instant per evaluation, the emulator clock's (here ten years from now), not the machine's."""
    clock = VirtualClock(datetime(2036, 12, 5, 13, 2, 9, tzinfo=UTC))
    before = clock.millis()
    at = jsonata_evaluator(clock)("{'now': $now(), 'millis': $millis(), 'again': $millis()}")
    assert before <= at["millis"] == at["again"] <= clock.millis()
    assert at["now"] == datetime.fromtimestamp(at["millis"] / 1000, UTC).isoformat(
        timespec="milliseconds"
    ).replace("+00:00", "Z")


def test_timestamps_reach_expressions_as_aws_writes_them(monkeypatch):
    """The context object's StartTime and EnteredTime, and an aws-sdk result's timestamps, are ISO 8601 with
    milliseconds and Z, as AWS writes them; jsonata's $toMillis reads that form (and refuses Python's)."""
    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
    }.items():
        monkeypatch.setenv(name, value)
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Describe",
        "States": {
            "Describe": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:sfn:describeStateMachine",
                "Arguments": {"StateMachineArn": "{% $states.context.StateMachine.Id %}"},
                "Output": "{% {'start': $states.context.Execution.StartTime, "
                "'entered': $states.context.State.EnteredTime, 'created': $states.result.CreationDate, "
                "'millis': $toMillis($states.context.Execution.StartTime)} %}",
                "End": True,
            }
        },
    }
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        local_stepfunctions(VirtualClock()),
    ):
        client = boto3.client("stepfunctions")
        machine = client.create_state_machine(
            name="timestamps", definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/r"
        )["stateMachineArn"]
        arn = client.start_execution(stateMachineArn=machine)["executionArn"]
        while (described := client.describe_execution(executionArn=arn))["status"] == "RUNNING":
            time.sleep(0.01)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    output = json.loads(described["output"])
    for key in ("start", "entered", "created"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", output[key]), output
    assert output["millis"] == round(described["startDate"].timestamp() * 1000)
    with pytest.raises(JsonataError):
        evaluate("$toMillis($t)", {"t": str(described["startDate"])})
