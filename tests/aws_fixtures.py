"""What the CLI tests put in moto's AWS: the pipeline's state machine published as its stack's output,
as `cdk deploy` leaves it, and training jobs named as the pipeline names them. The `aws` fixture
(tests/conftest.py) starts moto."""

from __future__ import annotations

import json

import boto3

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
ROLE = f"arn:aws:iam::{ACCOUNT}:role/trainstack-pipeline"
# Stand-ins for the pipeline's definition: one that succeeds at once, one that runs for the whole test.
SUCCEEDS = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "Result": {"attempts": 2}, "End": True}}}
KEEPS_RUNNING = {"StartAt": "Train", "States": {"Train": {"Type": "Wait", "Seconds": 3600, "End": True}}}


def state_machine(definition: dict) -> str:
    """The pipeline's state machine, found only through --state-machine-arn (no stack)."""
    return boto3.client("stepfunctions", region_name=REGION).create_state_machine(
        name="trainstack-pipeline", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]


def pipeline(definition: dict) -> str:
    """The pipeline's state machine published as the `StateMachineArn` output of stack trainstack-pipeline."""
    arn = state_machine(definition)
    publish_output("trainstack-pipeline", "StateMachineArn", arn)
    return arn


def publish_output(stack_name: str, key: str, value: str) -> None:
    """A deployed stack (in moto's CloudFormation) whose one output `key` is `value`, as the CLI reads it."""
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}, "Outputs": {key: {"Value": value}}}
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=stack_name, TemplateBody=json.dumps(template)
    )


def training_job(name: str, **fields) -> None:
    """A moto training job; `fields` adds CreateTrainingJob fields (e.g. TensorBoardOutputConfig)."""
    boto3.client("sagemaker", region_name=REGION).create_training_job(
        **fields,
        TrainingJobName=name,
        AlgorithmSpecification={
            "TrainingImage": "111111111111.dkr.ecr.us-east-1.amazonaws.com/t:1",
            "TrainingInputMode": "File",
        },
        RoleArn=ROLE,
        OutputDataConfig={"S3OutputPath": "s3://trainstack-artifacts/x/"},
        ResourceConfig={"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )
