"""The synthesized cleanup and sweeper machines in the emulator, against a scripted SageMaker, with a
stand-in pipeline whose executions create jobs as the real one names and tags them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from localaws.emulator import VirtualClock
from localaws.sagemaker import FakeSageMaker, scripted_sagemaker
from tests.pipeline import harness
from tests.pipeline.conftest import state_machines
from trainstack.job_request import EXECUTION_TAG, NAMESPACE_TAG

PIPELINE = "trainstack-pipeline"
# A request SageMaker's model accepts; the stand-in adds the run's name and tags.
REQUEST = {
    "AlgorithmSpecification": {
        "TrainingImage": f"{harness.ACCOUNT}.dkr.ecr.{harness.REGION}.amazonaws.com/trainstack:1",
        "TrainingInputMode": "File",
    },
    "RoleArn": harness.ROLE_ARN,
    "OutputDataConfig": {"S3OutputPath": "s3://trainstack-artifacts/"},
    "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
    "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
}


def stand_in_pipeline(timeout_seconds: int | None = None) -> dict[str, Any]:
    """What the pipeline does that cleanup relies on: job <runName>-1 (runName from the input, else
    trainstack-<execution name>) tagged with the execution's ARN and the namespace, then status calls
    about its run until it ends (the run name tells the fake which execution a held status call belongs
    to)."""
    run_name = (
        "($type($states.input.runName) = 'string' ? $states.input.runName : 'trainstack-' & "
        "$states.context.Execution.Name)"
    )
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "CreateJob",
        "States": {
            "CreateJob": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:sagemaker:createTrainingJob",
                "Arguments": {
                    **REQUEST,
                    "TrainingJobName": "{% " + run_name + " & '-1' %}",
                    "Tags": [
                        {"Key": EXECUTION_TAG, "Value": "{% $states.context.Execution.Id %}"},
                        {"Key": NAMESPACE_TAG, "Value": "trainstack"},
                    ],
                },
                "Next": "Wait",
            },
            "Wait": {"Type": "Wait", "Seconds": 600, "Next": "Status"},
            "Status": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:sagemaker:listTrainingJobs",
                "Arguments": {"NameContains": "{% " + run_name + " %}"},
                "Next": "Wait",
            },
        },
    }
    if timeout_seconds:
        definition["TimeoutSeconds"] = timeout_seconds
    return definition


def filled(properties: dict[str, Any], account: str) -> str:
    """A DefinitionString as CloudFormation would deploy it in the harness's account."""
    text = properties["DefinitionString"]
    if isinstance(text, dict):
        text = "".join("aws" if part == {"Ref": "AWS::Partition"} else part for part in text["Fn::Join"][1])
    # The sweeper knows its pipeline's executions by their full ARN.
    return text.replace(f":{account}:", f":{harness.ACCOUNT}:")


@dataclass(frozen=True)
class CleanupDefinitions:
    cleanup: str
    sweeper: str
    template: dict[str, Any]


@pytest.fixture(scope="session")
def definitions(default_app) -> CleanupDefinitions:
    settings, stacks, assembly = default_app
    template = assembly.get_stack_by_name(stacks.pipeline.stack_name).template
    machines = state_machines(template)
    project = settings.project
    assert f"{project}-pipeline" == PIPELINE
    return CleanupDefinitions(
        cleanup=filled(machines[f"{project}-job-cleanup"], settings.account),
        sweeper=filled(machines[f"{project}-job-sweeper"], settings.account),
        template=template,
    )


@dataclass
class World:
    fake: FakeSageMaker
    clock: VirtualClock
    cleanup_arn: str
    sweeper_arn: str
    pipeline_arn: str

    def start_pipeline(self, name: str, execution_input: dict | None = None) -> str:
        return harness.start(self.pipeline_arn, execution_input or {}, name)

    def stop_pipeline(self, execution_arn: str) -> None:
        boto3.client("stepfunctions", region_name=harness.REGION).stop_execution(
            executionArn=execution_arn, error="Cancelled", cause="operator"
        )

    def stop_during(self, call: str, name: str, execution_input: dict | None = None) -> str:
        """Start an execution and stop it while its SageMaker `call` is in flight; the call then returns
        (it was already on its way when the execution stopped)."""
        self.fake.control.hold(call)
        arn = self.start_pipeline(name, execution_input)
        harness.wait_until(lambda: self.fake.control.waiting[call])
        self.stop_pipeline(arn)
        self.fake.control.release_gate(call)
        return arn

    def status(self, execution_arn: str) -> str:
        client = boto3.client("stepfunctions", region_name=harness.REGION)
        return client.describe_execution(executionArn=execution_arn)["status"]

    def clean_up_after(self, execution_arn: str, name: str = "cleanup") -> harness.Outcome:
        """What the rule does when the execution has ended: start the cleanup with the event.

        EventBridge sends it once the execution has ended; moto reflects a stop on the execution's own
        thread, so wait for that end first."""
        ended = harness.wait_for(execution_arn).status
        return harness.run(self.cleanup_arn, harness.status_change_event(execution_arn, ended), name)

    def sweep(self, name: str = "sweep") -> harness.Outcome:
        return harness.run(self.sweeper_arn, {"source": "aws.events", "detail-type": "Scheduled Event"}, name)


@pytest.fixture
def world(definitions, monkeypatch) -> Iterator[World]:
    fake = scripted_sagemaker()
    with harness.pipeline_environment(fake, monkeypatch) as clock:
        fake.now = clock.time  # a job appears `create_latency` clock seconds after its create call
        world = World(
            fake=fake,
            clock=clock,
            cleanup_arn=harness.create_state_machine(definitions.cleanup, "trainstack-job-cleanup"),
            sweeper_arn=harness.create_state_machine(definitions.sweeper, "trainstack-job-sweeper"),
            pipeline_arn=harness.create_state_machine(json.dumps(stand_in_pipeline()), PIPELINE),
        )
        try:
            yield world
        finally:
            # A RUNNING stand-in would keep polling in later tests' sessions (and move their clocks).
            client = boto3.client("stepfunctions", region_name=harness.REGION)
            for machine in (world.pipeline_arn, world.cleanup_arn, world.sweeper_arn):
                running = client.list_executions(stateMachineArn=machine, statusFilter="RUNNING")
                for execution in running["executions"]:
                    world.stop_pipeline(execution["executionArn"])
            fake.control.release_all()
