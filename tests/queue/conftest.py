"""Queue tests: JSONata chains synthesized into definitions and run in the local emulator against
FakeBatch and FakeSageMaker."""

from __future__ import annotations

from collections.abc import Callable

import boto3
import pytest
from moto import mock_aws

from localaws.emulator import VirtualClock, local_stepfunctions
from localaws.emulator.batch_routes import install_fake_batch
from localaws.emulator.fake_batch import FakeBatch
from localaws.sagemaker import COMPLETED, STARTING, TRAINING, install_fake_sagemaker, scripted_sagemaker
from stacks.pipeline.queue.run_names import RUN_NAME_KEY, RunNameTable
from trainstack.queue_settings import run_names_table_name, service_job_name, training_queue_name

REGION, ACCOUNT = "us-east-1", "123456789012"
QUEUE_NAME = training_queue_name("trainstack")
QUEUE_ARN = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/{QUEUE_NAME}"
SERVICE_JOB_ARN = f"arn:aws:batch:{REGION}:{ACCOUNT}:service-job/*"
JOB_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/trainstack-*"
RUN_NAMES = RunNameTable(
    run_names_table_name("trainstack"),
    f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{run_names_table_name('trainstack')}",
)
PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::URLSuffix": "amazonaws.com",
}


def service_job(training_job_name: str) -> str:
    """The service job the pipeline submits for training job `<run>-<attempt>` (trainstack.queue_settings)."""
    run, _, attempt = training_job_name.rpartition("-")
    return service_job_name(QUEUE_NAME, run, int(attempt))


def definition_of(build: Callable[[object], object]) -> str:
    """The definition of a JSONata state machine whose chain `build(stack)` returns, as deployed here."""
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    stack = cdk.Stack(cdk.App(), "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    sfn.StateMachine(
        stack,
        "Machine",
        definition_body=sfn.DefinitionBody.from_chainable(build(stack)),
        query_language=sfn.QueryLanguage.JSONATA,
    )
    template = cdk.assertions.Template.from_stack(stack).to_json()
    [machine] = [r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    definition = machine["Properties"]["DefinitionString"]
    if isinstance(definition, str):
        return definition
    return "".join(
        part if isinstance(part, str) else PSEUDO[part["Ref"]] for part in definition["Fn::Join"][1]
    )


@pytest.fixture
def queue_world(monkeypatch):
    for name, value in (
        ("AWS_DEFAULT_REGION", REGION),
        ("AWS_ACCESS_KEY_ID", "t"),
        ("AWS_SECRET_ACCESS_KEY", "t"),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
    sagemaker = scripted_sagemaker(job_scripts=[[STARTING, TRAINING, TRAINING, COMPLETED]])
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        local_stepfunctions(VirtualClock()) as clock,
    ):
        batch = FakeBatch(sagemaker=sagemaker, max_instances=2, now=clock.time)
        install_fake_batch(batch, monkeypatch)
        install_fake_sagemaker(sagemaker, monkeypatch)
        # The queued attempt claims its run name here (stacks/pipeline/queue/run_names.py).
        boto3.client("dynamodb").create_table(
            TableName=RUN_NAMES.name,
            KeySchema=[{"AttributeName": RUN_NAME_KEY, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": RUN_NAME_KEY, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield boto3.client("stepfunctions"), batch, sagemaker, clock


def create_machine(client, name: str, definition: str) -> str:
    return client.create_state_machine(
        name=name, definition=definition, roleArn=f"arn:aws:iam::{ACCOUNT}:role/x"
    )["stateMachineArn"]
