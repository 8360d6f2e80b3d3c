"""Deploying into a governed account, applied to the whole app once it is built (trainstack/governance.py
holds the settings; README "Deploying into a governed account" the why).

- every IAM role gets the configured permissions boundary and path, those of CDK's own helpers included;
- every KMS key refuses grants that are not for an AWS service (Control Tower's CT.KMS.PR.3), in every mode;
- with compliance: control-tower, every log group is kept a year and encrypted with a key of its own stack
  (CT.CLOUDWATCH.PR.2/3; the rules accept only a key of the same template), and CDK's Lambda handlers run in
  the VPC (CT.LAMBDA.PR.3).

One walk from Python rather than Aspects, as in stacks/checkov_skips.py: every resource exists by now.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import IConstruct

from stacks.run_data_key import cloudwatch_logs_statement
from trainstack.config import Settings
from trainstack.governance import CONTROL_TOWER, GOVERNED_LOG_RETENTION_DAYS, IamSettings

IAM_ROLE = "AWS::IAM::Role"
LAMBDA_VPC_ACCESS_POLICY = "service-role/AWSLambdaVPCAccessExecutionRole"
LAMBDA_VPC_ACCESS_REASON = (
    "AWS's managed policy for Lambda functions in a VPC (CDK adds the same one): the network-interface "
    "actions Lambda performs for the function, which take no resource-level scope."
)


def handler_subnet_parameter_name(project: str) -> str:
    """SSM parameter where the network stack publishes the subnet of deployment handlers in other stacks."""
    return f"/{project}/network/handler-subnet-id"


def governed(settings: Settings) -> bool:
    return settings.compliance == CONTROL_TOWER


# CT.S3.PR.9 reads the top-level ObjectLockEnabled, which CloudFormation sets only on a new bucket: a bucket
# given Object Lock in place (migrations.object_lock_in_place) has it through ObjectLockConfiguration.
OBJECT_LOCK_RULE = "ct-s3-pr-9"


def governed_rules_waived(settings: Settings) -> list[str]:
    """The Control Tower rules synth does not check for this config (README, "Migrations")."""
    return [OBJECT_LOCK_RULE] if settings.migrations.object_lock_in_place else []


def synthesizer(bootstrap_qualifier: str | None) -> cdk.IStackSynthesizer | None:
    """The stack synthesizer for the configured bootstrap qualifier (None: CDK's default bootstrap)."""
    if bootstrap_qualifier is None:
        return None
    return cdk.DefaultStackSynthesizer(qualifier=bootstrap_qualifier)


def apply_governance(stacks: Sequence[cdk.Stack], iam_settings: IamSettings, *, governed: bool) -> None:
    for stack in stacks:
        constructs = stack.node.find_all()
        resources = [node for node in constructs if isinstance(node, cdk.CfnResource)]
        _constrain_roles(stack, resources, iam_settings)
        for key in (node for node in constructs if isinstance(node, kms.Key)):
            deny_grants_not_for_aws_services(key)
        if governed:
            log_groups = [node for node in resources if isinstance(node, logs.CfnLogGroup)]
            if log_groups:
                _encrypt_and_keep(stack, log_groups)


def _constrain_roles(stack: cdk.Stack, resources: Iterable[cdk.CfnResource], settings: IamSettings) -> None:
    if settings.permissions_boundary is not None:
        # CDK's own aspect: it also reaches the roles of CDK's custom-resource providers (plain CfnResources).
        boundary = iam.ManagedPolicy.from_managed_policy_arn(
            stack, "PermissionsBoundary", settings.permissions_boundary
        )
        iam.PermissionsBoundary.of(stack).apply(boundary)
    if settings.role_path != "/":
        for resource in resources:
            if resource.cfn_resource_type == IAM_ROLE:
                resource.add_property_override("Path", settings.role_path)


def deny_grants_not_for_aws_services(key: kms.Key) -> None:
    """CT.KMS.PR.3: only AWS services, for AWS resources, may create grants on the key (as S3, SNS and
    CloudWatch Logs do); nothing of trainstack creates grants itself."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="DenyGrantsNotForAwsServices",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=["kms:CreateGrant"],
            resources=["*"],
            conditions={
                "BoolIfExists": {"kms:GrantIsForAWSResource": "false", "aws:PrincipalIsAWSService": "false"}
            },
        )
    )


def _encrypt_and_keep(stack: cdk.Stack, log_groups: list[logs.CfnLogGroup]) -> None:
    key = kms.Key(
        stack,
        "LogsKey",
        description=f"{stack.stack_name} CloudWatch log groups",
        enable_key_rotation=True,
        removal_policy=cdk.RemovalPolicy.RETAIN,  # logs kept a year stay readable after the stack goes
    )
    # CloudWatch Logs encrypts with the key itself, limited to this account's log groups.
    key.add_to_resource_policy(cloudwatch_logs_statement(stack, "CloudWatchLogsOfThisAccount", "*"))
    deny_grants_not_for_aws_services(key)
    for log_group in log_groups:
        log_group.kms_key_id = key.key_arn
        retention = log_group.retention_in_days
        if retention is not None and retention < GOVERNED_LOG_RETENTION_DAYS:
            log_group.retention_in_days = GOVERNED_LOG_RETENTION_DAYS


def place_provider_in_vpc(
    provider: IConstruct, subnet_ids: Sequence[str], security_group: ec2.ISecurityGroup
) -> None:
    """Run a CDK custom-resource provider's handler (CT.LAMBDA.PR.3) in the given subnets; its role gets
    what Lambda needs to attach the function to them."""
    handler: cdk.CfnResource = provider.node.find_child("Handler")
    role: cdk.CfnResource = provider.node.find_child("Role")
    handler.add_property_override(
        "VpcConfig", {"SubnetIds": list(subnet_ids), "SecurityGroupIds": [security_group.security_group_id]}
    )
    role.add_property_override(
        "ManagedPolicyArns",
        [
            iam.ManagedPolicy.from_aws_managed_policy_name(name).managed_policy_arn
            for name in ("service-role/AWSLambdaBasicExecutionRole", LAMBDA_VPC_ACCESS_POLICY)
        ],
    )
