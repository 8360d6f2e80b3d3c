"""The queued attempt's state machine, as synthesized, in moto's interpreter against FakeBatch."""

from __future__ import annotations

import json
import threading
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.domain.conftest import FSX_RESOURCES
from tests.pipeline.harness import (
    CAPACITY_FAILURE,
    COMPLETED,
    STARTING,
    TRAINING,
    FakeSageMaker,
    wait_for,
)
from tests.queue.batch_moto import install_fake_batch
from tests.queue.fake_batch import FakeBatch
from trainstack.config import load_settings
from trainstack.emulator import VirtualClock, local_stepfunctions
from trainstack.job_request import RunRequest, build_create_training_job_request

REGION, ACCOUNT = "us-east-1", "123456789012"
QUEUE_ARN = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/trainstack-training"


def attempt_definition() -> str:
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from stacks.queued_training_attempt import QueuedTrainingAttempt

    stack = cdk.Stack(cdk.App(), "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    attempt = QueuedTrainingAttempt(
        stack,
        "Attempt",
        partition="aws",
        job_queue_arn=QUEUE_ARN,
        job_arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/trainstack-*",
        service_job_arn=f"arn:aws:batch:{REGION}:{ACCOUNT}:service-job/*",
    )
    sfn.StateMachine(
        stack,
        "Machine",
        definition_body=sfn.DefinitionBody.from_chainable(attempt.start),
        query_language=sfn.QueryLanguage.JSONATA,
    )
    template = cdk.assertions.Template.from_stack(stack).to_json()
    [machine] = [r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    definition = machine["Properties"]["DefinitionString"]
    pseudo = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": "amazonaws.com"}
    if isinstance(definition, str):
        return definition
    return "".join(part if isinstance(part, str) else pseudo[part["Ref"]] for part in definition["Fn::Join"][1])


DEFINITION = attempt_definition()


def attempt_input(run_name: str, *, instances: int | None = None, priority=None, share=None) -> dict[str, Any]:
    settings = load_settings(environ={})
    profile = settings.profiles[0]
    run = RunRequest(profile=profile.name, run_name=run_name, instance_count=instances)
    request = build_create_training_job_request(profile, FSX_RESOURCES, run, 1, f"arn:aws:states:{REGION}:{ACCOUNT}:execution:p:{run_name}")
    return {
        "request": request,
        "runName": run_name,
        "stopAtMillis": 0,
        "timeLimitSeconds": 3 * 24 * 3600,
        "throttles": 0,
        "priority": priority,
        "share": share,
    }


def install_fake_sagemaker(fake: FakeSageMaker, monkeypatch) -> None:
    from moto.core.responses import ActionResult, EmptyResult
    from moto.sagemaker.responses import SageMakerResponse

    handlers = {
        "create_training_job": lambda self: ActionResult(fake.create(json.loads(self.body))),
        "describe_training_job": lambda self: ActionResult(fake.describe(json.loads(self.body)["TrainingJobName"])),
        "stop_training_job": lambda self: (fake.stop(json.loads(self.body)["TrainingJobName"]), EmptyResult())[1],
    }
    for name, handler in handlers.items():
        monkeypatch.setattr(SageMakerResponse, name, handler, raising=False)


@pytest.fixture
def world(monkeypatch):
    for name, value in (("AWS_DEFAULT_REGION", REGION), ("AWS_ACCESS_KEY_ID", "t"), ("AWS_SECRET_ACCESS_KEY", "t")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
    sagemaker = FakeSageMaker(job_scripts=[[STARTING, TRAINING, TRAINING, COMPLETED]])
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}), local_stepfunctions(VirtualClock()) as clock:
        batch = FakeBatch(sagemaker=sagemaker, max_instances=2, now=clock.time)
        install_fake_batch(batch, monkeypatch)
        install_fake_sagemaker(sagemaker, monkeypatch)
        client = boto3.client("stepfunctions")
        arn = client.create_state_machine(name="attempt", definition=DEFINITION, roleArn=f"arn:aws:iam::{ACCOUNT}:role/x")["stateMachineArn"]
        yield client, arn, batch, sagemaker, clock


def run(client, arn, inputs: dict[str, dict]) -> dict[str, Any]:
    executions = {
        name: client.start_execution(stateMachineArn=arn, name=name, input=json.dumps(value))["executionArn"]
        for name, value in inputs.items()
    }
    return {name: wait_for(execution) for name, execution in executions.items()}


def test_one_attempt_completes_through_the_queue(world):
    client, arn, batch, sagemaker, _ = world
    outcome = run(client, arn, {"a": attempt_input("trainstack-a")})["a"]
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["status"] == "Completed"
    assert outcome.output["job"]["name"] == "trainstack-a-1"
    [(operation, submitted)] = [call for call in batch.calls if call[0] == "SubmitServiceJob"]
    assert json.loads(submitted["serviceRequestPayload"]) == attempt_input("trainstack-a")["request"]
    assert "schedulingPriority" not in submitted and "shareIdentifier" not in submitted


def test_debug(world):
    client, arn, batch, sagemaker, _ = world
    import logging, traceback
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service_aws_sdk as m
    orig = m.StateTaskServiceAwsSdk._eval_service_task
    def wrapped(self, *a, **k):
        try:
            return orig(self, *a, **k)
        except Exception:
            traceback.print_exc()
            raise
    m.StateTaskServiceAwsSdk._eval_service_task = wrapped
    outcome = run(client, arn, {"a": attempt_input("trainstack-a")})["a"]
    m.StateTaskServiceAwsSdk._eval_service_task = orig
