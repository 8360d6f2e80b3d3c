"""The run data key (`encryption:`, trainstack/encryption_settings.py) where the stacks use it: its key policy
for CloudWatch Logs, the pipeline's log groups, the training jobs' role, and the key the attempt machine's
CreateTrainingJob must name.

The storage stack owns the key; the pipeline stack reads it as `StorageStack.run_data_key` and carries its
ARN in PipelineResources.kms_key_arn, so that the requests, the grants and the conditions all name one key.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.logged_state_machine import execution_log_group_name
from trainstack.job_request import encrypts_volume
from trainstack.profiles import Profile

# What CloudWatch Logs does with a log group's key (CloudWatch Logs user guide, "Encrypt log data in
# CloudWatch Logs using AWS KMS", step 2's key policy). The guide's statement also lists kms:Describe*
# under the same condition, which never allows anything: DescribeKey has no encryption context condition
# key (Service Authorization Reference, AWS KMS), and a condition on an absent key fails.
CLOUDWATCH_LOGS_ACTIONS = ("kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*")
# S3 reads (Decrypt) and writes (GenerateDataKey; multipart uploads decrypt too) under SSE-KMS.
S3_OBJECT_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")


def cloudwatch_logs_statement(stack: cdk.Stack, sid: str, log_group_name: str) -> iam.PolicyStatement:
    """Key policy statement: CloudWatch Logs of the stack's Region may use the key for the log groups named
    `log_group_name` (a pattern) of the stack's account, as the guide's `kms:EncryptionContext:aws:logs:arn`
    condition limits it."""
    return iam.PolicyStatement(
        sid=sid,
        principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
        actions=list(CLOUDWATCH_LOGS_ACTIONS),
        resources=["*"],
        conditions={
            "ArnLike": {
                "kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                    service="logs",
                    resource="log-group",
                    resource_name=log_group_name,
                    arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                )
            }
        },
    )


def allow_pipeline_logs(key: kms.Key, project: str) -> None:
    """The pipeline's state machines log to `/aws/vendedlogs/states/<project>-...` (logged_state_machine.py):
    those log groups, no others of the account."""
    key.add_to_resource_policy(
        cloudwatch_logs_statement(
            cdk.Stack.of(key), "CloudWatchLogsOfThePipeline", execution_log_group_name(f"{project}-*")
        )
    )


def encrypt_log_groups(scope: Construct, key: kms.IKey) -> None:
    """Every log group under `scope` encrypted with the key (with control-tower, stacks/governed_account.py
    then puts its own stack's key there instead, as Control Tower's rules demand)."""
    for node in scope.node.find_all():
        if isinstance(node, logs.CfnLogGroup):
            node.kms_key_id = key.key_arn


def grant_training_jobs(role: iam.IRole, key: kms.IKey, profiles: Sequence[Profile]) -> None:
    """The training jobs' role: checkpoints and artifacts through S3, and, when a profile's requests name the
    key as VolumeKmsKeyId, the grant by which the volume's service uses it. SageMaker's labeling-job page
    ("Encrypt Output Data and Storage Volume with AWS KMS") gives the execution role kms:CreateGrant for
    VolumeKmsKeyId; assumed the same for training jobs, limited to grants for AWS resources."""
    key.grant(role, *S3_OBJECT_ACTIONS)
    if any(encrypts_volume(profile) for profile in profiles):
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="EncryptTrainingVolumes",
                actions=["kms:CreateGrant"],
                resources=[key.key_arn],
                conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            )
        )


def require_run_data_key(attempt_machine: sfn.StateMachine, job_arn: str, key_arn: str | None) -> None:
    """The attempt machine creates no training job that is not encrypted with the run data key: Deny
    statements, so that they hold whatever the Allow statements say. CreateTrainingJob's condition keys
    (Service Authorization Reference, SageMaker): `sagemaker:OutputKmsKeyArn` must be the key, and a request
    without it is denied too (a negated operator matches an absent key: IAM User Guide, "Condition
    operators"); `sagemaker:VolumeKmsKeyArn` must be the key where present (`Null: false` is "present"),
    and is absent on instance types with instance store volumes (trainstack/job_request.py)."""
    if key_arn is None:
        return
    for sid, condition in (
        ("OnlyJobsOutputWithTheRunDataKey", {"ArnNotEquals": {"sagemaker:OutputKmsKeyArn": key_arn}}),
        (
            "OnlyVolumesOfTheRunDataKey",
            {
                "Null": {"sagemaker:VolumeKmsKeyArn": "false"},
                "ArnNotEquals": {"sagemaker:VolumeKmsKeyArn": key_arn},
            },
        ),
    ):
        attempt_machine.add_to_role_policy(
            iam.PolicyStatement(
                sid=sid,
                effect=iam.Effect.DENY,
                actions=["sagemaker:CreateTrainingJob"],
                resources=[job_arn],
                conditions=condition,
            )
        )
