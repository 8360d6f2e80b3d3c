"""State machine versions in the emulator (localaws/emulator/versions.py): a parent keeps starting the version
its definition names after a newer one is published, and the child's executions are the machine's."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from localaws.emulator import VirtualClock, local_stepfunctions
from localaws.emulator.versions import deploy_state_machines
from tests.emulator.machines import parent_of_child
from tests.pipeline import harness

REGION = "us-east-1"
ROLE_ARN = "arn:aws:iam::123456789012:role/states-test"


def arn(name: str) -> str:
    return f"arn:aws:states:{REGION}:123456789012:stateMachine:{name}"


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        local_stepfunctions(VirtualClock()),
    ):
        yield


def child(release: str) -> str:
    return json.dumps(
        {
            "QueryLanguage": "JSONata",
            "StartAt": "Release",
            "States": {"Release": {"Type": "Pass", "Output": {"release": release}, "End": True}},
        }
    )


def template(release: str) -> dict:
    """A parent naming its child's published version, as the pipeline's template does."""
    return {
        "Resources": {
            "Child": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {"StateMachineName": "child", "DefinitionString": child(release)},
            },
            "ChildVersion": {
                "Type": "AWS::StepFunctions::StateMachineVersion",
                "Properties": {"StateMachineArn": {"Ref": "Child"}},
            },
            "Parent": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {
                    "StateMachineName": "parent",
                    "DefinitionString": {"Fn::Join": ["", [{"Ref": "ChildVersion"}]]},
                },
            },
        }
    }


def deploy(release: str) -> dict[str, str]:
    def definition(properties, versions):
        text = properties["DefinitionString"]
        return (
            text
            if isinstance(text, str)
            else parent_of_child(
                versions[text["Fn::Join"][1][0]["Ref"]], "{% $states.context.Execution.Name %}", Input={}
            )
        )

    return deploy_state_machines(template(release)["Resources"], definition, region=REGION, role_arn=ROLE_ARN)


def test_a_parent_starts_the_version_its_definition_names_and_the_machine_lists_its_executions():
    assert deploy("N") == {"ChildVersion": arn("child") + ":1"}
    old_parent = boto3.client("stepfunctions").describe_state_machine(stateMachineArn=arn("parent"))[
        "definition"
    ]
    assert deploy("N+1") == {"ChildVersion": arn("child") + ":2"}

    client = boto3.client("stepfunctions")
    old = client.create_state_machine(name="old-parent", definition=old_parent, roleArn=ROLE_ARN)
    assert harness.run(old["stateMachineArn"], {}, "old").output == {"release": "N"}
    assert harness.run(arn("parent"), {}, "new").output == {"release": "N+1"}
    # Both children are executions of the machine (on AWS an execution of a version is the machine's).
    assert [outcome.output for outcome in harness.executions(arn("child"))] == [
        {"release": "N"},
        {"release": "N+1"},
    ]
