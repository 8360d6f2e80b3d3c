"""Who may use one team's pipeline: the team's start policy, a managed policy attached to the team's
principals
(or, keyed on a principal tag, wherever the platform team attaches it).

A Step Functions execution cannot see who started it, so the team's identity is its entry: the team's own
pipeline, whose definition names the team. Only this policy grants StartExecution on it; the inner machines
(attempt, registration, cleanup) are granted to nobody but the pipeline's own roles. The same policy lets the
team follow, stop and report its runs and approve or reject versions of its own model package groups
(`trainstack approve` / `reject` act within the caller's team because IAM allows nothing else).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.run_reader import RunReader
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import flatten_reference
from trainstack.job_request import NAMESPACE_TAG
from trainstack.teams import Team


class TeamAccess(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        team: Team,
        project: str,
        pipeline: sfn.StateMachine,
        stack: cdk.Stack | None = None,
        guarded_tag_keys: Sequence[str] = (),
        run_reader: RunReader | None = None,
    ) -> None:
        """`project` is the team's namespace (`<project>-<team>`): every name of its pipeline starts so.
        `guarded_tag_keys`: the principal tag keys any team of the deployment is authorized by, which no
        holder of this policy may set or remove.
        `run_reader`: the team's read path to its runs' jobs, logs and service jobs (run_reader.py).
        `stack`: the pipeline's stack (default: the scope's)."""
        super().__init__(scope, construct_id)
        stack = stack or cdk.Stack.of(scope)
        self.run_reader = run_reader
        statements = _statements(project, pipeline, stack)
        if run_reader is not None:
            statements.append(
                iam.PolicyStatement(
                    sid="ReadOwnRuns",
                    actions=["states:StartSyncExecution"],
                    resources=[run_reader.state_machine.state_machine_arn],
                )
            )
        if team.principal_tag is not None:
            for statement in statements:
                statement.add_condition(
                    "StringEquals", {f"aws:PrincipalTag/{team.principal_tag.key}": team.principal_tag.value}
                )
        if guarded_tag_keys:
            statements.append(_no_tag_changes(guarded_tag_keys))
        self.policy = iam.ManagedPolicy(
            self,
            "StartPolicy",
            managed_policy_name=f"{project}-start",
            description=f"Start, follow, stop and approve the runs of team {team.name} (trainstack)",
            statements=statements,
            roles=[
                iam.Role.from_role_arn(self, f"Role{index}", arn, mutable=False)
                for index, arn in enumerate(team.principals)
                if ":role/" in arn
            ],
            users=[
                iam.User.from_user_arn(self, f"User{index}", arn)
                for index, arn in enumerate(team.principals)
                if ":user/" in arn
            ],
        )
        reason = (
            f"The team's executions, jobs and model versions are named at run time under {project}-; "
            "ListModelPackages supports no resource types."
        )
        for statement in statements:
            for resource in statement.resources if statement.effect == iam.Effect.ALLOW else ():
                if "*" in resource:
                    finding = flatten_reference(stack.resolve(resource))
                    acknowledge(self.policy, f"AwsSolutions-IAM5[Resource::{finding}]", reason)
        cdk.CfnOutput(
            stack,
            "TeamStartPolicyArn",
            value=self.policy.managed_policy_arn,
            description=f"Attach to whoever may start team {team.name}'s runs",
        )


def _no_tag_changes(keys: Sequence[str]) -> iam.PolicyStatement:
    """A tag that authorizes must be one its holder cannot set: aws:PrincipalTag also reads session tags
    (sts:TagSession at AssumeRole, overriding the role's own) and tags a member puts on their own role or
    user. StartExecution carries no tags, so the key is guarded where it is set. Tag keys are
    case-insensitive in IAM, hence IgnoreCase."""
    return iam.PolicyStatement(
        sid="NoTeamTagChanges",
        effect=iam.Effect.DENY,
        actions=["sts:TagSession", "iam:TagRole", "iam:TagUser", "iam:UntagRole", "iam:UntagUser"],
        resources=["*"],
        conditions={"ForAnyValue:StringEqualsIgnoreCase": {"aws:TagKeys": sorted(set(keys))}},
    )


def _statements(project: str, pipeline: sfn.StateMachine, stack: cdk.Stack) -> list[iam.PolicyStatement]:
    """Start, list, follow and stop the pipeline's runs; find its stack; describe its jobs; decide on its
    model versions."""
    executions = stack.format_arn(
        service="states",
        resource="execution",
        resource_name=f"{project}-pipeline:*",  # the pipeline's name (training_state_machine.py)
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )
    statements = [
        iam.PolicyStatement(
            sid="StartRuns",
            actions=["states:StartExecution", "states:DescribeStateMachine"],
            resources=[pipeline.state_machine_arn],
        ),
        # ListExecutions authorizes a state machine or one of its map runs (both resource types are
        # listed in the Service Authorization Reference); the pipeline has no Map state, so no map run.
        iam.PolicyStatement(
            sid="ListRuns",
            actions=["states:ListExecutions"],
            resources=[
                pipeline.state_machine_arn,
                stack.format_arn(
                    service="states",
                    resource="mapRun",
                    resource_name=f"{project}-pipeline/*",
                    arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                ),
            ],
        ),
        iam.PolicyStatement(
            sid="FollowAndStopRuns",
            actions=["states:DescribeExecution", "states:GetExecutionHistory", "states:StopExecution"],
            resources=[executions],
        ),
        iam.PolicyStatement(
            sid="FindThePipeline",
            actions=["cloudformation:DescribeStacks"],
            resources=[stack.stack_id],
        ),
        # The settings the CLI reads with --deployment and --team (stacks/pipeline/client_settings.py).
        iam.PolicyStatement(
            sid="ReadClientSettings",
            actions=["ssm:GetParameter"],
            resources=[
                stack.format_arn(service="ssm", resource="parameter", resource_name=f"{project}/client")
            ],
        ),
        iam.PolicyStatement(
            sid="DescribeRunJobs",
            actions=["sagemaker:DescribeTrainingJob"],
            resources=[
                stack.format_arn(service="sagemaker", resource="training-job", resource_name=f"{project}-*")
            ],
        ),
        iam.PolicyStatement(
            sid="DecideOwnModelVersions",
            actions=["sagemaker:DescribeModelPackage", "sagemaker:UpdateModelPackage"],
            resources=[
                stack.format_arn(
                    service="sagemaker", resource="model-package", resource_name=f"{project}-*/*"
                )
            ],
        ),
        iam.PolicyStatement(
            sid="ListOwnModelVersions",
            actions=["sagemaker:ListModelPackages"],
            resources=["*"],  # no resource types (Service Authorization Reference)
        ),
    ]
    return statements


def only_own_service_jobs(role: iam.IRole, service_job_arn: str, namespace: str) -> None:
    """`role` terminates no service job tagged with another namespace: the shared queue holds every team's
    jobs, and the machines' own logic alone kept them to their own. Batch's `service-job` resource type
    takes aws:ResourceTag (Service Authorization Reference, AWS Batch). Every pipeline job carries the tag
    since release 0.5.0, before teams; a job without it (queued by an earlier release and still in flight
    at the upgrade) stays terminable, so that its run's time limit and cost cap still hold."""
    tag = f"aws:ResourceTag/{NAMESPACE_TAG}"
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="OnlyOwnServiceJobs",
            effect=iam.Effect.DENY,
            actions=["batch:TerminateServiceJob"],
            resources=[service_job_arn],
            conditions={"StringNotEquals": {tag: namespace}, "Null": {tag: "false"}},
        )
    )


def only_own_run_names(role: iam.IRole, table_arn: str, namespace: str) -> None:
    """`role` claims and reads only run names of its own namespace in the shared run-name table: its
    partition key is the run name, and dynamodb:LeadingKeys holds it (DynamoDB developer guide, "Using IAM
    policy conditions for fine-grained access control")."""
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="OnlyOwnRunNames",
            effect=iam.Effect.DENY,
            actions=["dynamodb:PutItem", "dynamodb:GetItem"],
            resources=[table_arn],
            conditions={"ForAnyValue:StringNotLike": {"dynamodb:LeadingKeys": [f"{namespace}-*"]}},
        )
    )
