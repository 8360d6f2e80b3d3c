"""EventBridge rules starting state machine executions in the emulator (localaws/emulator/event_targets.py):
each of PutTargets' input forms reaches the execution as EventBridge documents it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws

from localaws.emulator.event_targets import install_state_machine_targets

REGION = "us-east-1"
DETAIL = {"bucket": {"name": "datasets"}, "object": {"key": "train/a.bin"}}


def started_input(monkeypatch, *, event_time: datetime | None = None, **target_input) -> dict:
    """The input of the one execution a matching event starts through a target with `target_input` (the
    event sent with PutEvents' Time `event_time`, if given)."""
    with mock_aws():
        install_state_machine_targets(monkeypatch)
        stepfunctions = boto3.client("stepfunctions", region_name=REGION)
        machine = stepfunctions.create_state_machine(
            name="target",
            definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
            roleArn="arn:aws:iam::123456789012:role/target",
        )["stateMachineArn"]
        events = boto3.client("events", region_name=REGION)
        events.put_rule(Name="objects", EventPattern=json.dumps({"source": ["aws.s3"]}))
        events.put_targets(
            Rule="objects",
            Targets=[
                {
                    "Id": "machine",
                    "Arn": machine,
                    "RoleArn": "arn:aws:iam::123456789012:role/events",
                    **target_input,
                }
            ],
        )
        entry = {"Source": "aws.s3", "DetailType": "Object Created", "Detail": json.dumps(DETAIL)}
        events.put_events(Entries=[{**entry, **({"Time": event_time} if event_time else {})}])
        [execution] = stepfunctions.list_executions(stateMachineArn=machine)["executions"]
        return json.loads(stepfunctions.describe_execution(executionArn=execution["executionArn"])["input"])


def test_without_an_input_form_the_execution_gets_the_whole_event(monkeypatch):
    """As AWS writes it: `time` in ISO 8601 (moto's is Unix seconds), no field of moto's own."""
    event = started_input(monkeypatch, event_time=datetime(2015, 11, 11, 21, 29, 54, tzinfo=UTC))
    assert (event["source"], event["detail-type"], event["detail"]) == ("aws.s3", "Object Created", DETAIL)
    assert event["time"] == "2015-11-11T21:29:54Z"
    assert set(event) == {
        "version",
        "id",
        "detail-type",
        "source",
        "account",
        "time",
        "region",
        "resources",
        "detail",
    }


@pytest.mark.parametrize(
    ("target_input", "expected"),
    [
        ({"Input": '{"profile": "small-torchrun"}'}, {"profile": "small-torchrun"}),
        ({"InputPath": "$.detail.object"}, {"key": "train/a.bin"}),
        (
            {
                "InputTransformer": {
                    "InputPathsMap": {"key": "$.detail.object.key", "bucket": "$.detail.bucket.name"},
                    "InputTemplate": '{"uri": "s3://<bucket>/<key>"}',
                }
            },
            {"uri": "s3://datasets/train/a.bin"},
        ),
        (
            {
                "InputTransformer": {
                    "InputPathsMap": {"object": "$.detail.object"},
                    "InputTemplate": '{"object": <object>, "rule": "<aws.events.rule-name>"}',
                }
            },
            {"object": {"key": "train/a.bin"}, "rule": "objects"},
        ),
    ],
    ids=["Input", "InputPath", "InputTransformer", "InputTransformer-json-and-rule-name"],
)
def test_each_input_form_shapes_the_execution_input(monkeypatch, target_input, expected):
    assert started_input(monkeypatch, **target_input) == expected


def test_the_event_variables_are_the_user_guides(monkeypatch):
    """aws.events.event is the event without its detail, aws.events.event.json the whole event, and the
    ingestion time when EventBridge received it, in ISO 8601 (user guide, "Amazon EventBridge input
    transformation", predefined variables): not the event's own, earlier Time."""
    template = (
        '{"event": <aws.events.event>, "whole": <aws.events.event.json>, '
        '"received": "<aws.events.event.ingestion-time>"}'
    )
    before = datetime.now(UTC).replace(microsecond=0)
    started = started_input(
        monkeypatch,
        event_time=datetime(2015, 11, 11, 21, 29, 54, tzinfo=UTC),
        InputTransformer={"InputTemplate": template},
    )
    after = datetime.now(UTC)
    assert "detail" not in started["event"] and started["event"]["source"] == "aws.s3"
    assert started["whole"]["detail"] == DETAIL and started["whole"]["source"] == "aws.s3"
    assert started["whole"]["time"] == started["event"]["time"] == "2015-11-11T21:29:54Z"
    received = datetime.strptime(started["received"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before <= received <= after


@pytest.mark.parametrize(
    "target_input",
    [
        {"InputPath": "$.detail.size"},
        {"InputTransformer": {"InputPathsMap": {"size": "$.detail.size"}, "InputTemplate": "<size>"}},
    ],
    ids=["InputPath", "InputPathsMap"],
)
def test_a_path_the_event_lacks_fails_loudly(monkeypatch, target_input):
    """No AWS source says what EventBridge passes for it: the emulator makes nothing up."""
    with pytest.raises(ValueError, match=r"the path \$\.detail\.size matches nothing in the event"):
        started_input(monkeypatch, **target_input)


def test_a_plain_text_template_cannot_start_a_state_machine(monkeypatch):
    """A plain-text InputTemplate is valid EventBridge (API reference, InputTransformer), but no JSON input
    for StartExecution: the emulator refuses it in one sentence instead of starting nothing in silence."""
    transformer = {"InputPathsMap": {"key": "$.detail.object.key"}, "InputTemplate": "<key> arrived"}
    with pytest.raises(ValueError, match="renders 'train/a.bin arrived', which is not JSON"):
        started_input(monkeypatch, InputTransformer=transformer)
