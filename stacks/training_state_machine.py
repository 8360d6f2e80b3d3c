"""The training pipeline's Step Functions state machine: definition, role, logging and tracing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.training_state_machine_definition import (
    build_definition,
    definition_json,
    resource_value,
    substitution_names,
    with_placeholders,
)
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.job_request import PipelineResources
from trainstack.profiles import Profile

# What the state machine calls: the training jobs it names, nothing else in SageMaker.
TRAINING_JOB_ACTIONS = (
    "sagemaker:CreateTrainingJob",
    "sagemaker:DescribeTrainingJob",
    "sagemaker:StopTrainingJob",
    # CreateTrainingJob with Tags needs AddTags on the new job.
    "sagemaker:AddTags",
)


def literal_partition(scope: Construct) -> str:
    """The partition as text: Task Resource ARNs are validated as literals (cfn-lint E3601), and the
    stacks always have a region (config), from which CDK knows the partition."""
    partition = cdk.Stack.of(scope).partition
    if cdk.Token.is_unresolved(partition):
        raise ValueError("the pipeline stack needs a concrete region (config: region) to name its partition")
    return partition


def training_job_arn(scope: Construct, job_name_pattern: str) -> str:
    return cdk.Stack.of(scope).format_arn(
        service="sagemaker", resource="training-job", resource_name=job_name_pattern
    )


class TrainingStateMachine(Construct):
    """STANDARD JSONPath state machine; deploy-time values enter through DefinitionSubstitutions."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        profiles: Sequence[Profile],
        resources: PipelineResources,
        sagemaker_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        placeholders = with_placeholders(resources)
        self.definition = build_definition(
            profiles, project=project, partition=literal_partition(self), resources=placeholders
        )
        self.substitutions: Mapping[str, str] = {
            name: resource_value(resources, path) for name, path in substitution_names(resources).items()
        }
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/vendedlogs/states/{project}-pipeline",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description=f"{project} pipeline state machine: its own training jobs and passing their role",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="OwnTrainingJobs",
                actions=list(TRAINING_JOB_ACTIONS),
                resources=[training_job_arn(self, f"{project}-*")],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[sagemaker_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
            )
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=f"{project}-pipeline",
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(definition_json(self.definition)),
            definition_substitutions=dict(self.substitutions),
            role=self.role,
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True
            ),
        )
        acknowledge_wildcard_statements(
            self.role,
            {
                "OwnTrainingJobs": "Jobs are named per run and attempt at run time; "
                "the project prefix is the narrowest fixed scope."
            },
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5[Resource::*]",
            "CloudWatch Logs delivery and X-Ray actions, added by CDK for logging and tracing, "
            "support no resource-level permissions.",
        )
